"""One open actor: its file lock, SQLite storage, execution environment and harness."""

from __future__ import annotations

import contextlib
from contextlib import AsyncExitStack
from pathlib import Path

from core.clock import Clock, TimerHandle
from core.harness import Harness, Registry
from runtimes.local.host.config import HostConfig, Reporter
from runtimes.local.host.errors import UnknownActor
from runtimes.local.host.lock import ActorLock
from runtimes.local.sqlite import open_sqlite_storage

__all__ = ["Actor", "actor_paths"]

_SQLITE_SIDECARS = ("-wal", "-shm", "-journal")


def actor_paths(data_dir: Path, actor: str) -> tuple[Path, Path]:
    """``(<actor>.sqlite, <actor>.lock)`` in ``data_dir`` (``actor`` must be a valid id)."""
    return data_dir / f"{actor}.sqlite", data_dir / f"{actor}.lock"


class Actor:
    """An open actor. The host owns the bookkeeping fields:

    ``inflight``: requests using the actor right now (an actor is never evicted under one);
    ``touched``: clock time of the last request or commit (the idle period counts from it);
    ``fresh``: this activation created the storage and nothing was committed since, so the
    files hold no record and may be discarded if the creating request fails;
    ``evict_timer``: the pending idle check, if any.
    """

    def __init__(
        self,
        name: str,
        db: Path,
        harness: Harness,
        lock: ActorLock,
        stack: AsyncExitStack,
        *,
        fresh: bool,
    ) -> None:
        self.name = name
        self.db = db
        self.harness = harness
        self.inflight = 0
        self.touched = harness.clock.now()
        self.fresh = fresh
        self.evict_timer: TimerHandle | None = None
        self._lock = lock
        self._stack = stack
        self._closed = False

    @classmethod
    async def open(
        cls,
        name: str,
        config: HostConfig,
        *,
        registry: Registry,
        clock: Clock,
        report: Reporter,
        create: bool,
    ) -> Actor:
        """Lock, open and ``Harness.open`` the actor; nothing runs until ``resume()``.

        Raises :class:`~runtimes.local.host.ActorLocked` when another process holds the
        actor, :class:`~runtimes.local.host.UnknownActor` when it has no storage and
        ``create`` is false. On any failure everything taken so far is released.
        """
        db, lock_path = actor_paths(config.data_dir, name)
        if not create and not db.exists():
            raise UnknownActor(f"no actor {name!r}")  # before the lock: no file is made
        lock = ActorLock.acquire(lock_path)
        # Checked again under the lock: no other process creates or discards it meanwhile.
        existed = db.exists()
        if not existed and not create:
            lock.release(unlink=True)  # it was discarded since the first check
            raise UnknownActor(f"no actor {name!r}")
        stack = AsyncExitStack()
        try:
            env = None
            if config.env is not None:
                env = await stack.enter_async_context(config.env(name))
            storage = await open_sqlite_storage(db, synchronous=config.synchronous)

            def report_error(error: BaseException) -> None:
                report(name, error)

            # Harness.open closes the storage itself when it fails.
            harness = await Harness.open(
                storage,
                models=config.models,
                registry=registry,
                env=env,
                clock=clock,
                settings=config.settings,
                report=report_error,
            )
        except BaseException:
            try:
                await stack.aclose()
            finally:
                lock.release()
            raise
        return cls(name, db, harness, lock, stack, fresh=not existed)

    @property
    def closed(self) -> bool:
        return self._closed

    async def close(self, *, delete: bool = False) -> None:
        """Close the harness (it writes no outcome: invariant 12), then the environment,
        then release the lock — last, so no other process opens a half-closed actor.

        ``delete`` also removes the storage and lock files, before the lock goes; only
        for a ``fresh`` actor, whose files hold no record.
        """
        if self._closed:
            return
        self._closed = True
        if self.evict_timer is not None:
            self.evict_timer.cancel()
            self.evict_timer = None
        try:
            await self.harness.close()
        finally:
            try:
                await self._stack.aclose()
            finally:
                try:
                    if delete:
                        self._delete_files()
                finally:
                    self._lock.release(unlink=delete)

    def _delete_files(self) -> None:
        for path in (self.db, *(self.db.with_name(self.db.name + s) for s in _SQLITE_SIDECARS)):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
