"""The agent harness: conversations, submissions, generation and tool tasks, models."""

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
    ResolvedAgent,
    Section,
    ToolDefinition,
    define_extension,
    define_tool,
    section,
)
from core.harness.reminders import MAX_DELAY_S, MAX_REMINDER_CHARS, reminders_extension
from core.harness.schedules import Schedule, ScheduleArgs
from core.harness.settings import (
    CompactionSettings,
    HarnessSettings,
    ProgressSettings,
    RetrySettings,
)
from core.harness.tools import ToolContext, ToolResult
from core.harness.watch import Frame, Watch

__all__ = [
    "HARNESS_KINDS",
    "MAX_APPROVAL_NOTE_CHARS",
    "MAX_DELAY_S",
    "MAX_REMINDER_CHARS",
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
