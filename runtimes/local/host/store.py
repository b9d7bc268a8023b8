"""Actors' storage on this machine: ``<actor>.sqlite`` guarded by ``<actor>.lock``."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from core import SqliteStorage
from runtimes.actor import UnknownActor
from runtimes.actor.ids import is_actor_id
from runtimes.actor.sqlite import Synchronous
from runtimes.local.host.journal import AdmissionJournal
from runtimes.local.host.lock import ActorLock
from runtimes.local.sqlite import open_sqlite_storage, open_sqlite_storage_here

__all__ = ["LocalStore", "actor_paths"]

_SQLITE_SIDECARS = ("-wal", "-shm", "-journal")


def actor_paths(data_dir: Path, actor: str) -> tuple[Path, Path]:
    """``(<actor>.sqlite, <actor>.lock)`` in ``data_dir`` (``actor`` must be a valid id)."""
    return data_dir / f"{actor}.sqlite", data_dir / f"{actor}.lock"


class _LocalLease:
    def __init__(self, storage: SqliteStorage, db: Path, lock: ActorLock, *, fresh: bool):
        self.storage = storage
        self.fresh = fresh
        self.db = db
        self._lock = lock

    async def release(self, *, discard: bool) -> None:
        """Remove the files first when discarding (the lock goes last: no other process
        opens the actor meanwhile)."""
        try:
            if discard:
                for path in (
                    self.db,
                    *(self.db.with_name(self.db.name + s) for s in _SQLITE_SIDECARS),
                ):
                    with contextlib.suppress(FileNotFoundError):
                        path.unlink()
        finally:
            self._lock.release(unlink=discard)


class LocalStore:
    """:class:`~runtimes.actor.ActorStore` over a data directory: one SQLite file per
    actor, held under an exclusive ``flock`` (:class:`ActorLock`), so a second process
    is refused with :class:`~runtimes.actor.ActorLocked`."""

    def __init__(self, data_dir: Path, *, synchronous: Synchronous = "NORMAL") -> None:
        self.data_dir = data_dir
        self.synchronous: Synchronous = synchronous
        self.journal: AdmissionJournal | None = None
        """The host's admission journal while it holds one: an actor with journaled
        input exists (its first input was accepted), with or without a file yet."""
        self.opening = 0
        """Opens under way (each one a worker job that makes or opens a file)."""

    def has_file(self, name: str) -> bool:
        return actor_paths(self.data_dir, name)[0].exists()

    def exists(self, name: str) -> bool:
        return self._journaled(name) or self.has_file(name)

    def _journaled(self, name: str) -> bool:
        return self.journal is not None and self.journal.has(name)

    async def names(self, *, after: str | None, limit: int) -> list[str]:
        """The actors with a SQLite file in the data directory (a directory listing:
        nothing is opened or locked), and those whose first input waits in the journal."""
        if not self.data_dir.is_dir():
            return []
        found = {p.stem for p in self.data_dir.glob("*.sqlite") if is_actor_id(p.stem)}
        if self.journal is not None:
            found |= self.journal.actors
        return sorted(n for n in found if after is None or n > after)[:limit]

    async def open(self, name: str, *, create: bool) -> _LocalLease:
        self.opening += 1
        try:
            return await self._open(name, create=create or self._journaled(name))
        finally:
            self.opening -= 1

    async def _open(self, name: str, *, create: bool) -> _LocalLease:
        db, lock_path = actor_paths(self.data_dir, name)
        if not create and not db.exists():
            raise UnknownActor(f"no actor {name!r}")  # before the lock: no file is made
        if self.synchronous != "NORMAL":  # aiosqlite opens the file on its own thread
            lock, existed = await asyncio.to_thread(_lock, db, lock_path, create)
            try:
                storage = await open_sqlite_storage(db, synchronous=self.synchronous)
            except BaseException:
                lock.release()
                raise
            return _LocalLease(storage, db, lock, fresh=not existed)
        # One worker job for the lock and the file: creating a lock file and a database
        # waits for the disk (about a millisecond each under a burst of new actors), which
        # must not stall the loop that accepts the other submissions meanwhile.
        job = asyncio.ensure_future(asyncio.to_thread(_open_here, db, lock_path, create))
        try:
            return await asyncio.shield(job)
        except asyncio.CancelledError:
            # The job finishes on its thread regardless: whatever it took is let go.
            job.add_done_callback(_release_abandoned)
            raise


def _lock(db: Path, lock_path: Path, create: bool) -> tuple[ActorLock, bool]:
    """On a worker thread: the actor's lock, and whether its file exists (checked under
    the lock: no other process creates or discards it meanwhile)."""
    lock = ActorLock.acquire(lock_path)
    existed = db.exists()
    if not existed and not create:
        lock.release(unlink=True)  # it was discarded since the first check
        raise UnknownActor(f"no actor {db.stem!r}")
    return lock, existed


def _open_here(db: Path, lock_path: Path, create: bool) -> _LocalLease:
    """On a worker thread: lock the actor, then open (or create) its storage there too
    (a new file's schema copied in: under the lock nobody else opens it)."""
    lock, existed = _lock(db, lock_path, create)
    try:
        storage = open_sqlite_storage_here(db, new=not existed)
    except BaseException:
        lock.release()
        raise
    return _LocalLease(storage, db, lock, fresh=not existed)


def _release_abandoned(job: asyncio.Future[_LocalLease]) -> None:
    """The open finished after its caller was cancelled: close and release what it took
    (a new file is discarded: nothing was committed to it)."""
    if job.cancelled() or job.exception() is not None:
        return
    lease = job.result()

    async def release() -> None:
        try:
            await lease.storage.close()
        finally:
            await lease.release(discard=lease.fresh)

    _abandoned.add(task := asyncio.ensure_future(release()))
    task.add_done_callback(_abandoned.discard)


_abandoned: set[asyncio.Future[None]] = set()  # held until done (the loop keeps weak refs)
