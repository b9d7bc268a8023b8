"""The AWS host: the shared :class:`~runtimes.actor.ActorPool` over fenced replicas.

One :class:`AwsHost` lives for one Lambda invocation (one lease ``owner``, the request
id). Opening an actor takes its lease and opens its working copy
(:func:`~runtimes.aws.replica.open_actor_replica`); parking arms the actor's one-time
schedule to ``next_wake()`` *before* the lease is released, so a parked actor is always
either leased or scheduled — or, while the Scheduler refuses, recorded as a pending wake
that the sweep re-arms (:mod:`runtimes.aws.pending`).

An actor exists once its head has a commit (``seq > 0``). A first request that fails
before committing leaves only a head at seq 0 (its lease and epoch — never deleted, so
the epoch never resets); that is "no actor".
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from core import Clock, Storage
from core.harness import Registry
from runtimes.actor.config import ActorConfig
from runtimes.actor.errors import ActorLocked, UnknownActor
from runtimes.actor.lifecycle import ActorPool, OpenActor
from runtimes.aws.alarms import WakeSchedule
from runtimes.aws.errors import LeaseHeld
from runtimes.aws.keys import LISTING_INDEX, LISTING_KEY, LISTING_SORT, LISTING_VALUE, ActorKeys
from runtimes.aws.lease import DEFAULT_LEASE_MS, Lease
from runtimes.aws.pending import arm_durably
from runtimes.aws.replica import ActorReplica, discard_working_copy, open_actor_replica
from runtimes.aws.resources import AwsResources, call

__all__ = ["RETRY_AFTER_CAP_S", "AwsActorStore", "AwsHost"]


_log = logging.getLogger("perdure.aws")

RETRY_AFTER_CAP_S = 2
"""The longest ``Retry-After`` a request refused by another invocation's lease gets."""


@dataclass
class _ReplicaLease:
    store: AwsActorStore
    replica: ActorReplica
    fresh: bool

    @property
    def storage(self) -> Storage:
        return self.replica.storage

    async def release(self, *, discard: bool) -> None:
        # A crashed holder releases nothing: its lease runs out, as a killed one's does.
        try:
            await self.replica.close(release=not self.store.crashed)
        except Exception as e:
            # The last flush failed: the lease (if still ours) was released, the file is
            # rebuilt at the next open, and the invocation must answer nothing.
            _log.warning(
                "actor %s: its last commits were lost: %r", self.replica.lease.keys.actor, e
            )
        failure = self.replica.gate.failure
        if failure is not None:
            self.store.lost[self.replica.lease.keys.actor] = failure
        if discard:
            await asyncio.to_thread(discard_working_copy, self.replica.path)


