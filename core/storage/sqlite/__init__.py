"""Portable SQLite storage: :class:`SqliteStorage` over the :class:`SqlDatabase` facade,
with optional two-phase commits through a host's :class:`CommitGate`."""

from core.storage.sqlite.database import Row, SqlDatabase, SqlExecutor, SqlValue
from core.storage.sqlite.schema import SCHEMA_VERSION, open_schema
from core.storage.sqlite.storage import SqliteStorage
from core.storage.sqlite.write_set import CommitGate, DeferringGate

__all__ = [
    "SCHEMA_VERSION",
    "CommitGate",
    "DeferringGate",
    "Row",
    "SqlDatabase",
    "SqlExecutor",
    "SqlValue",
    "SqliteStorage",
    "open_schema",
]
