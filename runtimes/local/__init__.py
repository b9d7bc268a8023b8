"""The local host: SQLite files on this machine, one asyncio process."""

from runtimes.actor.clock import SystemClock
from runtimes.actor.sqlite import Sqlite3Database
from runtimes.local.collector import ServingCollector
from runtimes.local.sqlite import AioSqliteDatabase, open_sqlite_storage

__all__ = [
    "AioSqliteDatabase",
    "ServingCollector",
    "Sqlite3Database",
    "SystemClock",
    "open_sqlite_storage",
]