class AwsActorStore:
    """Actors' fenced replicas, opened under leases held by ``owner`` (unique per
    invocation). ``workdir`` is the container's ``/tmp`` (warm copies are reused);
    ``lease_now`` is the lease clock (epoch ms). ``defer``: commits are made durable in
    groups (:mod:`runtimes.aws.gate`) — only for a holder that answers nobody until it
    has let the actor go (the Lambda handler), since an answer must only report what is
    durable; an actor's group is flushed before its unsafe tools, by
    :meth:`AwsHost.flush` and when it is parked."""

    def __init__(
        self,
        resources: AwsResources,
        *,
        owner: str,
        workdir: Path,
        lease_now: Callable[[], int],
        lease_ms: int = DEFAULT_LEASE_MS,
        defer: bool = False,
    ) -> None:
        self.resources = resources
        self.owner = owner
        self.workdir = workdir
        self.lease_now = lease_now
        self.lease_ms = lease_ms
        self.defer = defer
        self.crashed = False
        self.leases: dict[str, Lease] = {}
        """The lease of each actor this store opened last (parking reads its grant)."""
        self.replicas: dict[str, ActorReplica] = {}
        """The replica of each actor this store opened last."""
        self.lost: dict[str, BaseException] = {}
        """Actors whose deferred commits never became durable (a flush fenced off or
        failed), with the error."""

    def applied(self) -> dict[str, int]:
        """The seq each actor's working copy holds now: what an answer given now may
        report."""
        return {name: replica.storage.seq for name, replica in self.replicas.items()}

    def not_durable(self, applied: Mapping[str, int]) -> list[str]:
        """The actors whose commits up to ``applied`` (an earlier :meth:`applied`) are
        not all durable: an answer given then must not be sent."""
        return sorted(
            name for name, seq in applied.items() if self.replicas[name].gate.durable_seq < seq
        )

    async def open(self, name: str, *, create: bool) -> _ReplicaLease:
        if not create and not await self._stored(name):
            raise UnknownActor(f"no actor {name!r}")
        try:
            replica = await open_actor_replica(
                self.resources,
                name,
                owner=self.owner,
                now=self.lease_now,
                workdir=self.workdir,
                lease_ms=self.lease_ms,
                defer=self.defer,
            )
        except LeaseHeld as e:
            raise ActorLocked(str(e), retry_after_s=self._retry_after_s(e)) from e
        self.leases[name] = replica.lease
        self.replicas[name] = replica
        return _ReplicaLease(self, replica, fresh=replica.storage.seq == 0)

    async def names(self, *, after: str | None, limit: int) -> list[str]:
        """The actors with a commit, ascending, from the listing index (see
        :mod:`~runtimes.aws.keys`): one ``Query`` from ``after`` on, never a scan, and no
        lease taken. The index is eventually consistent: an actor whose first commit
        has just landed may be listed a moment later."""
        condition = "#l = :l" + (" AND #a > :after" if after is not None else "")
        values = {":l": {"S": LISTING_VALUE}}
        if after is not None:
            values[":after"] = {"S": after}
        request: dict[str, object] = {
            "TableName": self.resources.table,
            "IndexName": LISTING_INDEX,
            "KeyConditionExpression": condition,
            "ExpressionAttributeNames": {"#l": LISTING_KEY, "#a": LISTING_SORT}
            if after is not None
            else {"#l": LISTING_KEY},
            "ExpressionAttributeValues": values,
        }
        found: list[str] = []
        while len(found) < limit:
            # A page stops at 1 MB read even under Limit: continue from where it did.
            out = await call(self.resources.dynamodb.query, **request, Limit=limit - len(found))
            found += [item[LISTING_SORT]["S"] for item in out.get("Items", [])]
            if "LastEvaluatedKey" not in out:
                break
            request["ExclusiveStartKey"] = out["LastEvaluatedKey"]
        return found[:limit]

    def _retry_after_s(self, held: LeaseHeld) -> int:
        # A holder releases at the end of its invocation, mostly long before its lease
        # would expire: come back soon, and never later than the expiry.
        if held.expires_at is None:
            return 1
        left_s = -(-(held.expires_at - self.lease_now()) // 1000)
        return int(min(RETRY_AFTER_CAP_S, max(1, left_s)))

    def exists(self, name: str) -> bool:
        """Blocking read of the head (the API never calls it; tests and tools do)."""
        out = self.resources.dynamodb.get_item(**self._head_request(name))
        return _committed(out.get("Item"))

    async def _stored(self, name: str) -> bool:
        out = await call(self.resources.dynamodb.get_item, **self._head_request(name))
        return _committed(out.get("Item"))

    def _head_request(self, name: str) -> dict[str, object]:
        keys = ActorKeys(name, self.resources.prefix)
        return {"TableName": self.resources.table, "Key": keys.head(), "ConsistentRead": True}


def _committed(head: dict[str, dict[str, str]] | None) -> bool:
    return head is not None and int(head.get("seq", {"N": "0"})["N"]) > 0


class AwsHost(ActorPool):
    """The actors one invocation holds. :meth:`park_all` ends the invocation's work
    (each actor parked: schedule armed, lease released); :meth:`crash` stops as a
    killed container stops (leases left to expire)."""

    def __init__(
        self,
        config: ActorConfig,
        *,
        store: AwsActorStore,
        clock: Clock,
        alarms: WakeSchedule | None = None,
        registry: Registry | None = None,
    ) -> None:
        super().__init__(store, config, clock=clock, registry=registry)
        self.aws_store = store
        self.alarms = alarms
        self._parked: set[str] = set()  # for :attr:`wakes`
        self.unfinished: set[str] = set()
        """Actors whose work did not settle in the invocation: parked with a wake now."""
        self.pending_wakes: set[str] = set()
        """Actors parked without a schedule (the Scheduler refused): left to the sweep."""
        self.woken: set[str] = set()
        """Actors opened by a wake: their schedule fired (and deleted itself), or was
        pulled forward by a mailer, so their park always arms."""
        self.scheduler_skips = 0
        """Parks that left the schedule alone: the deadline had not changed."""

    async def wake(self, actor: str) -> bool:
        self.woken.add(actor)
        return await super().wake(actor)

    async def park(self, entry: OpenActor) -> int | None:
        # The schedule is armed while the lease is still held: a crash after it leaves
        # a schedule that wakes the actor; arming after the release could lose the wake.
        if self.alarms is not None:
            wake = self.clock.now() if entry.name in self.unfinished else entry.wake_at()
            await self._arm(entry.name, wake)
        return await super().park(entry)

    async def _arm(self, name: str, wake: int | None) -> None:
        assert self.alarms is not None
        lease = self.aws_store.leases.get(name)
        grant = None if lease is None else lease.grant_or_none
        if (
            lease is not None
            and grant is not None
            and grant.armed_known
            and grant.armed == wake
            and name not in self.woken
        ):
            # The previous holder armed this very deadline and nothing since can have
            # removed it: only a wake's firing deletes a schedule, and that invocation
            # (in self.woken) always arms. A mailer only pulls it forward, to a wake
            # that comes back here. So no Scheduler call (docs/design.md invariant 15).
            self.scheduler_skips += 1
            lease.record_armed(wake)
            return
        resources = self.aws_store.resources
        if not await arm_durably(self.alarms, resources, name, wake, self.clock.now()):
            self.pending_wakes.add(name)
        elif lease is not None:
            lease.record_armed(wake)

    async def flush(self, name: str) -> None:
        """Make what ``name`` committed so far durable (with a deferring store), before
        acting on it outside the actor. Raises as :meth:`core.session.Session.flush`."""
        entry = self.current(name)
        if entry is not None:
            await entry.harness.session.flush()

    async def park_all(self) -> None:
        for name in sorted(self.active):
            await self.evict(name, force=True)

    @property
    def wakes(self) -> Mapping[str, int]:
        """Deadlines of the schedules of the actors this host parked (read from the
        Scheduler: blocking, for tests)."""
        if self.alarms is None:
            return {}
        found = {name: self.alarms.armed(name) for name in self._parked}
        return {name: at for name, at in found.items() if at is not None}

    def parked(self, name: str, wake: int | None) -> None:
        self._parked.add(name)

    async def crash(self) -> None:
        """Stop as a SIGKILLed container: harnesses closed (which writes no outcome),
        no schedule armed, no lease released."""
        self.aws_store.crashed = True
        self.begin_shutdown()
        actors = [a for a in (self.current(n) for n in self.active) if a is not None]
        self._actors.clear()
        for entry in actors:
            await entry.close()
