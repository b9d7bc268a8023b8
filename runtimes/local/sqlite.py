"""The local host's SQLite files: opening (and creating) an actor's storage, and the
aiosqlite facade.

Both facades open the file in WAL mode with ``synchronous=NORMAL`` by default: a commit
survives a process crash; the newest commits may be lost if the machine loses power.
Pass ``synchronous="FULL"`` to make every commit survive power loss too, at the cost of
an fsync per commit.

Which facade: with ``NORMAL`` a commit is an append to the WAL without fsync, tens of
microseconds, so :func:`open_sqlite_storage` runs it inline on the event loop
(:class:`runtimes.actor.sqlite.Sqlite3Database`, shared with the AWS host); handing it
to aiosqlite's thread costs about 100 µs per round trip on our 2-core machines
(``tests/bench/bench_kernel.py`` shows both). With ``FULL`` every commit waits for an
fsync, which must not stall the loop, so it goes through :class:`AioSqliteDatabase`. The
one other wait for the disk under ``NORMAL`` — a WAL checkpoint — runs on a background
thread for files opened through :func:`open_sqlite_storage` (:class:`CheckpointedDatabase`;
see :mod:`runtimes.local.checkpointer`).

A new file's schema (``open_sqlite_storage(..., new=True)``) is copied from a migrated
in-memory template instead of running every migration's DDL. The DDL costs ~3 ms of CPU
(most of it schema 2's ``ALTER TABLE ... RENAME``, which makes SQLite re-parse and
rewrite every schema entry); the copy ~0.5 ms. A host whose hundred clients each name a
new actor at once creates a hundred files at once and each first submission waits for
its file: the largest part of the local host's acceptance p99. Every empty database of
one schema version holds the same pages (no id, no time is written at creation). The
copy (SQLite's online backup) is one write transaction of the new file, in its WAL like
any commit: a crash or power loss leaves the file without schema or with all of it,
never torn (a copy of the file's bytes would need an ``fsync`` of all its pages). Under
``NORMAL`` a new file's switch to WAL and this copy run at ``synchronous=OFF``: a power
loss can only undo them, leaving an empty database (see ``_open_and_migrate``), and their
five ``fsync`` calls made a new file's open ~24 ms instead of ~1.4 ms (median, one thread).
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Self, TypeVar

from core.storage.sqlite import Row, SqlExecutor, SqliteStorage, SqlValue, open_schema, schema
from runtimes.actor.sqlite import (
    Sqlite3Database,
    Synchronous,
    checkpoint_wal,
    close_connection,
    connect,
    run_transaction,
)
from runtimes.local.checkpointer import BACKSTOP_PAGES, EVERY, checkpointer

if TYPE_CHECKING:
    import aiosqlite

__all__ = [
    "AioSqliteDatabase",
    "CheckpointedDatabase",
    "fill_new_database",
    "open_sqlite_storage",
    "open_sqlite_storage_here",
]

T = TypeVar("T")


class CheckpointedDatabase(Sqlite3Database):
    """The inline facade (:class:`~runtimes.actor.sqlite.Sqlite3Database`) for the local
    host's actor files: the WAL is folded into the file by the process's checkpoint
    thread (:mod:`runtimes.local.checkpointer`), never inside a commit on the loop, and
    closing (a final checkpoint, with fsyncs) runs on a worker thread."""

    def __init__(self, conn: sqlite3.Connection, path: str, synchronous: Synchronous) -> None:
        super().__init__(conn)
        self._path = path
        self._synchronous = synchronous
        self._writes = 0

    @classmethod
    def open(
        cls,
        path: str | Path,
        *,
        synchronous: Synchronous = "NORMAL",
        new: bool = False,
        autocheckpoint: int = BACKSTOP_PAGES,
    ) -> Self:
        """As :meth:`Sqlite3Database.open`; the connection's own ``autocheckpoint`` is
        only a backstop, should the thread fall behind."""
        conn = connect(path, synchronous, autocheckpoint, new=new)
        return cls(conn, str(Path(path).resolve()), synchronous)

    async def transaction(self, fn: Callable[[SqlExecutor], T], *, write: bool = True) -> T:
        result = run_transaction(self._conn, fn, write)
        if write:
            self._writes += 1
            if self._writes % EVERY == 0:
                checkpointer().request(self._path, self._synchronous)
        return result

    async def close(self) -> None:
        def close() -> None:
            checkpointer().forget(self._path)
            close_connection(self._conn)

        await asyncio.to_thread(close)


class AioSqliteDatabase:
    """The facade over aiosqlite: statements run on aiosqlite's worker thread.

    A transaction runs as *one* job on that thread (BEGIN, every statement, COMMIT),
    through aiosqlite's ``_execute``: its public API would cost one thread round-trip per
    statement, several times the cost of the SQL itself. The pinned aiosqlite range in
    pyproject.toml and ``tests/core/storage/test_sqlite.py`` guard that private call.
    """

    def __init__(self, conn: aiosqlite.Connection) -> None:
        self._conn = conn

    @classmethod
    async def open(
        cls, path: str | Path, *, synchronous: Synchronous = "NORMAL"
    ) -> AioSqliteDatabase:
        import aiosqlite  # here, not at import: the default (inline sqlite3) host never needs it

        conn = aiosqlite.Connection(lambda: connect(path, synchronous), iter_chunk_size=64)
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
            run_transaction, self._raw(), fn, write
        )
        return result

    async def close(self) -> None:
        try:
            await self._conn._execute(  # type: ignore[no-untyped-call]
                lambda: checkpoint_wal(self._raw())
            )
        finally:
            await self._conn.close()


async def open_sqlite_storage(
    path: str | Path,
    *,
    synchronous: Synchronous = "NORMAL",
    driver: Literal["auto", "aiosqlite", "sqlite3"] = "auto",
    new: bool = False,
) -> SqliteStorage:
    """Open (creating and migrating if needed) the SQLite storage at ``path``.

    ``driver="auto"`` picks the inline sqlite3 facade for ``NORMAL`` and aiosqlite for
    ``FULL`` (see the module docstring). ``new``: the caller holds the file exclusively
    and it did not exist, so (sqlite3 facade) its schema is copied from the template
    (module docstring; :func:`fill_new_database`) rather than migrated step by step.
    """
    if driver == "auto":
        driver = "sqlite3" if synchronous == "NORMAL" else "aiosqlite"
    db: AioSqliteDatabase | Sqlite3Database
    if driver == "aiosqlite":
        db = await AioSqliteDatabase.open(path, synchronous=synchronous)
    elif driver == "sqlite3":
        # Creating a file (and switching it to WAL) and migrating it wait for fsyncs: not
        # on the loop. One worker job for all of it: a host opening a hundred actors at
        # once queues a hundred jobs on the default executor, and with one job per step
        # every open would wait behind every other open's earlier steps.
        return await asyncio.to_thread(
            open_sqlite_storage_here, path, synchronous=synchronous, new=new
        )
    else:
        raise ValueError(f"unknown SQLite driver {driver!r}")
    try:
        storage = await SqliteStorage.open(db)
    except BaseException:
        await db.close()
        raise
    return storage


def open_sqlite_storage_here(
    path: str | Path, *, synchronous: Synchronous = "NORMAL", new: bool = False
) -> SqliteStorage:
    """:func:`open_sqlite_storage` with the inline sqlite3 facade, done on the calling
    thread: for a caller already on a worker thread with more blocking work
    around the open (the local host's store takes the actor's file lock in the same
    job). Blocks for the file's creation and migration: never call it on the loop."""
    db, state = _open_and_migrate(path, synchronous, new)
    return SqliteStorage(db, *state)


