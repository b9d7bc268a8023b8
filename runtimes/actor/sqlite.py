"""The stdlib ``sqlite3`` facade for hosts that keep an actor in a SQLite file on their
own disk: the local host's actor files and the AWS host's working copies.

:class:`Sqlite3Database` runs each statement inline on the event loop. The file is in WAL
mode with ``synchronous=NORMAL`` by default: a commit survives a process crash; the newest
commits may be lost if the machine loses power, and a commit is an append to the WAL
without fsync, tens of microseconds, cheaper inline than handed to a thread (~100 µs per
round trip on our 2-core machines; ``tests/bench/bench_kernel.py`` shows both).
``synchronous="FULL"`` makes every commit survive power loss too, at an fsync per commit
(the local host then uses aiosqlite's thread: :mod:`runtimes.local.sqlite`). The one other
wait for the disk under ``NORMAL``, a WAL checkpoint, runs inside the commit that crosses
``wal_autocheckpoint`` (the local host moves it to a thread: :mod:`runtimes.local.sqlite`).

Like all of :mod:`runtimes.actor` it starts no thread; the package does not import this
module, so a host without a disk (a Durable Object under Pyodide) never loads it.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Self, TypeVar

from core.storage.sqlite import Row, SqlExecutor, SqlValue

__all__ = [
    "Sqlite3Database",
    "Synchronous",
    "checkpoint_wal",
    "close_connection",
    "connect",
    "run_transaction",
]

T = TypeVar("T")
Synchronous = Literal["NORMAL", "FULL"]


def connect(
    path: str | Path, synchronous: Synchronous, autocheckpoint: int = 1000, *, new: bool = False
) -> sqlite3.Connection:
    """A connection in WAL mode at ``synchronous``, except: ``new`` with ``NORMAL`` and
    a file without a page yet, it is left at ``OFF`` (the caller fills the file, then
    sets ``NORMAL``; see :mod:`runtimes.local.sqlite`)."""
    if synchronous not in ("NORMAL", "FULL"):
        raise ValueError(f"synchronous must be 'NORMAL' or 'FULL', got {synchronous!r}")
    # isolation_level=None: the facade issues BEGIN/COMMIT itself.
    conn = sqlite3.connect(
        str(path), isolation_level=None, check_same_thread=False, cached_statements=256
    )
    # The level first: switching a new file to WAL is a rollback-journal transaction,
    # which at SQLite's default (FULL) costs one more fsync than at NORMAL (4 vs 3 with
    # the directory's); a burst of new actors waits on those. FULL stays FULL throughout.
    # A file with no page at all holds nothing a lost write could damage: under NORMAL
    # it is switched to WAL at OFF, without those fsyncs, and through an in-memory
    # rollback journal, without creating and deleting a -journal file (directory
    # updates wait for the file system's journal, slow while other processes sync:
    # 100 new files on 6 threads took 0.7-1.4 s with it, 1.9-2.5 s without, measured
    # interleaved). See runtimes.local.sqlite.
    unsynced = new and synchronous == "NORMAL" and _pages(conn) == 0
    conn.execute(f"PRAGMA synchronous = {'OFF' if unsynced else synchronous}")
    if unsynced:
        conn.execute("PRAGMA journal_mode = MEMORY")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA busy_timeout = 5000")
    conn.execute(f"PRAGMA wal_autocheckpoint = {int(autocheckpoint)}")
    return conn


def _pages(conn: sqlite3.Connection) -> int:
    row = conn.execute("PRAGMA page_count").fetchone()
    return int(row[0])


class _Executor:
    # One cursor for every statement of a transaction: ``Connection.execute`` makes (and
    # frees) a cursor per call, a few percent of a commit's statements' cost. Rows are
    # always fetched whole, so no statement is left open when the next one runs.
    __slots__ = ("cursor",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.cursor = conn.cursor()

    def execute(self, sql: str, params: Sequence[SqlValue] = ()) -> None:
        self.cursor.execute(sql, params)

    def fetch(self, sql: str, params: Sequence[SqlValue] = ()) -> list[Row]:
        return self.cursor.execute(sql, params).fetchall()


def run_transaction(conn: sqlite3.Connection, fn: Callable[[SqlExecutor], T], write: bool) -> T:
    """Run ``fn`` in one transaction on ``conn`` (``BEGIN IMMEDIATE`` for a write)
    through one cursor; roll back if it raises."""
    ex = _Executor(conn)
    ex.cursor.execute("BEGIN IMMEDIATE" if write else "BEGIN")
    try:
        result = fn(ex)
        ex.cursor.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return result


def checkpoint_wal(conn: sqlite3.Connection) -> None:
    """Fold the WAL into the file on close. Best effort: every commit is already durable
    in the WAL, which the next open recovers; a checkpoint that fails (a full disk, say)
    must not make closing fail — the host would skip the rest of an eviction."""
    with contextlib.suppress(sqlite3.Error):
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def close_connection(conn: sqlite3.Connection) -> None:
    """Checkpoint (best effort, :func:`checkpoint_wal`), then close."""
    try:
        checkpoint_wal(conn)
    finally:
        conn.close()


class Sqlite3Database:
    """The facade over stdlib ``sqlite3``, running statements on the event loop thread.

    Each call blocks the loop for the statement's duration — microseconds in WAL mode
    with ``synchronous=NORMAL``, which makes it the default there (no thread hand-off).
    Closing folds the WAL into the file (:func:`checkpoint_wal`). The local host's files
    fold theirs on a background thread instead
    (``runtimes.local.sqlite.CheckpointedDatabase``).
    """

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    @property
    def connection(self) -> sqlite3.Connection:
        """The connection, for a caller that sets the file up before any commit (the
        local host's new files)."""
        return self._conn

    @classmethod
    def open(
        cls,
        path: str | Path,
        *,
        synchronous: Synchronous = "NORMAL",
        new: bool = False,
        autocheckpoint: int = 1000,
    ) -> Self:
        """``new``: the caller holds the file exclusively and fills it before any commit;
        an empty file is then set up unsynced (:func:`connect`): the caller must set
        ``synchronous`` again once it is filled. ``autocheckpoint``: SQLite's
        ``wal_autocheckpoint``, in pages."""
        return cls(connect(path, synchronous, autocheckpoint, new=new))

    async def execute(self, sql: str, params: Sequence[SqlValue] = ()) -> None:
        self._conn.execute(sql, params)

    async def fetch(self, sql: str, params: Sequence[SqlValue] = ()) -> list[Row]:
        return self._conn.execute(sql, params).fetchall()

    async def transaction(self, fn: Callable[[SqlExecutor], T], *, write: bool = True) -> T:
        return run_transaction(self._conn, fn, write)

    async def close(self) -> None:
        close_connection(self._conn)


if TYPE_CHECKING:  # mypy proves the adapter satisfies its port
    from core.storage.sqlite import SqlDatabase

    def _conforms(adapter: Sqlite3Database) -> SqlDatabase:
        return adapter
