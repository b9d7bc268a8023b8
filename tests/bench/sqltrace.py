"""What a process does to SQLite, counted the same way for every system in the suite.

``install()`` wraps ``sqlite3.connect`` so every connection opened afterwards (by
perdure's facades, by SQLAlchemy for DBOS, by the caller for LangGraph) reports its
statements to one :class:`SqlCounts`: write commits (a ``COMMIT`` after at least one
write, or an autocommit write), statements inside write transactions, and the bytes
this process wrote through ``write(2)`` (``wchar`` in ``/proc/self/io``). The trace
callback costs time, so the suite counts in a run of its own, never a timed one.
"""

from __future__ import annotations

import sqlite3
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["SqlCounts", "install", "pragmas", "written_bytes"]

_WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE", "CREATE", "DROP", "ALTER")


@dataclass
class SqlCounts:
    commits: int = 0
    statements: int = 0  # statements executed inside write transactions (BEGIN/COMMIT excluded)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def snapshot(self) -> tuple[int, int]:
        with self._lock:
            return self.commits, self.statements


class _Tracer:
    """Per-connection state of the transaction being traced."""

    def __init__(self, counts: SqlCounts) -> None:
        self.counts = counts
        self.in_tx = False
        self.wrote = False
        self.pending = 0

    def __call__(self, sql: str) -> None:
        head = sql.lstrip()[:9].upper()
        with self.counts._lock:
            if head.startswith("BEGIN"):
                self.in_tx, self.wrote, self.pending = True, False, 0
            elif head.startswith(("COMMIT", "END")):
                if self.wrote:
                    self.counts.commits += 1
                    self.counts.statements += self.pending
                self.in_tx, self.wrote, self.pending = False, False, 0
            elif head.startswith("ROLLBACK"):
                self.in_tx, self.wrote, self.pending = False, False, 0
            elif head.startswith("PRAGMA"):
                pass
            elif self.in_tx:
                self.pending += 1
                self.wrote = self.wrote or head.startswith(_WRITES)
            elif head.startswith(_WRITES):  # autocommit write: a commit of its own
                self.counts.commits += 1
                self.counts.statements += 1


def install() -> SqlCounts:
    """Count every SQLite connection opened from now on in this process."""
    import sqlite3.dbapi2  # what SQLAlchemy's pysqlite dialect calls

    counts = SqlCounts()
    original = sqlite3.connect

    def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = original(*args, **kwargs)
        conn.set_trace_callback(_Tracer(counts))
        return conn

    sqlite3.connect = connect  # type: ignore[assignment]
    sqlite3.dbapi2.connect = connect  # type: ignore[assignment]
    return counts


def pragmas(conn: Any) -> dict[str, str]:
    """``journal_mode`` and ``synchronous`` as this connection reports them (``conn``
    has an ``execute(sql)`` returning rows: sqlite3, or a SQLAlchemy connection)."""
    names = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
    journal = conn.execute("PRAGMA journal_mode").fetchone()[0]
    sync = conn.execute("PRAGMA synchronous").fetchone()[0]
    return {"journal_mode": str(journal).upper(), "synchronous": names.get(int(sync), str(sync))}


def written_bytes() -> int:
    """Bytes this process has passed to ``write(2)`` so far (0 where /proc is missing)."""
    try:
        for line in Path("/proc/self/io").read_text().splitlines():
            if line.startswith("wchar:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0
