"""The Storage port and the adapters that need nothing but the standard library.

Adapters that need a driver or a platform object live in ``runtimes/*`` and reach the
portable :class:`SqliteStorage` through the :class:`~core.storage.sqlite.SqlDatabase`
facade.
"""

from core.storage.memory import MemoryState, MemoryStorage
from core.storage.paging import scan_all
from core.storage.port import (
    Cursor,
    DocumentChange,
    DocumentCopy,
    DocumentCreate,
    DocumentRetire,
    Order,
    Page,
    Storage,
    Write,
)
from core.storage.sqlite import SqlDatabase, SqlExecutor, SqliteStorage

__all__ = [
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
]
