"""The agent harness: conversations, submissions, generation and tool tasks, models."""

from core.harness.harness import Conversation, EnvFactory, Harness, Submission, WhenBusy
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
from core.harness.settings import (
    CompactionSettings,
    HarnessSettings,
    ProgressSettings,
    RetrySettings,
)
from core.harness.tools import ToolContext, ToolResult

__all__ = [
    "AssistantMessage",
    "Block",
    "CompactionSettings",
    "Conversation",
    "EnvFactory",
    "Extension",
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
    "ResolvedAgent",
    "RetrySettings",
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
    "WhenBusy",
    "define_extension",
    "define_tool",
    "section",
]
