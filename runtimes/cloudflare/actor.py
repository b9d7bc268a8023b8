"""One Durable Object's host: the actor lifecycle over ``ctx.storage``, woken by one alarm.

:class:`DurableActor` is the host-neutral :class:`~runtimes.actor.ActorPool` with exactly
one actor — this object's — and no Workers SDK import, so it runs on CPython against the
``ctx.storage`` stand-in as well as in Pyodide:

* :class:`DurableObjectStore` hands over the harness storage (the SQLite facade over
  ``ctx.storage``). The Durable Object itself is the single writer; the store also
  remembers *which* actor this object holds (a one-row table), because an alarm on a
  fresh isolate must know whom to wake before any request names it;
* every commit re-arms the alarm from ``next_wake()`` (:class:`~.alarm.AlarmSlot` skips
  calls that would not change it); while tasks run, that is the ~30 s heartbeat;
* every write transaction arms at least a heartbeat *before* it commits (the storage
  facade's ``before_write``); each :meth:`DurableActor.use` (every API request goes
  through one) keeps it while the request runs (an intermediate commit that leaves
  nothing to do does not clear it), then re-arms exactly. If the isolate dies between a
  commit and its re-arm, that alarm comes back, re-opens the actor and ``resume()``
  finds the work; a request that only reads costs no alarm call;
* when the work ends, the heartbeat is left to fire instead of deleted: requests in
  the next heartbeat need no ``setAlarm``, so an event costs an alarm call only when
  the earliest deadline moves (docs/performance.md), and the delivery that finds the
  actor open and idle here only looks (no write);
* parking (an eviction the host decides, a poisoned session) arms the alarm at the
  parked actor's next wake before it closes;
* :meth:`DurableActor.alarm` runs one delivery under the crash-loop guard: re-open if the
  isolate was evicted, ``resume()``, re-arm. A duplicate or late delivery only
  recomputes the same alarm; ``resume()`` is idempotent;
* with an :class:`~.index.ActorIndex`, the actor's id is added to the Worker's index once
  its first commit has landed: before the request that committed it is answered, and
  recorded in the object (``perdure_actor_indexed``) so it is added once. If the isolate
  dies first or the index fails, the alarm stays at a heartbeat or sooner until an alarm
  (or the next request) has added it; a refused first request is discarded, never added.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

from core.clock import Clock
from core.harness import Harness, Registry
from core.storage import Storage
from runtimes.actor import ActorConfig, ActorLocked, ActorPool, OpenActor, UnknownActor
from runtimes.cloudflare.alarm import (
    HEARTBEAT_MS,
    AlarmFailures,
    AlarmGuard,
    AlarmReport,
    AlarmSlot,
    SqlFailureStore,
)
from runtimes.cloudflare.index import ActorIndex
from runtimes.cloudflare.storage import open_durable_object_storage

__all__ = ["ActorStorage", "DurableActor", "DurableObjectStore"]


class ActorStorage(Protocol):
    """``ctx.storage``: SQL, ``transactionSync`` and the alarm."""

    @property
    def sql(self) -> Any: ...

    def transactionSync(self, fn: Callable[[], Any], /) -> Any: ...

    async def getAlarm(self) -> Any: ...

    async def setAlarm(self, when: int, /) -> Any: ...

    async def deleteAlarm(self) -> Any: ...


_NAME_TABLE = "perdure_actor_name"
_INDEXED_TABLE = "perdure_actor_indexed"  # exists once the Worker's index has the actor


def _rows(storage: ActorStorage, query: str, *bindings: Any) -> list[list[Any]]:
    return [list(row) for row in storage.sql.exec(query, *bindings).raw()]


def _tables(storage: ActorStorage, kind: str = "table") -> set[str]:
    # workerd's own tables (_cf_*) are not ours to list or drop.
    rows = _rows(storage, "SELECT name FROM sqlite_master WHERE type = ?", kind)
    return {str(r[0]) for r in rows if not str(r[0]).startswith(("_cf_", "sqlite_"))}


def _schema(storage: ActorStorage) -> set[str]:
    """Our tables and views (the harness schema has both)."""
    return _tables(storage) | _tables(storage, "view")


class _DurableLease:
    def __init__(
        self, store: DurableObjectStore, storage: Storage, fresh: bool, before: set[str]
    ) -> None:
        self._store = store
        self.storage = storage
        self.fresh = fresh
        self._before = before

    async def release(self, *, discard: bool) -> None:
        self._store.held = False
        if discard:
            self._store.discard(self._before)


class DurableObjectStore:
    """The :class:`~runtimes.actor.ActorStore` of one Durable Object.

    It holds at most one actor: the first one opened with ``create`` binds its name to
    the object (``perdure_actor_name``), written with the harness schema and dropped with
    it when a refused first request is discarded. Opening another name is
    :class:`UnknownActor` (the front door routes ``idFromName(actor)``, so that would be
    a routing bug, never a second actor). One open at a time: the pool never opens twice,
    so a second open is :class:`ActorLocked`.
    """

    def __init__(
        self,
        storage: ActorStorage,
        *,
        before_write: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._storage = storage
        self._before_write = before_write
        self.held = False
        self._name: str | None = None
        self._indexed = False

    @property
    def name(self) -> str | None:
        """The actor this object holds, or ``None`` (nothing stored yet)."""
        if self._name is None and _NAME_TABLE in _tables(self._storage):
            rows = _rows(self._storage, f"SELECT name FROM {_NAME_TABLE}")
            self._name = str(rows[0][0]) if rows else None
        return self._name

    def exists(self, name: str) -> bool:
        return self.name == name

    @property
    def indexed(self) -> bool:
        """Whether the Worker's index has this object's actor (:meth:`mark_indexed`)."""
        if not self._indexed:
            self._indexed = _INDEXED_TABLE in _tables(self._storage)
        return self._indexed

    def mark_indexed(self) -> None:
        def write() -> None:
            _rows(self._storage, f"CREATE TABLE IF NOT EXISTS {_INDEXED_TABLE} (at INTEGER) STRICT")

        self._storage.transactionSync(write)
        self._indexed = True

    async def names(self, *, after: str | None, limit: int) -> list[str]:
        """The one actor this object holds (every actor of a Worker is listed by the
        Worker, from its index: :mod:`~.index`)."""
        name = self.name
        return [name] if name is not None and (after is None or name > after) and limit else []

    async def open(self, name: str, *, create: bool) -> _DurableLease:
        bound = self.name
        if bound is not None and bound != name:
            raise UnknownActor(f"this Durable Object holds actor {bound!r}, not {name!r}")
        if bound is None and not create:
            raise UnknownActor(f"no actor {name!r}")
        if self.held:
            raise ActorLocked(f"actor {name!r} is already open in this Durable Object")
        before = _schema(self._storage) if bound is None else set()
        storage = await open_durable_object_storage(self._storage, before_write=self._before_write)
        if bound is None:
            try:
                self._bind(name)
            except BaseException:
                await storage.close()
                self.discard(before)
                raise
        self.held = True
        return _DurableLease(self, storage, bound is None, before)

    def _bind(self, name: str) -> None:
        def write() -> None:
            _rows(self._storage, f"CREATE TABLE {_NAME_TABLE} (name TEXT NOT NULL) STRICT")
            _rows(self._storage, f"INSERT INTO {_NAME_TABLE} (name) VALUES (?)", name)

        self._storage.transactionSync(write)
        self._name = name

    def discard(self, before: set[str]) -> None:
        """Drop every table and view created since ``before`` (a fresh actor left no
        record). The views too: one left behind would make the next creation's schema
        fail ("view already exists"), so the object could never hold an actor again."""
        views = sorted(_tables(self._storage, "view") - before)
        created = sorted(_tables(self._storage) - before)

        def drop() -> None:
            for view in views:
                _rows(self._storage, f'DROP VIEW "{view}"')
            for table in created:
                _rows(self._storage, f'DROP TABLE "{table}"')

        if created or views:
            self._storage.transactionSync(drop)
        self._name = None


class DurableActor(ActorPool):
    """The host of one Durable Object for the lifetime of one isolate.

    ``config`` is what the actor is opened with (models, extensions, env, settings).
    ``actor``: the object's actor id when the caller knows it (else it is read from
    storage, or bound by the first request). ``alarm_report`` hears about failing alarms
    (see :class:`~.alarm.AlarmGuard`). ``index``: the Worker's index of its actors, which
    this object adds its actor to (none: nothing is indexed; see the module docstring).
    """

    def __init__(
        self,
        storage: ActorStorage,
        config: ActorConfig,
        *,
        clock: Clock,
        alarm_report: Callable[[AlarmReport], None],
        actor: str | None = None,
        registry: Registry | None = None,
        heartbeat_ms: int = HEARTBEAT_MS,
        max_alarm_failures: int = 8,
        index: ActorIndex | None = None,
    ) -> None:
        self.durable = DurableObjectStore(storage, before_write=self._before_write)
        super().__init__(self.durable, config, clock=clock, registry=registry)
        self._hint = actor
        self.index = index
        self.slot = AlarmSlot(storage, heartbeat_ms=heartbeat_ms)
        self.guard = AlarmGuard(
            SqlFailureStore(storage.sql), self.slot, alarm_report, max_failures=max_alarm_failures
        )
        self._rearm: asyncio.Task[None] | None = None
        self._rearm_again = False
        self._requests = 0
        self._delivering = False

    @property
    def actor_name(self) -> str | None:
        """This object's actor: stored, else the one the caller named."""
        return self.durable.name or self._hint

    @property
    def is_open(self) -> bool:
        return bool(self.active)

    # ------------------------------------------------------------------ pool hooks

    def admitted(self, entry: OpenActor) -> None:
        self._schedule_rearm()

    def touched(self, entry: OpenActor) -> None:
        self._schedule_rearm()  # on every commit: coalesced, skipped when unchanged

    async def park(self, entry: OpenActor) -> int | None:
        # Armed before the actor closes (an async call, so not in the sync ``parked``
        # hook): the object is always either open or due to be woken by its alarm.
        await self.add_to_index()
        await self.slot.arm(
            entry.wake_at(), self.clock.now(), running=self._unindexed(), keep_near=False
        )
        return await super().park(entry)

    # ------------------------------------------------------------------ the index

    def _unindexed(self) -> bool:
        """The actor has a commit the Worker's index does not know of yet."""
        name = self.durable.name
        if self.index is None or name is None or self.durable.indexed:
            return False
        entry = self.current(name)
        return entry is None or not entry.fresh

    async def add_to_index(self) -> None:
        """Add the actor to the Worker's index if it has a commit and is not there yet.
        A failure is reported, not raised: the heartbeat (see :meth:`rearm`) brings the
        object back to try again."""
        name = self.durable.name
        if self.index is None or name is None or not self._unindexed():
            return
        try:
            await self.index.add(name)
        except Exception as error:
            self.report(name, error)
            return
        self.durable.mark_indexed()

    # ------------------------------------------------------------------ requests

    @contextlib.asynccontextmanager
    async def use(self, actor: str, *, create: bool = False) -> AsyncIterator[Harness]:
        """:meth:`ActorPool.use`, with the alarm held at a heartbeat or sooner while the
        request runs (see the module docstring)."""
        self._requests += 1
        try:
            async with super().use(actor, create=create) as harness:
                yield harness  # its first write arms the heartbeat (_before_write)
        finally:
            self._requests -= 1
            # Before the answer: a client told its actor was created finds it listed.
            await self.add_to_index()
            await self.rearm()

    def serving(self) -> contextlib.AbstractAsyncContextManager[Harness]:
        """:meth:`use` on this object's actor, creating it if needed."""
        return self.use(self._require_name(), create=True)

    async def harness(self) -> Harness:
        """This object's open harness, opening (creating) and resuming it if needed."""
        async with self.serving() as harness:
            return harness

    def _require_name(self) -> str:
        name = self.actor_name
        if name is None:
            raise UnknownActor("this Durable Object holds no actor yet")
        return name

    # ------------------------------------------------------------------ the alarm

    async def rearm(self) -> int | None:
        """Arm the alarm from the open actor's next wake; return what is armed."""
        name = self.actor_name
        entry = self.current(name) if name is not None else None
        now = self.clock.now()
        if entry is None or entry.closed:
            if self.durable.name is None:
                # A refused first request was discarded: nothing is left to wake.
                return await self.slot.arm(None, now, running=False, keep_near=False)
            return self.slot.armed
        wake = entry.wake_at()
        # With the actor live here, "due now" means work is running or about to; a
        # request in flight may still write, so it counts as running too, and so does
        # an actor the index does not have yet (the heartbeat adds it).
        running = (wake is not None and wake <= now) or self._requests > 0 or self._unindexed()
        return await self.slot.arm(wake, now, running=running)

    async def _before_write(self) -> None:
        # Before every write transaction of the harness: a heartbeat, unless an alarm is
        # armed that soon already (then no call). If the isolate dies between the commit
        # and its re-arm, this alarm comes back and ``resume()`` finds the work. Armed
        # here rather than when a request starts, a request that reads costs no call.
        # Inside an alarm delivery it is not needed: if the isolate dies before the
        # handler returns, workerd delivers the alarm again.
        if self._delivering:
            return
        now = self.clock.now()
        await self.slot.arm(now, now, running=True)

    def _schedule_rearm(self) -> None:
        # Called on the commit's line: coalesce into one re-arm task at a time.
        if self._rearm is not None and not self._rearm.done():
            self._rearm_again = True
            return
        self._rearm = asyncio.ensure_future(self._rearm_loop())

    async def _rearm_loop(self) -> None:
        while True:
            self._rearm_again = False
            await self.rearm()
            if not self._rearm_again:
                return

    async def alarm(self) -> bool:
        """One alarm delivery; ``True`` if it ran (see :class:`~.alarm.AlarmGuard`)."""
        if self._nothing_to_do():
            # The heartbeat the slot left armed when the work ended: a look, no writes.
            self.slot.consumed()
            return True

        async def work() -> None:
            name = self.durable.name
            if name is None:
                return  # nothing stored: nothing to wake
            entry = self.current(name)
            if entry is None:
                await self.wake(name)  # re-opens after an eviction (and resumes)
            else:
                entry.harness.resume()  # idempotent: an open actor just looks for due work
            await self.add_to_index()
            await self.rearm()

        self._delivering = True
        try:
            return await self.guard.run(work, self.clock.now())
        finally:
            self._delivering = False

    def _nothing_to_do(self) -> bool:
        # Open here, idle, no request in flight and no failed attempts on record (those
        # go through the guard, so that a success clears them).
        name = self.durable.name
        entry = self.current(name) if name is not None else None
        return (
            entry is not None
            and not entry.closed
            and self._requests == 0
            and entry.wake_at() is None
            and not self._unindexed()  # that heartbeat is there to add it to the index
            and self.guard.failures == AlarmFailures()
        )

    async def settle(self) -> None:
        """Wait for a pending re-arm (tests and shutdown)."""
        while self._rearm is not None and not self._rearm.done():
            await self._rearm

    async def close(self) -> None:
        """Close the actor (an orderly stop; an eviction just drops the isolate)."""
        await super().close()
        if self._rearm is not None:
            self._rearm.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._rearm
