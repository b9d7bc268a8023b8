"""One Durable Object's actor: the harness opened once per isolate, woken by one alarm.

:class:`DurableActor` is the Durable Object's behaviour without the Workers SDK, so it
runs on CPython against the ``ctx.storage`` stand-in as well as in Pyodide:

* :meth:`DurableActor.harness` opens the harness on the object's SQLite the first time
  an isolate needs it (the Durable Object class calls it inside
  ``blockConcurrencyWhile``), calls ``resume()`` and arms the alarm;
* every commit re-arms the alarm from ``next_wake()`` (:class:`~.alarm.AlarmSlot` skips
  calls that would not change it); while tasks run, that is the ~30 s heartbeat;
* :meth:`DurableActor.serving` wraps each request: it arms at least a heartbeat *before*
  the request can write and keeps it while the request runs (an intermediate commit
  that leaves nothing to do does not clear it), then re-arms exactly. If the isolate
  dies between a commit and its re-arm, that alarm comes back, re-opens the harness and
  ``resume()`` finds the work; a request that wrote nothing costs at most one early
  alarm that finds nothing to do;
* :meth:`DurableActor.alarm` runs one delivery under the crash-loop guard: re-open if the
  isolate was evicted, ``resume()``, re-arm (late, as workerd advises). A duplicate or
  late delivery only recomputes the same alarm; ``resume()`` is idempotent.

The actor API app is not served here yet: the Durable Object will hand requests to the
host-neutral app with this object as its host (the harness under the single-writer
guarantee a Durable Object gives by construction).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

from core.clock import Clock
from core.harness import Harness
from core.storage import Storage
from runtimes.cloudflare.alarm import (
    HEARTBEAT_MS,
    AlarmGuard,
    AlarmReport,
    AlarmSlot,
    SqlFailureStore,
)
from runtimes.cloudflare.storage import open_durable_object_storage

__all__ = ["ActorStorage", "DurableActor", "HarnessOpener"]

HarnessOpener = Callable[[Storage], Awaitable[Harness]]


class ActorStorage(Protocol):
    """``ctx.storage``: SQL, ``transactionSync`` and the alarm."""

    @property
    def sql(self) -> Any: ...

    def transactionSync(self, fn: Callable[[], Any], /) -> Any: ...

    async def getAlarm(self) -> Any: ...

    async def setAlarm(self, when: int, /) -> Any: ...

    async def deleteAlarm(self) -> Any: ...


class DurableActor:
    """The harness of one Durable Object for the lifetime of one isolate.

    ``open_harness(storage)`` builds the harness (models, registry, settings from the
    Worker's configuration) on the storage this object opened; it must not resume it.
    ``report`` hears about failing alarms (see :class:`~.alarm.AlarmGuard`).
    """

    def __init__(
        self,
        storage: ActorStorage,
        *,
        open_harness: HarnessOpener,
        clock: Clock,
        report: Callable[[AlarmReport], None],
        heartbeat_ms: int = HEARTBEAT_MS,
        max_alarm_failures: int = 8,
    ) -> None:
        self._storage = storage
        self._open_harness = open_harness
        self._clock = clock
        self._heartbeat_ms = heartbeat_ms
        self.slot = AlarmSlot(storage, heartbeat_ms=heartbeat_ms)
        self.guard = AlarmGuard(
            SqlFailureStore(storage.sql), self.slot, report, max_failures=max_alarm_failures
        )
        self._harness: Harness | None = None
        self._unsubscribe: Callable[[], None] | None = None
        self._rearm: asyncio.Task[None] | None = None
        self._rearm_again = False
        self._requests = 0

    @property
    def is_open(self) -> bool:
        return self._harness is not None

    async def harness(self) -> Harness:
        """The open harness, opening and resuming it on first use in this isolate."""
        if self._harness is None:
            storage = await open_durable_object_storage(self._storage)
            try:
                harness = await self._open_harness(storage)
            except BaseException:
                await storage.close()
                raise
            self._harness = harness
            self._unsubscribe = harness.session.subscribe(lambda _event: self._schedule_rearm())
            harness.resume()
            await self.rearm()
        return self._harness

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[Harness]:
        """The harness for one request, with the alarm held at a heartbeat or sooner
        while it runs (see the module docstring)."""
        harness = await self.begin_request()
        try:
            yield harness
        finally:
            await self.end_request()

    async def begin_request(self) -> Harness:
        """:meth:`serving`'s entry: open if needed, then hold the alarm for a request."""
        harness = await self.harness()
        self._requests += 1
        try:
            await self.rearm()
        except BaseException:
            self._requests -= 1
            raise
        return harness

    async def end_request(self) -> None:
        self._requests -= 1
        await self.rearm()

    async def rearm(self) -> int | None:
        """Arm the alarm from the open harness's ``next_wake()``; return what is armed."""
        harness = self._harness
        if harness is None:
            return self.slot.armed
        wake = harness.next_wake()
        now = self._clock.now()
        # With the harness live here, "due now" means work is running or about to; a
        # request in flight may still write, so it counts as running too.
        running = (wake is not None and wake <= now) or self._requests > 0
        return await self.slot.arm(wake, now, running=running)

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

        async def work() -> None:
            harness = await self.harness()  # re-opens after an eviction (and resumes)
            harness.resume()  # idempotent: an open harness just looks for due work
            await self.rearm()

        return await self.guard.run(work, self._clock.now())

    async def settle(self) -> None:
        """Wait for a pending re-arm (tests and shutdown)."""
        while self._rearm is not None and not self._rearm.done():
            await self._rearm

    async def close(self) -> None:
        """Close the harness (an orderly stop; an eviction just drops the isolate)."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if self._rearm is not None:
            self._rearm.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._rearm
        if self._harness is not None:
            harness, self._harness = self._harness, None
            await harness.close()
