"""The agent harness: conversations, submissions, generation and tool tasks, models."""

import importlib
from typing import TYPE_CHECKING, Any

from core.harness.approvals import MAX_APPROVAL_NOTE_CHARS
from core.harness.harness import (
    HARNESS_KINDS,
    Answer,
    Conversation,
    EnvFactory,
    Harness,
    Reminder,
    Submission,
    WhenBusy,
    agent_change,
    write_draft,
)
from core.harness.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from core.harness.models import ModelError, ModelInfo, ModelRequest, Models
from core.harness.registry import (
    Block,
    Extension,
    Hooks,
    Registry,
    ReplayPolicy,
    ResolvedAgent,
    Section,
    ToolDefinition,
    ToolSource,
    define_extension,
    define_tool,
    section,
)
from core.harness.settings import (
    CompactionSettings,
    HarnessSettings,
    ProgressSettings,
    RetrySettings,
)
from core.harness.tool_sources import TOOL_SOURCES
from core.harness.tools import ToolContext, ToolResult
from core.harness.watch import Frame, Watch

if TYPE_CHECKING:
    from core.harness.reminders import MAX_DELAY_S, MAX_REMINDER_CHARS, reminders_extension
    from core.harness.schedules import Schedule, ScheduleArgs

# Reminders and schedules are resolved on first access (PEP 562), not at import: the
# harness opens and runs turns without them, and a fresh Pyodide isolate compiles every
# module it imports (issue 36; see core/harness/harness.py).
_LAZY = {
    "MAX_DELAY_S": "reminders",
    "MAX_REMINDER_CHARS": "reminders",
    "reminders_extension": "reminders",
    "Schedule": "schedules",
    "ScheduleArgs": "schedules",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "HARNESS_KINDS",
    "MAX_APPROVAL_NOTE_CHARS",
    "MAX_DELAY_S",
    "MAX_REMINDER_CHARS",
    "TOOL_SOURCES",
    "Answer",
    "AssistantMessage",
    "Block",
    "CompactionSettings",
    "Conversation",
    "EnvFactory",
    "Extension",
    "Frame",
    "Harness",
    "HarnessSettings",
    "Hooks",
    "Message",
    "ModelError",
    "ModelInfo",
    "ModelRequest",
    "Models",
    "ProgressSettings",
    "Registry",
    "Reminder",
    "ReplayPolicy",
    "ResolvedAgent",
    "RetrySettings",
    "Schedule",
    "ScheduleArgs",
    "Section",
    "Submission",
    "SystemMessage",
    "TextBlock",
    "ThinkingBlock",
    "ToolCall",
    "ToolContext",
    "ToolDefinition",
    "ToolResult",
    "ToolResultMessage",
    "ToolSource",
    "Usage",
    "UserMessage",
    "Watch",
    "WhenBusy",
    "agent_change",
    "define_extension",
    "define_tool",
    "reminders_extension",
    "section",
    "write_draft",
]
