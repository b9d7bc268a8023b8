"""The Storage port and the adapters that need nothing but the standard library.

Adapters that need a driver or a platform object live in ``runtimes/*`` and reach the
portable :class:`SqliteStorage` through the :class:`~core.storage.sqlite.SqlDatabase`
facade.
"""

from typing import TYPE_CHECKING, Any

from core.storage.paging import scan_all
from core.storage.port import (
    ConversationQuery,
    Cursor,
    DocumentChange,
    DocumentCopy,
    DocumentCreate,
    DocumentQuery,
    DocumentRetire,
    EntryQuery,
    Order,
    Page,
    Storage,
    SubmissionQuery,
    TaskQuery,
    Write,
)
from core.storage.sqlite import SqlDatabase, SqlExecutor, SqliteStorage

if TYPE_CHECKING:
    from core.storage.memory import MemoryState, MemoryStorage


def __getattr__(name: str) -> Any:
    # The in-memory adapter loads on first use (PEP 562): a host opening a SQLite file
    # (recovery's path) never needs it.
    if name in ("MemoryState", "MemoryStorage"):
        from core.storage import memory

        value = getattr(memory, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ConversationQuery",
    "Cursor",
    "DocumentChange",
    "DocumentCopy",
    "DocumentCreate",
    "DocumentQuery",
    "DocumentRetire",
    "EntryQuery",
    "MemoryState",
    "MemoryStorage",
    "Order",
    "Page",
    "SqlDatabase",
    "SqlExecutor",
    "SqliteStorage",
    "Storage",
    "SubmissionQuery",
    "TaskQuery",
    "Write",
    "scan_all",
]