def _open_and_migrate(
    path: str | Path, synchronous: Synchronous, new: bool = False
) -> tuple[CheckpointedDatabase, tuple[int, int, set[str]]]:
    """On a worker thread: open the file (``new``: copy the template's schema into it if
    it has none), bring its schema up to date, read its counters."""
    if not new and _unfinished_set_up(Path(path)):
        new = True
    db = CheckpointedDatabase.open(path, synchronous=synchronous, new=new)
    try:
        if new:
            # Under NORMAL an empty new file was switched to WAL at synchronous=OFF and
            # is filled so too: what a power loss can leave of it is a file without
            # pages, or with its first page (the WAL switch: one page-aligned write),
            # with or without the copy (the WAL's checksums drop a torn copy) — each an
            # empty database, which the next open migrates (a first page lost after
            # the file grew too: _unfinished_set_up). So none of the ~5 fsyncs of the
            # switch and the copy (~25 ms for each of a burst of new actors on a shared
            # disk, measured) is needed.
            # NORMAL is back before the first commit: from there on the file is synced
            # as any other (its WAL before each checkpoint, the file after).
            fill_new_database(db.connection)
            db.connection.execute(f"PRAGMA synchronous = {synchronous}")
        return db, run_transaction(db.connection, open_schema, True)
    except BaseException:
        db.connection.close()
        raise


def _unfinished_set_up(path: Path) -> bool:
    """Whether ``path`` is what a power loss can leave of a new file's unsynced set-up
    whose first page never reached the disk: the file grown to that one page (4,096
    bytes) with its header still zeros (a disk tears writes at sector bounds, so the
    header sector is all there or all missing). It holds nothing, so it is emptied, with
    its WAL, and set up again; any other file that is not a database is left alone, for
    SQLite to refuse."""
    try:
        if path.stat().st_size != 4096:
            return False
        with path.open("rb") as f:
            header = f.read(100)
    except FileNotFoundError:
        return False
    if any(header):  # a header was written: SQLite's to judge
        return False
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    path.write_bytes(b"")
    return True


_templates = threading.local()


def _template() -> sqlite3.Connection:
    """This thread's migrated, empty in-memory database. One per thread: a backup holds
    its source's mutex, so worker threads sharing one would copy one at a time."""
    version = len(schema.MIGRATIONS)  # read each time: a test may add a migration
    made: tuple[int, sqlite3.Connection] | None = getattr(_templates, "made", None)
    if made is None or made[0] != version:
        conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        run_transaction(conn, open_schema, True)
        made = _templates.made = (version, conn)
    return made[1]


def fill_new_database(conn: sqlite3.Connection) -> bool:
    """Copy the migrated empty schema into ``conn``'s database, in one write transaction,
    if it has no schema at all (a new file); returns whether it did. A database with any
    table is left alone (it is migrated as usual). The caller must hold the file
    exclusively (the host's actor lock): the look and the copy are two steps, and the
    copy replaces the whole database (which, without a table, holds no data)."""
    if conn.in_transaction or conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchone():
        return False
    _template().backup(conn)
    return True


if TYPE_CHECKING:  # mypy proves the adapter satisfies its port
    from core.storage.sqlite import SqlDatabase

    def _conforms_checkpointed_database(adapter: CheckpointedDatabase) -> SqlDatabase:
        return adapter

    def _conforms_aio_sqlite_database(adapter: AioSqliteDatabase) -> SqlDatabase:
        return adapter
