"""An in-memory host: every actor's storage is a :class:`~core.MemoryStorage` in this
process. The reference host for tests and for checking the lifecycle where no disk
exists (it imports nothing a Durable Object lacks)."""

from __future__ import annotations

from dataclasses import dataclass, field

from core import Clock, MemoryStorage, TimerHandle
from core.harness import Registry
from core.storage import MemoryState
from runtimes.actor.config import ActorConfig
from runtimes.actor.errors import ActorLocked, UnknownActor
from runtimes.actor.lifecycle import ActorPool, OpenActor

__all__ = ["MemoryActorStore", "MemoryHost"]


@dataclass
class _MemoryLease:
    store: MemoryActorStore
    name: str
    storage: MemoryStorage
    fresh: bool

    async def release(self, *, discard: bool) -> None:
        self.store.held.discard(self.name)
        if discard:
            self.store.states.pop(self.name, None)


@dataclass
class MemoryActorStore:
    """Actors' :class:`MemoryState` by name (it outlives hosts: a new host on the same
    store "reopens" the actors, as a new process reopens files). ``held``: actors some
    host has open; a second open is refused as the file lock refuses it."""

    states: dict[str, MemoryState] = field(default_factory=dict)
    held: set[str] = field(default_factory=set)

    async def open(self, name: str, *, create: bool) -> _MemoryLease:
        if name in self.held:
            raise ActorLocked(f"actor {name!r} is open in another host")
        state = self.states.get(name)
        fresh = state is None
        if state is None:
            if not create:
                raise UnknownActor(f"no actor {name!r}")
            state = self.states[name] = MemoryState()
        self.held.add(name)
        return _MemoryLease(self, name, MemoryStorage(state), fresh)

    def exists(self, name: str) -> bool:
        return name in self.states

    async def names(self, *, after: str | None, limit: int) -> list[str]:
        return sorted(n for n in self.states if after is None or n > after)[:limit]


class MemoryHost(ActorPool):
    """Actors of a :class:`MemoryActorStore`, woken by timers on the host's clock.

    ``wakes``: parked actors with a durable deadline (actor → epoch ms); each has a clock
    timer that wakes it. :meth:`crash` stops the host as a SIGKILL would.
    """

    def __init__(
        self,
        config: ActorConfig,
        *,
        clock: Clock,
        store: MemoryActorStore | None = None,
        registry: Registry | None = None,
    ) -> None:
        self.memory = store or MemoryActorStore()
        super().__init__(self.memory, config, clock=clock, registry=registry)
        self.wakes: dict[str, int] = {}
        self._timers: dict[str, TimerHandle] = {}

    def admitted(self, entry: OpenActor) -> None:
        self._forget_wake(entry.name)

    def parked(self, name: str, wake: int | None) -> None:
        self._forget_wake(name)
        if wake is None or self.closing:
            return
        self.wakes[name] = wake
        self._timers[name] = self.clock.call_at(wake, lambda: self._fire(name))

    def closing_started(self) -> None:
        for name in list(self._timers):
            self._forget_wake(name)

    async def crash(self) -> None:
        """Stop as a killed process stops: every open actor's harness is closed (which
        writes no outcome, so storage is left as a crash leaves it), no wake is kept, and
        the holds are released so that a new host on the same store can take over."""
        self.begin_shutdown()
        self.closing_started()
        actors = [a for a in (self.current(n) for n in self.active) if a is not None]
        self._actors.clear()
        for entry in actors:
            await entry.close()

    def _fire(self, name: str) -> None:
        self._timers.pop(name, None)
        self.wakes.pop(name, None)
        if not self.closing:
            self.spawn(self._wake_job(name))

    async def _wake_job(self, name: str) -> None:
        try:
            await self.wake(name)
        except ActorLocked:
            pass
        except Exception as error:
            self.report(name, error)

    def _forget_wake(self, name: str) -> None:
        self.wakes.pop(name, None)
        timer = self._timers.pop(name, None)
        if timer is not None:
            timer.cancel()
