"""The life of an actor, the same on every host.

::

    open      the host's store hands over the actor's storage under its single-writer
              guarantee (a file lock, a Durable Object, a lease); the env is entered and
              ``Harness.open`` runs (nothing runs yet)
    activate  subscribe to its commits, then ``resume()``
    use       requests hold it open; a request that created the actor and failed before
              anything was committed leaves no actor behind (its storage is discarded)
    park      read ``next_wake()`` *while still open*, hand it to the host's wake-up
              mechanism (timer heap, alarm, schedule), then close
    poisoned  after an uncertain storage failure the in-memory state cannot be trusted:
              the actor is parked with a wake shortly after, and the next open starts
              from storage

:class:`ActorPool` implements this over an :class:`ActorStore` (what differs per host: where
storage lives and how one writer is guaranteed). It starts no thread and opens no file or
socket itself, so it runs unchanged in a Durable Object under Pyodide. Hosts subclass it
and add their own wake-up and eviction policy through hooks (:meth:`ActorPool.touched`,
:meth:`ActorPool.parked`, :meth:`ActorPool.admitted`, :meth:`ActorPool.activated`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Coroutine
from contextlib import AbstractContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, runtime_checkable

from core import Clock, Storage, TimerHandle
from core.harness import Harness, Models, Registry
from core.telemetry import NO_TELEMETRY
from runtimes.actor.config import ActorConfig, Reporter
from runtimes.actor.errors import HostClosed, ListingUnsupported, UnknownActor
from runtimes.actor.ids import check_actor_id
from runtimes.actor.pacing import AcceptFirst, PacedModels

__all__ = [
    "POISONED_RETRY_MS",
    "ActorPool",
    "ActorStore",
    "ListableStore",
    "OpenActor",
    "StoreLease",
]

T = TypeVar("T")

_log = logging.getLogger("perdure.host")

POISONED_RETRY_MS = 1_000
"""After an uncertain storage failure the actor is parked and woken again this much later:
its in-memory state cannot be trusted, so its ``next_wake()`` cannot either."""


class StoreLease(Protocol):
    """One actor's storage, held under the host's single-writer guarantee.

    ``storage`` is open; ``fresh`` says this open created the actor (it had no storage).
    :meth:`release` is called once, after the harness closed the storage; ``discard``
    (only ever for a ``fresh`` lease whose storage holds no commit) removes everything
    the open created, so that no actor is left behind.
    """

    @property
    def storage(self) -> Storage: ...

    @property
    def fresh(self) -> bool: ...

    async def release(self, *, discard: bool) -> None: ...


class ActorStore(Protocol):
    """Where a host keeps its actors' storage.

    :meth:`open` returns the actor's storage under an exclusive hold, or raises
    :class:`~runtimes.actor.ActorLocked` when another writer holds it, or
    :class:`~runtimes.actor.UnknownActor` when it has none and ``create`` is false (and
    then creates nothing). :meth:`exists` tells whether the actor has storage.
    """

    async def open(self, name: str, *, create: bool) -> StoreLease: ...

    def exists(self, name: str) -> bool: ...


@runtime_checkable
class ListableStore(Protocol):
    """An :class:`ActorStore` that can list the actors it has storage for.

    :meth:`names` returns at most ``limit`` actor names in ascending order, each greater
    than ``after`` (``None``: from the first). It opens and locks nothing, so a listing
    never activates an actor or waits on another writer. A store without it makes the
    host answer a listing with :class:`~runtimes.actor.ListingUnsupported`.
    """

    async def names(self, *, after: str | None, limit: int) -> list[str]: ...


class OpenActor:
    """An open actor. The pool owns the bookkeeping fields:

    ``inflight``: requests using the actor right now (an actor is never parked under one);
    ``touched``: clock time of the last request or commit (hosts count idleness from it);
    ``fresh``: this activation created the storage and nothing was committed since, so it
    holds no record and may be discarded if the creating request fails;
    ``timer``: a host's pending check on the actor (e.g. the local idle timer), if any.
    """

    def __init__(
        self, name: str, harness: Harness, lease: StoreLease, stack: AsyncExitStack
    ) -> None:
        self.name = name
        self.harness = harness
        self.inflight = 0
        self.touched = harness.clock.now()
        self.fresh = lease.fresh
        self.timer: TimerHandle | None = None
        self._lease = lease
        self._stack = stack
        self._closed = False

    @classmethod
    async def open(
        cls,
        name: str,
        store: ActorStore,
        config: ActorConfig,
        *,
        registry: Registry,
        clock: Clock,
        report: Reporter,
        create: bool,
        models: Models | None = None,
    ) -> OpenActor:
        """Take the actor from ``store``, enter its env and ``Harness.open`` it; nothing
        runs until :meth:`activate`. On any failure everything taken so far is released
        (and a storage this call created is discarded). ``models`` (default:
        ``config.models``) is what the harness requests through (the pool's are paced)."""
        lease = await store.open(name, create=create)
        stack = AsyncExitStack()
        try:
            env = None
            if config.env is not None:
                env = await stack.enter_async_context(config.env(name))

            def report_error(error: BaseException) -> None:
                report(name, error)

            # Harness.open closes the storage itself when it fails.
            harness = await Harness.open(
                lease.storage,
                models=config.models if models is None else models,
                registry=registry,
                env=env,
                clock=clock,
                settings=config.settings,
                report=report_error,
                telemetry=NO_TELEMETRY if config.telemetry is None else config.telemetry(name),
            )
        except BaseException:
            try:
                await stack.aclose()
            finally:
                await lease.release(discard=lease.fresh)
            raise
        return cls(name, harness, lease, stack)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def poisoned(self) -> bool:
        return self.harness.session.poisoned is not None

    def activate(self, on_commit: Any) -> None:
        """Subscribe ``on_commit`` to the actor's commits, then start its work."""
        self.harness.session.subscribe(on_commit)
        self.harness.resume()

    def wake_at(self) -> int | None:
        """When the actor must run again (read while open): ``next_wake()``, or shortly
        from now when its session is poisoned."""
        if self.poisoned:
            return self.harness.clock.now() + POISONED_RETRY_MS
        return self.harness.next_wake()

    async def close(self, *, discard: bool = False) -> None:
        """Close the harness (it writes no outcome: invariant 12), then the environment,
        then release the storage — last, so no other writer opens a half-closed actor.
        ``discard`` (only for a ``fresh`` actor) removes what its open created."""
        if self._closed:
            return
        self._closed = True
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        try:
            await self.harness.close()
        finally:
            try:
                await self._stack.aclose()
            finally:
                await self._lease.release(discard=discard)


def _log_report(actor: str, error: BaseException) -> None:
    _log.error("actor %s: %s", actor, error, exc_info=error)


@dataclass(slots=True)
class _Slot:
    """Serialises the open/close transitions of one actor; dropped when unused."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0


class ActorPool:
    """The actors a host holds open, their transitions and their requests.

    It implements the request side of :class:`~runtimes.actor.Host` (``use``,
    ``until_shutdown``) and the lifecycle of the module docstring. All methods run on one
    event loop. Subclasses hook in their wake-up policy:

    * :meth:`admitted` — an actor was opened and activated;
    * :meth:`touched` — a request ended or a commit happened (cheap: on every commit);
    * :meth:`parked` — an actor is about to close with this next wake (``None``: nothing
      due); called *before* it closes, so an actor is always open or known to the wake-up.
    * :meth:`activated` (async) — an actor was activated; awaited before any request
      uses it.
    """

    def __init__(
        self,
        store: ActorStore,
        config: ActorConfig,
        *,
        clock: Clock,
        registry: Registry | None = None,
    ) -> None:
        self.actor_config = config
        self.store = store
        self.clock = clock
        self.registry = registry or Registry(config.extensions)
        self.report: Reporter = config.report or _log_report
        self.pacer = AcceptFirst()
        """Acceptance first: every actor's model requests wait while submissions are
        being accepted (:mod:`runtimes.actor.pacing`)."""
        self._models = PacedModels(config.models, self.pacer)
        self._actors: dict[str, OpenActor] = {}
        self._slots: dict[str, _Slot] = {}
        self._jobs: set[asyncio.Task[None]] = set()
        self._draining = asyncio.Event()
        self._closing = False
        self._close_job: asyncio.Future[None] | None = None

    # ------------------------------------------------------------------ hooks

    def admitted(self, entry: OpenActor) -> None:
        """An actor was opened and activated (default: nothing)."""

    def touched(self, entry: OpenActor) -> None:
        """A request ended or the actor committed (default: nothing)."""

    def parked(self, name: str, wake: int | None) -> None:
        """``name`` is closing; it must run again at ``wake`` (default: nothing)."""

    async def activated(self, entry: OpenActor) -> None:
        """An actor was just activated, still under its transition: runs before any
        request uses it (default: nothing; the local host moves journaled input in)."""

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Nothing to start here; hosts that keep state at start override it."""

    def begin_shutdown(self) -> None:
        """Refuse new work and end long waits (:meth:`until_shutdown`) at once; the
        actors stay open until :meth:`close`. Lets an HTTP server drain quickly."""
        self._closing = True
        self._draining.set()

    async def close(self) -> None:
        """Close every actor without writing anything a crash would not also leave
        (closing a harness writes no outcome). Idempotent; a cancelled caller does not
        stop the closing."""
        self.begin_shutdown()
        if self._close_job is None:
            self._close_job = asyncio.ensure_future(self._close())
        await asyncio.shield(self._close_job)

    async def _close(self) -> None:
        self.closing_started()
        while self._jobs:  # jobs see _closing and stop early; never cancel a close midway
            await asyncio.gather(*list(self._jobs), return_exceptions=True)
        for name in list(self._slots):  # let transitions already under way finish
            async with self.transition(name):
                pass
        actors = list(self._actors.values())
        self._actors.clear()
        results = await asyncio.gather(*(a.close() for a in actors), return_exceptions=True)
        for actor, result in zip(actors, results, strict=True):
            if isinstance(result, BaseException):
                self.report(actor.name, result)

    def closing_started(self) -> None:
        """Called once when closing begins, before the actors close (default: nothing)."""

    @property
    def closing(self) -> bool:
        return self._closing

    # ------------------------------------------------------------------ state

    @property
    def active(self) -> frozenset[str]:
        """The ids of the actors open right now."""
        return frozenset(self._actors)

    def exists(self, actor: str) -> bool:
        """Whether the actor has storage (``actor`` is validated)."""
        name = check_actor_id(actor)
        return name in self._actors or self.store.exists(name)

    async def actors(self, *, after: str | None = None, limit: int = 100) -> list[str]:
        """The host's actors by name (see :class:`ListableStore`); raises
        :class:`~runtimes.actor.ListingUnsupported` when the store cannot list them."""
        if not isinstance(self.store, ListableStore):
            raise ListingUnsupported(
                f"{type(self).__name__} keeps no index of its actors; list them where "
                "they are stored"
            )
        return await self.store.names(after=after, limit=limit)

    # ------------------------------------------------------------------ requests

    @asynccontextmanager
    async def use(self, actor: str, *, create: bool = False) -> AsyncIterator[Harness]:
        """Activate ``actor`` if needed and hold it open (not parkable) for the block.

        ``create``: make the actor's storage if it has none; otherwise such an actor is
        :class:`UnknownActor` and nothing is written. If the block raises and this
        activation created the storage and nothing has been committed to it since, the
        storage is discarded before the block's error propagates: a refused request
        leaves no actor behind.

        Raises :class:`~runtimes.actor.InvalidActorId`, :class:`UnknownActor`,
        :class:`ActorLocked` (another writer holds the actor) or :class:`HostClosed`.
        """
        name = check_actor_id(actor)
        entry = self._actors.get(name)
        if entry is None or self._closing:
            async with self.transition(name):
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
            if entry.poisoned or (failed and entry.fresh):
                # Awaited (shielded), not left to a background job: the caller's answer
                # must not overtake the discard of the actor it refused to create.
                job = self._spawn(self._retire(entry))
                await asyncio.shield(job)

    def accepting(self) -> AbstractContextManager[None]:
        """Hold for the block: a submission is being accepted, so answering work waits
        (see :class:`~runtimes.actor.pacing.AcceptFirst`)."""
        return self.pacer.accepting()

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

    # ------------------------------------------------------------------ wakes and parking

    async def wake(self, actor: str) -> bool:
        """Activate ``actor`` (if stored) and resume its work. Idempotent (a wake
        delivered twice only costs a look); returns whether the actor is open afterwards."""
        name = check_actor_id(actor)
        try:
            async with self.transition(name):
                entry = await self._activate(name, create=False)
        except (UnknownActor, HostClosed):
            return False
        self.touched(entry)
        return True

    async def evict(self, actor: str, *, force: bool = False) -> bool:
        """Park ``actor`` now if it is parkable (``force``: even if it is not, e.g. with
        work in flight — that request then fails). Returns whether it was closed."""
        name = check_actor_id(actor)
        async with self.transition(name):
            entry = self._actors.get(name)
            if entry is None or not (force or self.parkable(entry, idle_ms=0)):
                return False
            await self.park(entry)
            return True

    def parkable(self, entry: OpenActor, *, idle_ms: int) -> bool:
        """No request in flight, untouched for ``idle_ms``, and nothing running or
        runnable. Waiting on a durable deadline does not keep an actor open — the host's
        wake-up brings it back — so this asks ``next_wake()``, not ``scheduler.idle()``
        (which stays false while a foreground task waits for a retry backoff)."""
        if entry.inflight or self.clock.now() - entry.touched < idle_ms:
            return False
        wake = entry.harness.next_wake()
        return wake is None or wake > self.clock.now()

    async def park(self, entry: OpenActor) -> int | None:
        """Under the actor's transition: read its next wake while open, tell the host
        (:meth:`parked`), close it. Returns the wake."""
        wake = entry.wake_at()
        self.parked(entry.name, wake)
        del self._actors[entry.name]
        await entry.close()
        self._observe(entry.name, "evicted", wake)
        return wake

    async def open_actor(self, name: str, *, create: bool) -> OpenActor:
        """Open (not activate) ``name``: for a look without running anything."""
        return await OpenActor.open(
            name,
            self.store,
            self.actor_config,
            registry=self.registry,
            clock=self.clock,
            report=self.report,
            create=create,
            models=self._models,
        )

    def admit(self, entry: OpenActor) -> OpenActor:
        """Make an opened actor active: subscribe, ``resume()``, :meth:`admitted`."""
        self._actors[entry.name] = entry

        def on_commit(_event: object) -> None:
            entry.fresh = False
            self._touch(entry)

        entry.activate(on_commit)
        self.admitted(entry)
        self._observe(entry.name, "activated", None)
        return entry

    def current(self, name: str) -> OpenActor | None:
        """The open actor ``name``, if any."""
        return self._actors.get(name)

    # ------------------------------------------------------------------ internals

    @asynccontextmanager
    async def transition(self, name: str) -> AsyncIterator[None]:
        """Hold ``name``'s open/close transition lock for the block."""
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

    async def _activate(self, name: str, *, create: bool) -> OpenActor:
        """Under the actor's transition lock: the open actor, opening it if needed."""
        if self._closing:
            raise HostClosed("the host is shutting down")
        entry = self._actors.get(name)
        if entry is None:
            entry = self.admit(await self.open_actor(name, create=create))
            await self.activated(entry)
        return entry

    def _touch(self, entry: OpenActor) -> None:
        # Called on every commit (on the session's line): keep it cheap.
        entry.touched = self.clock.now()
        self.touched(entry)

    def _observe(self, name: str, event: str, wake: int | None) -> None:
        observe = self.actor_config.observe
        if observe is not None:
            try:
                observe(name, event, wake)
            except Exception as error:
                self.report(name, error)

    async def _retire(self, entry: OpenActor) -> None:
        """After a request: discard a fresh actor its failed request created, or park
        (and soon re-open) an actor whose storage failed uncertainly."""
        async with self.transition(entry.name):
            if self._actors.get(entry.name) is not entry or entry.inflight:
                return
            if entry.poisoned:
                await self.park(entry)
            elif entry.fresh:
                del self._actors[entry.name]
                await entry.close(discard=True)

    def spawn(self, job: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """Run ``job`` in the background; :meth:`close` waits for it, errors are reported."""
        return self._spawn(job)

    def _spawn(self, job: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(job)
        self._jobs.add(task)
        task.add_done_callback(self._job_done)
        return task

    def _job_done(self, task: asyncio.Task[None]) -> None:
        self._jobs.discard(task)
        error = None if task.cancelled() else task.exception()
        if error is not None:
            self.report("(host)", error)
