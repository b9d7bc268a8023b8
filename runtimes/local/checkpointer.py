"""Background WAL checkpoints for the inline sqlite3 facade.

A checkpoint copies the WAL's pages into the database file, and with
``synchronous=NORMAL`` it is the only step that waits for the disk (an fsync of the
WAL, one of the file). SQLite runs it inside whichever commit crosses
``wal_autocheckpoint``; on the inline facade that commit — and the whole event loop —
then waits for both fsyncs. Here one daemon thread per process runs them instead,
``PASSIVE`` (they never block a writer), on a connection of its own per file, asked for
every :data:`EVERY` write commits. The loop's connection keeps a larger
``wal_autocheckpoint`` as a backstop should the thread fall behind.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from pathlib import Path

__all__ = ["BACKSTOP_PAGES", "EVERY", "Checkpointer", "checkpointer"]

EVERY = 64
"""Write commits between checkpoint requests (a round's commit writes ~15 pages, so
about SQLite's default of 1,000 pages)."""

BACKSTOP_PAGES = 16_000
"""``wal_autocheckpoint`` of a connection whose checkpoints run in the background."""


class Checkpointer:
    """Runs requested checkpoints on one thread; files are registered while open."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._wanted: dict[str, str] = {}  # path -> synchronous, requested and not run yet
        self._conns: dict[str, sqlite3.Connection] = {}  # used (and closed) by the thread only
        self._closing: set[str] = set()
        self._running: str | None = None
        self._thread: threading.Thread | None = None

    def request(self, path: str, synchronous: str) -> None:
        with self._cond:
            if path in self._closing:
                return
            self._wanted[path] = synchronous
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._work, name="perdure-wal-checkpoints", daemon=True
                )
                self._thread.start()
            self._cond.notify()

    def drain(self, timeout: float = 5.0) -> bool:
        """Wait until every requested checkpoint has run; whether it did in time."""
        with self._cond:
            return self._cond.wait_for(
                lambda: not self._wanted and self._running is None, timeout=timeout
            )

    def forget(self, path: str) -> None:
        """The file is closing: drop its request, wait for a checkpoint of it in
        progress, and close the thread's connection to it (before the caller's own
        final checkpoint, which needs the checkpoint lock)."""
        with self._cond:
            self._wanted.pop(path, None)
            self._closing.add(path)
            self._cond.notify()
            while self._running == path or path in self._conns:
                if self._thread is None or not self._thread.is_alive():
                    self._conns.pop(path, None)
                    break
                self._cond.wait(0.05)
            self._closing.discard(path)

    def _work(self) -> None:
        while True:
            with self._cond:
                for path in [p for p in self._conns if p in self._closing]:
                    with contextlib.suppress(sqlite3.Error):
                        self._conns.pop(path).close()
                    self._cond.notify_all()
                if not self._wanted:
                    self._cond.wait()
                    continue
                path, synchronous = self._wanted.popitem()
                self._running = path
            try:
                self._checkpoint(path, synchronous)
            finally:
                with self._cond:
                    self._running = None
                    self._cond.notify_all()

    def _checkpoint(self, path: str, synchronous: str) -> None:
        # Best effort: every commit is durable in the WAL already; a failed checkpoint
        # only leaves the WAL longer (the backstop or the next request folds it).
        with contextlib.suppress(sqlite3.Error, OSError):
            conn = self._conns.get(path)
            if conn is None:
                if not Path(path).exists():
                    return
                conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
                conn.execute(f"PRAGMA synchronous = {synchronous}")
                conn.execute("PRAGMA busy_timeout = 1000")
                self._conns[path] = conn
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()


_SHARED = Checkpointer()


def checkpointer() -> Checkpointer:
    """The process's checkpointer."""
    return _SHARED
