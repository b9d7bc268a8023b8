"""Errors raised by the perdure core.

::

    PerdureError
    ├── InvalidInput           bad input, refused before any write (the API's 422)
    │   └── InvalidJson        a value is not plain JSON, or cannot be stored and served back
    ├── StorageError           raised by a Storage adapter
    │   ├── StorageRejected    guaranteed no effect; the session stays usable
    │   │   ├── StorageClosed        the storage was closed
    │   │   └── UnknownRecord        a read or write names a record that does not exist
    │   ├── InvalidCursor      a cursor that does not belong to this scan
    │   └── StorageCorrupt     stored data cannot be decoded (open or read fails)
    ├── SessionError
    │   ├── SessionClosed      the session (or harness) is closed or closing
    │   ├── SessionPoisoned    an uncertain storage failure; reopen the storage
    │   ├── ReadAfterWrite     a table read after the first table write of a transaction
    │   ├── TransactionSettled a transaction handle used after its commit ended
    │   └── DocumentError      a document definition or access is inconsistent
    ├── TaskError
    │   ├── UnknownTaskKind    no definition is registered under that name
    │   ├── TaskNotFound       no task with that id
    │   ├── TaskStateError     a task write that breaks the state machine
    │   └── InvocationEnded    a runtime used after its invocation ended
    └── HarnessError
        ├── ConversationBusy   ``when_busy="reject"`` and the conversation is busy
        ├── RequestIdConflict  a request id reused for other content or the other type
        ├── ReminderFired      a reminder being cancelled fired first
        ├── ApprovalDecided    a tool call already decided otherwise (or expired, withdrawn)
        ├── RegistryError      an extension that would make the registry invalid
        └── UnknownTool        configuring a tool no installed extension provides

Any exception from ``Storage.commit`` that is not a :class:`StorageRejected` is
*uncertain*: the commit may or may not have been applied. The session poisons itself
(:class:`SessionPoisoned`) and must be reopened, so in-memory state never diverges
from storage.
"""

from __future__ import annotations

__all__ = [
    "ApprovalDecided",
    "ConversationBusy",
    "DocumentError",
    "HarnessError",
    "InvalidCursor",
    "InvalidInput",
    "InvalidJson",
    "InvocationEnded",
    "PerdureError",
    "ReadAfterWrite",
    "RegistryError",
    "ReminderFired",
    "RequestIdConflict",
    "SessionClosed",
    "SessionError",
    "SessionPoisoned",
    "StorageClosed",
    "StorageCorrupt",
    "StorageError",
    "StorageRejected",
    "TaskError",
    "TaskNotFound",
    "TaskStateError",
    "TransactionSettled",
    "UnknownRecord",
    "UnknownTaskKind",
    "UnknownTool",
    "copy_error",
]


class PerdureError(Exception):
    """Base class of every error the core raises on purpose."""


class InvalidInput(PerdureError, ValueError):
    """Input the core refuses before writing anything; every host's API answers 422.

    ``field`` names where the bad value sits (``"content.data.items[3]"``) when known.
    """

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class InvalidJson(InvalidInput):
    """A value is not plain JSON (NaN, Infinity, tuple, bytes, non-string key, ...)."""


class StorageError(PerdureError):
    """Raised by a Storage adapter."""


class StorageRejected(StorageError):
    """The storage refused the operation and guarantees that nothing was written."""


class StorageClosed(StorageRejected):
    """The storage is closed; every operation fails."""


class UnknownRecord(StorageRejected):
    """A referenced record (conversation, document, ...) does not exist."""


class InvalidCursor(StorageError, ValueError):
    """A scan cursor that was not produced by the same scan (or was tampered with)."""


class StorageCorrupt(StorageError):
    """Stored data is missing or cannot be decoded."""


class SessionError(PerdureError):
    """Misuse or failure of a session."""


class SessionClosed(SessionError):
    """The session is closed (or closing); nothing more is admitted."""


class SessionPoisoned(SessionError):
    """An uncertain storage failure happened; the storage must be reopened."""


class ReadAfterWrite(SessionError):
    """A transaction read a table after it had already staged a table write."""


class TransactionSettled(SessionError):
    """A transaction handle was used after its commit finished."""


class DocumentError(SessionError, ValueError):
    """A document access does not match its definition or stored incarnation."""


class TaskError(PerdureError):
    """Misuse or failure around tasks."""


class UnknownTaskKind(TaskError, LookupError):
    """No task definition is registered under the given name."""


class TaskNotFound(TaskError, LookupError):
    """No task with the given id exists."""


class TaskStateError(TaskError):
    """A task write that the state machine does not allow (terminal, abort-marked, ...)."""


class InvocationEnded(TaskError):
    """A task runtime was used after its invocation ended."""


class HarnessError(PerdureError):
    """Misuse of the agent harness."""


class ConversationBusy(HarnessError):
    """The conversation is busy and the submission asked ``when_busy="reject"``; nothing
    was written."""


class RequestIdConflict(HarnessError, ValueError):
    """A request id already identifies a submission of the other type, or one with
    different content."""


class ReminderFired(HarnessError):
    """A reminder being cancelled fired before the cancellation took effect (its message
    was submitted)."""


class ApprovalDecided(HarnessError):
    """A decision on a tool call that was already decided otherwise (or expired, or was
    withdrawn by an abort); nothing was written."""


class RegistryError(HarnessError, ValueError):
    """An extension would leave the registry invalid (duplicate or reserved names)."""


class UnknownTool(HarnessError, LookupError):
    """A tool name that no installed extension provides."""


def copy_error(error: BaseException) -> BaseException:
    """A copy of ``error`` (same type, arguments and cause) for one more waiter: raising
    one shared instance in many waiters would grow a single traceback across all."""
    copy = type(error)(*error.args)
    copy.__cause__ = error.__cause__
    return copy
