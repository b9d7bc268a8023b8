"""perdure core: the runtime-agnostic durable kernel.

Nothing here touches the operating system: storage, time, models and tool execution
arrive through ports (:class:`Storage`, :class:`Clock`, :class:`core.harness.Models` and
:class:`core.env.ExecutionEnv`), so the same code runs in a local process, a Durable
Object or a Lambda invocation.
"""

from typing import TYPE_CHECKING, Any

from core.clock import Clock, TimerHandle
from core.engine import Engine
from core.errors import (
    DocumentError,
    InvalidCursor,
    InvalidInput,
    InvalidJson,
    InvocationEnded,
    PerdureError,
    ReadAfterWrite,
    SessionClosed,
    SessionError,
    SessionPoisoned,
    StorageClosed,
    StorageCorrupt,
    StorageError,
    StorageRejected,
    TaskError,
    TaskNotFound,
    TaskStateError,
    TransactionSettled,
    UnknownRecord,
    UnknownTaskKind,
)
from core.jsonvalue import JsonObject, JsonValue, json_copy
from core.records import (
    Aborted,
    Completed,
    Completing,
    ConversationRecord,
    Entry,
    ErrorInfo,
    Failed,
    Faulted,
    Orphaned,
    Outcome,
    Pending,
    Running,
    SubmissionRecord,
    Task,
    TaskState,
    Terminal,
    Waiting,
)
from core.session import DocDefinition, DocHandle, Session, Tx, define_doc
from core.storage import SqlDatabase, SqliteStorage, Storage
from core.tasks import TaskDefinition, TaskRegistry, TaskRuntime, define_task

if TYPE_CHECKING:
    from core.storage.memory import MemoryStorage


def __getattr__(name: str) -> Any:
    # ``MemoryStorage`` loads on first use (PEP 562): :mod:`core.storage` resolves it.
    if name == "MemoryStorage":
        import core.storage

        return core.storage.MemoryStorage
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Aborted",
    "Clock",
    "Completed",
    "Completing",
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
]
