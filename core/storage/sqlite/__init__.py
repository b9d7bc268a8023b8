"""Portable SQLite storage: :class:`SqliteStorage` over the :class:`SqlDatabase` facade."""

from core.storage.sqlite.database import Row, SqlDatabase, SqlExecutor, SqlValue
from core.storage.sqlite.schema import SCHEMA_VERSION
from core.storage.sqlite.storage import SqliteStorage

__all__ = ["SCHEMA_VERSION", "Row", "SqlDatabase", "SqlExecutor", "SqlValue", "SqliteStorage"]
