"""SqlDatabase facades over local SQLite files: stdlib sqlite3 inline, and aiosqlite.

Both open the file in WAL mode with ``synchronous=NORMAL`` by default: a commit survives
a process crash; the newest commits may be lost if the machine loses power. Pass
``synchronous="FULL"`` to make every commit survive power loss too, at the cost of an
fsync per commit.

Which facade: with ``NORMAL`` a commit is an append to the WAL without fsync, tens of
microseconds, so :func:`open_sqlite_storage` runs it inline on the event loop
(:class:`Sqlite3Database`); handing it to aiosqlite's thread costs about 100 µs per
round trip on our 2-core machines (``tests/bench/bench_kernel.py`` shows both). With
``FULL`` every commit waits for an fsync, which must not stall the loop, so it goes
through :class:`AioSqliteDatabase`.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypeVar

import aiosqlite

from core.storage.sqlite import Row, SqlExecutor, SqliteStorage, SqlValue

__all__ = [
    "AioSqliteDatabase",
    "Sqlite3Database",
    "Synchronous",
    "open_sqlite_storage",
]

T = TypeVar("T")
Synchronous = Literal["NORMAL", "FULL"]


def _connect(path: str | Path, synchronous: Synchronous) -> sqlite3.Connection:
    if synchronous not in ("NORMAL", "FULL"):
        raise ValueError(f"synchronous must be 'NORMAL' or 'FULL', got {synchronous!r}")
    # isolation_level=None: the facade issues BEGIN/COMMIT itself.
    conn = sqlite3.connect(
        str(path), isolation_level=None, check_same_thread=False, cached_statements=256
    )
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    conn.execute("PRAGMA busy_timeout = 5000")
    conn.execute("PRAGMA wal_autocheckpoint = 1000")
    return conn


class _Executor:
    __slots__ = ("conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def execute(self, sql: str, params: Sequence[SqlValue] = ()) -> None:
        self.conn.execute(sql, params)

    def fetch(self, sql: str, params: Sequence[SqlValue] = ()) -> list[Row]:
        return self.conn.execute(sql, params).fetchall()


def _transaction(conn: sqlite3.Connection, fn: Callable[[SqlExecutor], T], write: bool) -> T:
    conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
    try:
        result = fn(_Executor(conn))
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return result


def _checkpoint(conn: sqlite3.Connection) -> None:
    """Fold the WAL into the file on close. Best effort: every commit is already durable
    in the WAL, which the next open recovers; a checkpoint that fails (a full disk, say)
    must not make closing fail — the host would skip the rest of an eviction."""
    with contextlib.suppress(sqlite3.Error):
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def _close(conn: sqlite3.Connection) -> None:
    try:
        _checkpoint(conn)
    finally:
        conn.close()


class Sqlite3Database:
    """The facade over stdlib ``sqlite3``, running statements on the event loop thread.

    Each call blocks the loop for the statement's duration — microseconds in WAL mode
    with ``synchronous=NORMAL``, which makes it the default there (no thread hand-off).
    """

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    @classmethod
    def open(cls, path: str | Path, *, synchronous: Synchronous = "NORMAL") -> Sqlite3Database:
        return cls(_connect(path, synchronous))

    async def execute(self, sql: str, params: Sequence[SqlValue] = ()) -> None:
        self._conn.execute(sql, params)

    async def fetch(self, sql: str, params: Sequence[SqlValue] = ()) -> list[Row]:
        return self._conn.execute(sql, params).fetchall()

    async def transaction(self, fn: Callable[[SqlExecutor], T], *, write: bool = True) -> T:
        return _transaction(self._conn, fn, write)

    async def close(self) -> None:
        _close(self._conn)


class AioSqliteDatabase:
    """The facade over aiosqlite: statements run on aiosqlite's worker thread.

    A transaction runs as *one* job on that thread (BEGIN, every statement, COMMIT),
    through aiosqlite's ``_execute``: its public API would cost one thread round-trip per
    statement, several times the cost of the SQL itself. The pinned aiosqlite range in
    pyproject.toml and ``tests/storage/test_sqlite_facades.py`` guard that private call.
    """

    def __init__(self, conn: aiosqlite.Connection) -> None:
        self._conn = conn

    @classmethod
    async def open(
        cls, path: str | Path, *, synchronous: Synchronous = "NORMAL"
    ) -> AioSqliteDatabase:
        conn = aiosqlite.Connection(lambda: _connect(path, synchronous), iter_chunk_size=64)
        await conn
        return cls(conn)

    def _raw(self) -> sqlite3.Connection:
        return self._conn._conn

    async def execute(self, sql: str, params: Sequence[SqlValue] = ()) -> None:
        await self._conn._execute(  # type: ignore[no-untyped-call]
            lambda: self._raw().execute(sql, params)
        )

    async def fetch(self, sql: str, params: Sequence[SqlValue] = ()) -> list[Row]:
        rows: list[Row] = await self._conn._execute(  # type: ignore[no-untyped-call]
            lambda: self._raw().execute(sql, params).fetchall()
        )
        return rows

    async def transaction(self, fn: Callable[[SqlExecutor], T], *, write: bool = True) -> T:
        result: T = await self._conn._execute(  # type: ignore[no-untyped-call]
            _transaction, self._raw(), fn, write
        )
        return result

    async def close(self) -> None:
        try:
            await self._conn._execute(  # type: ignore[no-untyped-call]
                lambda: _checkpoint(self._raw())
            )
        finally:
            await self._conn.close()


async def open_sqlite_storage(
    path: str | Path,
    *,
    synchronous: Synchronous = "NORMAL",
    driver: Literal["auto", "aiosqlite", "sqlite3"] = "auto",
) -> SqliteStorage:
    """Open (creating and migrating if needed) the SQLite storage at ``path``.

    ``driver="auto"`` picks the inline sqlite3 facade for ``NORMAL`` and aiosqlite for
    ``FULL`` (see the module docstring).
    """
    if driver == "auto":
        driver = "sqlite3" if synchronous == "NORMAL" else "aiosqlite"
    db: AioSqliteDatabase | Sqlite3Database
    if driver == "aiosqlite":
        db = await AioSqliteDatabase.open(path, synchronous=synchronous)
    elif driver == "sqlite3":
        db = Sqlite3Database.open(path, synchronous=synchronous)
    else:
        raise ValueError(f"unknown SQLite driver {driver!r}")
    try:
        return await SqliteStorage.open(db)
    except BaseException:
        await db.close()
        raise


if TYPE_CHECKING:  # mypy proves the adapter satisfies its port
    from core.storage.sqlite import SqlDatabase

    def _conforms_sqlite3_database(adapter: Sqlite3Database) -> SqlDatabase:
        return adapter

    def _conforms_aio_sqlite_database(adapter: AioSqliteDatabase) -> SqlDatabase:
        return adapter
