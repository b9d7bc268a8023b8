"""The per-actor exclusive file lock: one process writes an actor's storage at a time."""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from runtimes.actor.errors import ActorLocked

__all__ = ["ActorLock"]


class ActorLock:
    """An exclusive, non-blocking ``flock`` on ``<actor>.lock``.

    ``flock`` locks belong to the open file description, so the lock conflicts with any
    other open of the file — in another process or in this one — and the kernel drops it
    when the process dies, however it dies: a SIGKILLed host never leaves a stale lock.
    A lock file is only removed by its holder (:meth:`release` with ``unlink``), and
    :meth:`acquire` checks after locking that the path still names the file it locked,
    so a process that opened the file just before its removal cannot hold a stale lock
    beside a newer holder.
    """

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, path: Path) -> ActorLock:
        """Take the lock or raise :class:`ActorLocked` at once (never waits)."""
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                if _same_file(fd, path):
                    return cls(path, fd)
            except BlockingIOError:
                os.close(fd)
                raise ActorLocked(
                    f"actor {path.stem!r} is open in another process (lock {path})"
                ) from None
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)  # the holder removed the file meanwhile: lock the new one

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self, *, unlink: bool = False) -> None:
        """Release the lock (idempotent); ``unlink`` removes the lock file first.
        Closing the descriptor releases the flock."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        if unlink:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
        with contextlib.suppress(OSError):
            os.close(fd)


def _same_file(fd: int, path: Path) -> bool:
    try:
        named = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)
