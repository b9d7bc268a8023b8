"""Opening an actor on the AWS host: take the lease, then get a working copy that holds
exactly the head's seq, served by the portable ``SqliteStorage`` through the fenced gate.

The working copy is ``<workdir>/<actor>.sqlite`` (Lambda's ``/tmp``, which survives
between invocations of a warm container). Under a fresh grant it is

* **warm** — the file's seq equals the head's: reused as is (seq n is exactly one
  commit, fenced, so equal seqs mean equal state);
* **caught up** — the file is behind but not behind the snapshot: the missing log
  records are replayed into it;
* **rebuilt** — otherwise (no file, a file ahead of the head, or older than the
  snapshot): the snapshot is downloaded and the later log records replayed.

With a deferring gate (``defer=True``) the file holds commits before they are durable.
While it does, a marker file ``<actor>.sqlite.ahead`` exists beside it; a holder that
died then (or whose flush failed) leaves it, and the next open rebuilds the file: its
last commits may differ from what the next holder committed under the same seqs, so
neither "equal seqs" nor a catch-up could be trusted.

A replica must own its workdir: two holders in one process (as tests do) need two.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from core.errors import StorageCorrupt
from core.storage.sqlite import SqliteStorage
from runtimes.actor.sqlite import Sqlite3Database, Synchronous
from runtimes.aws.gate import DEFAULT_SNAPSHOT_EVERY, DynamoCommitGate
from runtimes.aws.lease import DEFAULT_LEASE_MS, Lease, LeaseGrant
from runtimes.aws.log import read_log
from runtimes.aws.resources import AwsResources
from runtimes.aws.snapshots import download_snapshot, take_snapshot

__all__ = ["ActorReplica", "Origin", "discard_working_copy", "open_actor_replica"]

Origin = Literal["warm", "caught_up", "rebuilt"]


@dataclass
class ActorReplica:
    """One invocation's hold on an actor: the lease, the gate and the storage."""

    storage: SqliteStorage
    db: Sqlite3Database
    lease: Lease
    gate: DynamoCommitGate
    path: Path
    origin: Origin
    replayed: int
    """Log records replayed to bring the working copy up to the head."""

    async def snapshot(self) -> str:
        """Publish the working copy as the actor's snapshot now (and collect the log).
        Call it between commits (the storage's own snapshots run inside its commits)."""
        await self.storage.flush()  # a snapshot shows durable state only
        return await take_snapshot(
            self.gate.resources, self.lease, self.db, self.storage.seq, self.path.parent
        )

    async def close(self, *, release: bool = True) -> None:
        """Close the working copy (it stays on disk for a warm reuse) and, by default,
        release the lease — after flushing what the gate holds pending, in the same
        write. A failed flush is raised after the lease was released if it still could
        be: the pending commits are lost (:attr:`DynamoCommitGate.failure`) and the
        marked file is rebuilt at the next open. After an earlier failed flush it only
        releases. ``release=False`` (a killed holder) flushes nothing."""
        try:
            await self.storage.close()
        finally:
            if release and self.gate.failure is not None:
                await self.lease.release()  # the loss was raised already; no-op if fenced
            elif release:
                try:
                    await self.gate.release()
                except BaseException:
                    await self.lease.release()  # no-op once the fence refused us
                    raise


async def open_actor_replica(
    resources: AwsResources,
    actor: str,
    *,
    owner: str,
    now: Callable[[], int],
    workdir: Path,
    lease_ms: int = DEFAULT_LEASE_MS,
    snapshot_every: int = DEFAULT_SNAPSHOT_EVERY,
    synchronous: Synchronous = "NORMAL",
    defer: bool = False,
) -> ActorReplica:
    """Acquire ``actor``'s lease for ``owner`` (raises :class:`LeaseHeld` if another
    owner holds it) and open its working copy at the head's seq. ``defer``: commits are
    made durable in groups (see :mod:`runtimes.aws.gate`); whoever holds the replica
    must flush before acting on them and :meth:`ActorReplica.close` to let go."""
    lease = Lease(resources, actor, owner, now, duration_ms=lease_ms)
    grant = await lease.acquire()
    try:
        path = workdir / f"{actor}.sqlite"
        files: list[Sqlite3Database] = []  # the open file; the gate snapshots through it

        async def snapshot(seq: int) -> None:
            await take_snapshot(resources, lease, files[-1], seq, workdir)

        marker = _ahead_marker(path)

        def ahead(yes: bool) -> None:
            # Tiny and rare (once per group): done inline rather than off the loop.
            if yes:
                marker.touch()
            else:
                marker.unlink(missing_ok=True)

        gate = DynamoCommitGate(
            resources,
            lease,
            snapshot=snapshot,
            snapshot_every=snapshot_every,
            defer=defer,
            ahead=ahead,
        )

        async def open_file() -> SqliteStorage:
            db = Sqlite3Database.open(path, synchronous=synchronous)
            try:
                storage = await SqliteStorage.open(db, gate=gate)
            except BaseException:
                await db.close()
                raise
            files.append(db)
            return storage

        storage, origin, replayed = await _working_copy(resources, lease, grant, path, open_file)
    except BaseException:
        await lease.release()
        raise
    return ActorReplica(storage, files[-1], lease, gate, path, origin, replayed)


async def _working_copy(
    resources: AwsResources,
    lease: Lease,
    grant: LeaseGrant,
    path: Path,
    open_file: Callable[[], Awaitable[SqliteStorage]],
) -> tuple[SqliteStorage, Origin, int]:
    if _exists(path) and not _exists(_ahead_marker(path)):
        storage = await open_file()
        local = storage.seq
        if local == grant.seq:
            return storage, "warm", 0
        if grant.snapshot_seq <= local < grant.seq:
            try:
                replayed = await _replay(resources, lease, storage, grant.seq)
            except BaseException:
                await storage.close()
                raise
            return storage, "caught_up", replayed
        await storage.close()
    discard_working_copy(path)
    if grant.snapshot_key is not None:
        await download_snapshot(resources, grant.snapshot_key, path)
    storage = await open_file()
    try:
        if storage.seq != grant.snapshot_seq:
            raise StorageCorrupt(
                f"snapshot {grant.snapshot_key!r} holds seq {storage.seq}, not {grant.snapshot_seq}"
            )
        replayed = await _replay(resources, lease, storage, grant.seq)
    except BaseException:
        await storage.close()
        raise
    return storage, "rebuilt", replayed


async def _replay(resources: AwsResources, lease: Lease, storage: SqliteStorage, upto: int) -> int:
    records = await read_log(resources, lease.keys, storage.seq + 1, upto)
    for write_set in records:
        await storage.apply_write_set(write_set)
    return len(records)


def _exists(path: Path) -> bool:
    return path.exists()


def _ahead_marker(path: Path) -> Path:
    return Path(f"{path}.ahead")


def discard_working_copy(path: Path) -> None:
    """Remove a working copy, its WAL files and its marker (blocking: run it off the
    loop)."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    _ahead_marker(path).unlink(missing_ok=True)  # last: until the file is gone, it stays
