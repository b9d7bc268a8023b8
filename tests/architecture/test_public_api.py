"""The public surface of each package is pinned: changing it is a reviewed decision."""

from __future__ import annotations

import importlib

import pytest

PINNED: dict[str, list[str]] = {
    "core": [
        "Aborted",
        "Clock",
        "Completed",
        "Completing",
        "Conversation",  # deprecated alias of ConversationRecord
        "ConversationRecord",
        "DocDefinition",
        "DocHandle",
        "DocumentError",
        "Engine",
        "Entry",
        "ErrorInfo",
        "Failed",
        "Faulted",
        "InvalidCursor",
        "InvalidInput",
        "InvalidJson",
        "InvocationEnded",
        "JsonObject",
        "JsonValue",
        "MemoryStorage",
        "Orphaned",
        "Outcome",
        "Pending",
        "PerdureError",
        "ReadAfterWrite",
        "Running",
        "Session",
        "SessionClosed",
        "SessionError",
        "SessionPoisoned",
        "SqlDatabase",
        "SqliteStorage",
        "Storage",
        "StorageClosed",
        "StorageCorrupt",
        "StorageError",
        "StorageRejected",
        "Submission",  # deprecated alias of SubmissionRecord
        "SubmissionRecord",
        "Task",
        "TaskDefinition",
        "TaskError",
        "TaskNotFound",
        "TaskRegistry",
        "TaskRuntime",
        "TaskState",
        "TaskStateError",
        "Terminal",
        "TimerHandle",
        "TransactionSettled",
        "Tx",
        "UnknownRecord",
        "UnknownTaskKind",
        "Waiting",
        "define_doc",
        "define_task",
        "json_copy",
    ],
    "core.faux": [
        "FAUX_MODEL",
        "FauxModel",
        "FauxReply",
        "FauxState",
        "FauxStep",
        "faux_block",
        "faux_deferred",
        "faux_error",
        "faux_message",
        "faux_text",
        "faux_tool_call",
    ],
    "core.storage": [
        "Cursor",
        "DocumentChange",
        "DocumentCopy",
        "DocumentCreate",
        "DocumentRetire",
        "MemoryState",
        "MemoryStorage",
        "Order",
        "Page",
        "SqlDatabase",
        "SqlExecutor",
        "SqliteStorage",
        "Storage",
        "Write",
        "scan_all",
    ],
    "core.session": [
        "CommitEvent",
        "DocDefinition",
        "DocHandle",
        "DocumentEvent",
        "ForkPolicy",
        "Session",
        "TaskLayer",
        "Tx",
        "WaiterRegistry",
        "define_doc",
        "ensure_outside_commit",
        "in_commit",
    ],
    "core.tasks": [
        "AbortHandler",
        "CancelSignal",
        "Inspection",
        "Migrate",
        "NextState",
        "PhaseHandler",
        "Scheduler",
        "SettleHook",
        "TaskDefinition",
        "TaskFactory",
        "TaskRegistry",
        "TaskRuntime",
        "TaskSource",
        "TaskView",
        "define_task",
    ],
    "core.testing": [
        "CommitFault",
        "DelegatingStorage",
        "EnvCase",
        "EnvFactory",
        "FaultyStorage",
        "ReopeningStorage",
        "StorageCase",
        "StorageCrashed",
        "TwoPhaseCase",
        "VirtualClock",
        "env_cases",
        "storage_cases",
        "two_phase_cases",
    ],
    "runtimes.models": [
        "DEFAULT_OPTIONS",
        "LitellmModel",
        "LitellmModels",
        "ModelRouter",
        "OpenAICompatibleModels",
        "OpenAIModel",
        "Pricing",
        "close_litellm_clients",
    ],
    "core.harness": [
        "HARNESS_KINDS",
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
    ],
    "runtimes.local": [
        "AioSqliteDatabase",
        "ServingCollector",
        "Sqlite3Database",
        "SystemClock",
        "open_sqlite_storage",
    ],
    "runtimes.local.host": [
        "ActorHost",
        "ActorLock",
        "HostConfig",
        "LocalStore",
        "WakeHeap",
        "actor_paths",
    ],
    "runtimes.local.server": [
        "HostServer",
        "bind",
        "make_server",
    ],
    "runtimes.actor": [
        "ACTOR_ID_PATTERN",
        "ActorConfig",
        "ActorEnvProvider",
        "ActorLocked",
        "ActorPool",
        "ActorStore",
        "Host",
        "HostClosed",
        "HostError",
        "HostObserver",
        "InvalidActorId",
        "ListableStore",
        "ListingUnsupported",
        "OpenActor",
        "Reporter",
        "StoreLease",
        "UnknownActor",
        "check_actor_id",
    ],
    "runtimes.actor.api": [
        "ApiConfig",
        "create_app",
        "new_api_token",
    ],
}


def _isort_style(name: str) -> tuple[int, str]:
    """Constants first, then classes, then the rest (the order ruff's RUF022 keeps)."""
    if name.isupper():
        return 0, name
    return (1 if name[:1].isupper() else 2), name


@pytest.mark.parametrize("package", sorted(PINNED))
def test_public_api_is_pinned_sorted_and_importable(package: str) -> None:
    module = importlib.import_module(package)
    exported = list(module.__all__)
    assert exported == sorted(exported, key=_isort_style), f"{package}.__all__ is not sorted"
    assert exported == PINNED[package]
    for name in exported:
        assert getattr(module, name) is not None


def test_the_deprecated_conversation_name_is_the_record() -> None:
    """``core.Conversation`` was the record's name until it was renamed
    ``ConversationRecord`` (it clashed with the handle ``core.harness.Conversation``);
    the old name stays importable as the same class."""
    core = importlib.import_module("core")
    records = importlib.import_module("core.records")
    harness = importlib.import_module("core.harness")
    assert core.Conversation is core.ConversationRecord is records.ConversationRecord
    assert core.Conversation is not harness.Conversation


def test_the_deprecated_submission_name_is_the_record() -> None:
    """``core.Submission`` likewise stays the record ``SubmissionRecord``, apart from
    the handle ``core.harness.Submission``."""
    core = importlib.import_module("core")
    records = importlib.import_module("core.records")
    harness = importlib.import_module("core.harness")
    assert core.Submission is core.SubmissionRecord is records.SubmissionRecord
    assert core.Submission is not harness.Submission
