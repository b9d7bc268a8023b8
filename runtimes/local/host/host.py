"""ActorHost: activates actors on demand, evicts idle ones, wakes them when due.

::

    host = ActorHost(HostConfig(data_dir=Path("data"), models=models))
    await host.start()
    async with host.use("alice", create=True) as harness:
        root = await harness.root(agent=host.config.default_agent)
        submission = await root.submit("hello")
    await host.close()

Life of an actor (one per conversation tree, keyed by its id):

* **activation** on first use: take ``<actor>.lock`` (exclusive ``flock``; another
  process holding it → :class:`ActorLocked`), open ``<actor>.sqlite``, ``Harness.open``
  with the host's models, registry, env and settings, then ``resume()``;
* **eviction** once it has been untouched (no request, no commit) for ``idle_evict_s``
  while no request uses it and nothing runs or is runnable (``next_wake()`` is ``None``
  or in the future): its ``next_wake()`` goes to the in-process :class:`WakeHeap`, then
  the harness is closed and the lock released;
* **wake**: when the heap's time comes the actor is activated again, which resumes the
  due work (opening and resuming are idempotent, so a spurious wake only costs an open).

The host holds no task logic: it only opens, resumes and closes harnesses. Everything
it keeps in memory (the heap, idle times) can be lost: deadlines live in storage, and
``recover_on_start`` re-derives them after a crash.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from core.clock import Clock
from core.harness import Harness, Registry
from core.tasks import Inspection
from runtimes.local.clock import SystemClock
from runtimes.local.host.actor import Actor, actor_paths
from runtimes.local.host.config import HostConfig
from runtimes.local.host.errors import ActorLocked, HostClosed, UnknownActor
from runtimes.local.host.ids import check_actor_id
from runtimes.local.host.wakes import WakeHeap

__all__ = ["ActorHost"]

T = TypeVar("T")

_log = logging.getLogger("perdure.host")

# After an uncertain storage failure the actor is closed and re-opened after this delay:
# its in-memory state cannot be trusted, so its next_wake() cannot either.
_POISONED_RETRY_MS = 1_000


def _log_report(actor: str, error: BaseException) -> None:
    _log.error("actor %s: %s", actor, error, exc_info=error)


@dataclass(slots=True)
class _Slot:
    """Serialises the open/close transitions of one actor; dropped when unused."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0


