"""The admission journal: a new actor's first input, accepted before its file is open.

Creating and opening an actor's SQLite file takes about a millisecond and a half of one
core (four files made, the schema copied, the counters read); a hundred new actors
arriving at once queue a hundred of those, and the last of them would be answered after
every other file was made. The local host instead puts such an input in this journal —
one SQLite file the host shares, ``.admissions.journal`` in the data directory, one row
per input, committed before the ``202`` (WAL, ``synchronous=NORMAL``: it survives the
process's crash like any actor commit) — and answers it ``mailed``, the shape every host
answers a submission that has no id yet with (docs/design.md § The HTTP API). The host
then opens the actor in the background and moves the input into it
(:meth:`~runtimes.local.host.ActorHost.activated`).

The move is at-least-once and answered once: every journaled input has a request id
(the caller's, else one the host chose), the move submits it under that id — the core
returns the original for a request id it has seen (invariant 8) — and deletes the row
only after that commit. A crash between the journal's commit and the move, or between
the move's commit and the delete, leaves the row, and the next activation of the actor
(at the latest the host's start, which activates every actor with journaled input)
moves it again, exactly once.

One process uses the journal at a time: it holds ``.admissions.lock`` (a ``flock``, like
an actor's lock); a second host process on the same data directory runs without one.
The rows live in memory too (an actor's pending inputs are read on every activation,
without a query); only this process writes the file.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from runtimes.actor.sqlite import close_connection, connect, run_transaction
from runtimes.local.checkpointer import BACKSTOP_PAGES, EVERY, checkpointer
from runtimes.local.host.lock import ActorLock

__all__ = ["JOURNAL_NAME", "AdmissionJournal", "JournaledInput"]

JOURNAL_NAME = ".admissions.journal"
"""The journal's file in the data directory (a dot: never an actor id, never listed)."""

_LOCK_NAME = ".admissions.lock"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS journaled (
    seq INTEGER PRIMARY KEY,
    actor TEXT NOT NULL,
    request_id TEXT NOT NULL,
    content TEXT NOT NULL,
    when_busy TEXT NOT NULL,
    UNIQUE (actor, request_id)
)
"""


@dataclass(frozen=True, slots=True)
class JournaledInput:
    """One input waiting in the journal for its actor (to the root conversation)."""

    actor: str
    request_id: str
    content: str
    when_busy: Literal["follow_up", "steer", "reject"]


class AdmissionJournal:
    """The journal's file and, in memory, its rows by actor (see the module docstring).

    Every method but :meth:`open` and :meth:`close` runs inline on the event loop: a
    commit at ``synchronous=NORMAL`` is an append to the WAL, tens of microseconds; its
    checkpoints run on the process's checkpoint thread.
    """

    def __init__(self, conn: sqlite3.Connection, path: Path, lock: ActorLock) -> None:
        self._conn = conn
        self._path = str(path)
        self._lock = lock
        self._writes = 0
        self._pending: dict[str, list[JournaledInput]] = {}
        for actor, request_id, content, when_busy in conn.execute(
            "SELECT actor, request_id, content, when_busy FROM journaled ORDER BY seq"
        ):
            self._pending.setdefault(actor, []).append(
                JournaledInput(actor, request_id, content, when_busy)
            )

    @classmethod
    def open(cls, data_dir: Path) -> AdmissionJournal:
        """Open (creating if needed) the data directory's journal under its lock. Blocks
        for the disk: call it on a worker thread. Raises
        :class:`~runtimes.actor.ActorLocked` when another process holds it."""
        lock = ActorLock.acquire(data_dir / _LOCK_NAME)
        path = data_dir / JOURNAL_NAME
        try:
            conn = connect(path, "NORMAL", BACKSTOP_PAGES)
            try:
                conn.execute(_SCHEMA)
                return cls(conn, path, lock)
            except BaseException:
                conn.close()
                raise
        except BaseException:
            lock.release()
            raise

    def close(self) -> None:
        """Fold the WAL in and close; the rows stay for the next open. Blocks for the
        disk: call it on a worker thread."""
        try:
            checkpointer().forget(self._path)
            close_connection(self._conn)
        finally:
            self._lock.release()

    @property
    def actors(self) -> frozenset[str]:
        """The actors with journaled input."""
        return frozenset(self._pending)

    def has(self, actor: str) -> bool:
        return actor in self._pending

    def pending(self, actor: str) -> list[JournaledInput]:
        """The actor's journaled inputs, in the order they were accepted."""
        return list(self._pending.get(actor, ()))

    def add(self, entry: JournaledInput) -> None:
        """Commit ``entry``; the caller made sure the actor has no journaled input with
        its request id."""
        self._write(
            "INSERT INTO journaled (actor, request_id, content, when_busy) VALUES (?, ?, ?, ?)",
            (entry.actor, entry.request_id, entry.content, entry.when_busy),
        )
        self._pending.setdefault(entry.actor, []).append(entry)

    def remove(self, entry: JournaledInput) -> None:
        """Delete ``entry``: it was moved into its actor (or refused there)."""
        self._write(
            "DELETE FROM journaled WHERE actor = ? AND request_id = ?",
            (entry.actor, entry.request_id),
        )
        left = [e for e in self._pending.get(entry.actor, ()) if e.request_id != entry.request_id]
        if left:
            self._pending[entry.actor] = left
        else:
            self._pending.pop(entry.actor, None)

    def _write(self, sql: str, params: tuple[str, ...]) -> None:
        run_transaction(self._conn, lambda ex: ex.execute(sql, params), True)
        self._writes += 1
        if self._writes % EVERY == 0:
            checkpointer().request(self._path, "NORMAL")
