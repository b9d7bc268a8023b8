"""New actor files from a template: a new SQLite file is a copy of an empty, migrated one.

Creating a database the ordinary way (switch it to WAL, run every migration's DDL) costs
a few fsyncs and a few milliseconds of Python on one thread. A host whose hundred clients
each name a new actor at once creates a hundred files at once, and each of those first
submissions waits for the files before it: a large part of the local host's acceptance
p99 (``tests/bench/suite.py --only host``), whose worst samples are those first ones.
Every empty database of one schema version is the same bytes (no id, no time is written
at creation), so the process builds one, keeps its bytes, and writes them into each new
file: one write and one ``fdatasync``.

The ``fdatasync`` keeps what SQLite's own creation promises under ``synchronous=NORMAL``:
after a power loss the file may miss its newest commits (they are in the WAL, not
synced), but it is never a torn copy.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

__all__ = ["write_new_database"]

_lock = threading.Lock()
_bytes: bytes | None = None


def _template(build: Callable[[Path], sqlite3.Connection], where: Path) -> bytes:
    """The bytes of an empty database made by ``build`` (once per process), made in a
    scratch directory under ``where`` (writable: the new file goes there)."""
    global _bytes
    with _lock:
        if _bytes is None:
            with tempfile.TemporaryDirectory(prefix=".perdure-template-", dir=where) as tmp:
                path = Path(tmp) / "empty.sqlite"
                conn = build(path)
                try:
                    # Everything into the main file: the copy must not need the WAL.
                    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                finally:
                    conn.close()
                _bytes = path.read_bytes()
        return _bytes


def write_new_database(path: Path, build: Callable[[Path], sqlite3.Connection]) -> bool:
    """Create ``path`` as a copy of the empty database ``build`` makes (``build`` opens a
    connection to a new file and migrates it; it runs once per process). Returns False,
    writing nothing, when ``path`` already exists: only a new file is written, and the
    caller holds the actor's lock, so nobody else creates it meanwhile."""
    data = _template(build, path.parent)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fdatasync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            path.unlink()  # a torn copy must never be opened as a database
        raise
    os.close(fd)
    return True