class ActorHost:
    """Actors of one data directory, in this process. See the module docstring.

    All methods run on the event loop that called :meth:`start`.
    """

    def __init__(self, config: HostConfig) -> None:
        self.config = config
        self.registry = Registry(config.extensions)
        self.clock: Clock = config.clock or SystemClock()
        self._report = config.report or _log_report
        self._idle_ms = int(config.idle_evict_s * 1000)
        self._actors: dict[str, Actor] = {}
        self._slots: dict[str, _Slot] = {}
        self._wakes = WakeHeap(self.clock, self._on_wake)
        self._jobs: set[asyncio.Task[None]] = set()
        self._draining = asyncio.Event()
        self._closing = False
        self._close_job: asyncio.Future[None] | None = None

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Create the data directory; with ``recover_on_start``, look at every stored actor
        in the background and wake those whose work is due (see :meth:`recover`)."""
        self.config.data_dir.mkdir(parents=True, exist_ok=True)
        if self.config.recover_on_start:
            self._spawn(self.recover())

    def begin_shutdown(self) -> None:
        """Refuse new work and end long waits (:meth:`until_shutdown`) at once; the
        actors stay open until :meth:`close`. Lets an HTTP server drain quickly."""
        self._closing = True
        self._draining.set()

    async def close(self) -> None:
        """Close every actor without writing anything a crash would not also leave
        (closing a harness writes no outcome), and forget the wake heap (its deadlines
        are in storage). Idempotent; a cancelled caller does not stop the closing."""
        self.begin_shutdown()
        if self._close_job is None:
            self._close_job = asyncio.ensure_future(self._close())
        await asyncio.shield(self._close_job)

    async def _close(self) -> None:
        self._wakes.close()
        while self._jobs:  # jobs see _closing and stop early; never cancel a close midway
            await asyncio.gather(*list(self._jobs), return_exceptions=True)
        for name in list(self._slots):  # let transitions already under way finish
            async with self._transition(name):
                pass
        actors = list(self._actors.values())
        self._actors.clear()
        results = await asyncio.gather(*(a.close() for a in actors), return_exceptions=True)
        for actor, result in zip(actors, results, strict=True):
            if isinstance(result, BaseException):
                self._report(actor.name, result)

    @property
    def closing(self) -> bool:
        return self._closing

    # ------------------------------------------------------------------ state

    @property
    def active(self) -> frozenset[str]:
        """The ids of the actors open right now."""
        return frozenset(self._actors)

    @property
    def wakes(self) -> dict[str, int]:
        """Evicted actors with a durable deadline: actor → wake time (epoch ms)."""
        return self._wakes.pending()

    def exists(self, actor: str) -> bool:
        """Whether the actor has storage in the data directory (``actor`` is validated)."""
        db, _ = actor_paths(self.config.data_dir, check_actor_id(actor))
        return actor in self._actors or db.exists()

    # ------------------------------------------------------------------ requests

    @asynccontextmanager
    async def use(self, actor: str, *, create: bool = False) -> AsyncIterator[Harness]:
        """Activate ``actor`` if needed and hold it open (not evictable) for the block.

        ``create``: make the actor's storage if it has none; otherwise such an actor is
        :class:`UnknownActor` and nothing is written to disk. If the block raises and
        this activation created the storage and nothing has been committed to it since,
        the files are removed again: a refused request leaves no actor behind.

        Raises :class:`~runtimes.local.host.InvalidActorId`, :class:`UnknownActor`,
        :class:`ActorLocked` (another process holds the actor) or :class:`HostClosed`.
        """
        name = check_actor_id(actor)
        entry = self._actors.get(name)
        if entry is None or self._closing:
            async with self._transition(name):
                entry = await self._activate(name, create=create)
                entry.inflight += 1
        else:
            entry.inflight += 1
        failed = False
        try:
            yield entry.harness
        except BaseException:
            failed = True
            raise
        finally:
            entry.inflight -= 1
            self._touch(entry)
            if entry.harness.session.poisoned is not None or (failed and entry.fresh):
                retiring = self._spawn(self._retire(entry))
                if failed and entry.fresh:
                    # The refusal's answer must find no actor behind it: wait for the
                    # files to go (a cancelled wait leaves the retirement running).
                    await asyncio.wait([retiring])

    async def until_shutdown(self, awaitable: Awaitable[T]) -> tuple[bool, T | None]:
        """Await ``awaitable`` unless the host starts shutting down first.

        Returns ``(True, result)``, or ``(False, None)`` after cancelling the awaitable
        when shutdown began. For long waits inside a request (long polls).
        """
        work = asyncio.ensure_future(awaitable)
        drain = asyncio.ensure_future(self._draining.wait())
        try:
            await asyncio.wait({work, drain}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            work.cancel()  # the caller went away: so does its wait
            raise
        finally:
            drain.cancel()
        if work.done():
            return True, work.result()
        work.cancel()
        await asyncio.gather(work, return_exceptions=True)
        return False, None

    # ------------------------------------------------------------------ wakes and eviction

    async def wake(self, actor: str) -> bool:
        """Activate ``actor`` (if stored) and resume its work. Idempotent; returns whether
        the actor is open afterwards."""
        name = check_actor_id(actor)
        try:
            async with self._transition(name):
                entry = await self._activate(name, create=False)
        except (UnknownActor, HostClosed):
            return False
        self._arm_eviction(entry)
        return True

    async def evict(self, actor: str, *, force: bool = False) -> bool:
        """Evict ``actor`` now if it is evictable (``force``: even if it is not, e.g. with
        a request in flight — that request then fails). Returns whether it was closed."""
        name = check_actor_id(actor)
        async with self._transition(name):
            entry = self._actors.get(name)
            if entry is None or not (force or self._evictable(entry, idle_for=0)):
                return False
            await self._evict(entry)
            return True

    async def recover(self) -> None:
        """Look at every actor stored in the data directory that is not open: open it
        without resuming, read ``next_wake()``, and keep it open and resumed if work is
        due now, else close it and put its deadline (if any) in the wake heap.

        Actors held by another process are skipped; errors are reported, not raised.
        """
        for db in sorted(self.config.data_dir.glob("*.sqlite")):
            if self._closing:
                return
            try:
                name = check_actor_id(db.stem)
            except ValueError:
                continue
            try:
                async with self._transition(name):
                    if name not in self._actors and not self._closing:
                        await self._probe(name)
            except (ActorLocked, UnknownActor):
                continue
            except Exception as error:
                self._report(name, error)

    async def inspect(self, actor: str) -> Inspection:
        """The live tasks of ``actor``: from its harness if open, else by opening it
        without resuming (nothing runs) and closing it again."""
        name = check_actor_id(actor)
        async with self._transition(name):
            entry = self._actors.get(name)
            if entry is not None:
                return entry.harness.inspect()
            opened = await self._open(name, create=False)
            try:
                return opened.harness.inspect()
            finally:
                await opened.close()

    # ------------------------------------------------------------------ internals

    @asynccontextmanager
    async def _transition(self, name: str) -> AsyncIterator[None]:
        slot = self._slots.get(name)
        if slot is None:
            slot = self._slots[name] = _Slot()
        slot.users += 1
        try:
            async with slot.lock:
                yield
        finally:
            slot.users -= 1
            if slot.users == 0:
                del self._slots[name]

    async def _open(self, name: str, *, create: bool) -> Actor:
        return await Actor.open(
            name,
            self.config,
            registry=self.registry,
            clock=self.clock,
            report=self._report,
            create=create,
        )

    async def _activate(self, name: str, *, create: bool) -> Actor:
        """Under the actor's transition lock: the open actor, opening it if needed."""
        if self._closing:
            raise HostClosed("the host is shutting down")
        entry = self._actors.get(name)
        if entry is None:
            entry = self._admit(await self._open(name, create=create))
        return entry

    def _admit(self, entry: Actor) -> Actor:
        """Make an opened actor active: the live scheduler owns its timers from now on."""
        self._actors[entry.name] = entry
        self._wakes.discard(entry.name)

        def on_commit(_event: object) -> None:
            entry.fresh = False
            self._touch(entry)

        entry.harness.session.subscribe(on_commit)
        entry.harness.resume()
        self._observe(entry.name, "activated", None)
        return entry

    async def _probe(self, name: str) -> None:
        entry = await self._open(name, create=False)
        wake = entry.harness.next_wake()
        if wake is not None and wake <= self.clock.now():
            self._arm_eviction(self._admit(entry))
            return
        if wake is not None:
            # Armed before closing, so the actor is always open or in the heap; a fire
            # meanwhile waits for this transition to end.
            self._wakes.set(name, wake)
        await entry.close()

    def _touch(self, entry: Actor) -> None:
        # Called on every commit (on the session's line): keep it cheap.
        entry.touched = self.clock.now()
        self._arm_eviction(entry)

    def _arm_eviction(self, entry: Actor) -> None:
        """Arm the actor's idle check at ``touched + idle`` unless one is pending (it
        re-arms itself lazily when it fires early)."""
        if entry.evict_timer is not None or entry.closed or self._closing:
            return
        entry.evict_timer = self.clock.call_at(
            entry.touched + self._idle_ms, lambda: self._on_idle_timer(entry)
        )

    def _on_idle_timer(self, entry: Actor) -> None:
        entry.evict_timer = None
        if entry.closed or self._closing:
            return
        if self.clock.now() < entry.touched + self._idle_ms:
            self._arm_eviction(entry)
        else:
            self._spawn(self._idle_check(entry))

    async def _idle_check(self, entry: Actor) -> None:
        async with self._transition(entry.name):
            if self._actors.get(entry.name) is not entry or self._closing:
                return
            if self._evictable(entry, idle_for=self._idle_ms):
                await self._evict(entry)
                return
        # Busy: look again one idle period from now (commits may also re-arm it sooner).
        entry.touched = max(entry.touched, self.clock.now())
        self._arm_eviction(entry)

    def _evictable(self, entry: Actor, *, idle_for: int) -> bool:
        """No request in flight, untouched for ``idle_for`` ms, and nothing running or
        runnable. Waiting on a durable deadline does not keep an actor open — that is
        what the wake heap is for — so this asks ``next_wake()``, not ``scheduler.idle()``
        (which stays false while a foreground task waits for a retry backoff)."""
        if entry.inflight or self.clock.now() - entry.touched < idle_for:
            return False
        wake = entry.harness.next_wake()
        return wake is None or wake > self.clock.now()

    async def _evict(self, entry: Actor) -> None:
        """Under the transition lock: close the actor and arm its next wake."""
        poisoned = entry.harness.session.poisoned is not None
        wake = self.clock.now() + _POISONED_RETRY_MS if poisoned else entry.harness.next_wake()
        if wake is not None:
            # Armed before closing (see _probe); next_wake() must be read while open.
            self._wakes.set(entry.name, wake)
        del self._actors[entry.name]
        await entry.close()
        self._observe(entry.name, "evicted", wake)

    def _observe(self, name: str, event: str, wake: int | None) -> None:
        if self.config.observe is not None:
            try:
                self.config.observe(name, event, wake)
            except Exception as error:
                self._report(name, error)

    async def _retire(self, entry: Actor) -> None:
        """After a request: discard a fresh actor its failed request created, or close
        (and soon re-open) an actor whose storage failed uncertainly."""
        async with self._transition(entry.name):
            if self._actors.get(entry.name) is not entry or entry.inflight:
                return
            if entry.harness.session.poisoned is not None:
                await self._evict(entry)
            elif entry.fresh:
                del self._actors[entry.name]
                await entry.close(delete=True)

    def _on_wake(self, name: str) -> None:
        self._spawn(self._wake_job(name))

    async def _wake_job(self, name: str) -> None:
        try:
            await self.wake(name)
        except ActorLocked:
            pass  # another process owns the actor now; its host wakes it
        except Exception as error:
            self._report(name, error)

    def _spawn(self, job: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(job)
        self._jobs.add(task)
        task.add_done_callback(self._job_done)
        return task

    def _job_done(self, task: asyncio.Task[None]) -> None:
        self._jobs.discard(task)
        error = None if task.cancelled() else task.exception()
        if error is not None:
            self._report("(host)", error)
