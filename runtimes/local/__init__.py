"""The local host: SQLite files on this machine, one asyncio process."""

from runtimes.local.clock import SystemClock
from runtimes.local.collector import ServingCollector
from runtimes.local.sqlite import AioSqliteDatabase, Sqlite3Database, open_sqlite_storage

__all__ = [
    "AioSqliteDatabase",
    "ServingCollector",
    "Sqlite3Database",
    "SystemClock",
    "open_sqlite_storage",
]
