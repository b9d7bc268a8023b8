"""The host scenario kit's target for the Durable Object host, on the ``ctx.storage``
stand-in (runs on CPython and, through pytest inside Pyodide, in Pyodide too).

A Durable Object host holds one actor, while the kit drives a host holding many. So the
kit's host here is what workerd is to a deployment: :class:`DurableNamespaceHost` routes
each actor to its own object (one :class:`~runtimes.cloudflare.actor.DurableActor` on its
own :class:`~tests.cloudflare.standin.DurableObjectHome`), creating the object on first
use, at most one live instance per name (a second "deployment" reaching an object that
another one holds open is refused, as workerd never runs two). Wake-ups are the
objects' alarms: ``wakes`` is what each home has armed, ``wake`` delivers an alarm the
way workerd does (cleared, then ``alarm()``). The Worker's index of its actors is a
set of index objects on homes of their own (:class:`IndexObjects`): each actor object
adds its actor there, and the host lists from there, as the Worker does.
"""

from __future__ import annotations

import asyncio
import hashlib
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Mapping
from contextlib import AbstractContextManager, asynccontextmanager, nullcontext, suppress
from pathlib import Path
from typing import TypeVar

from core import Clock
from core.harness import Harness, Registry
from runtimes.actor import ActorConfig, ActorLocked, HostClosed, check_actor_id
from runtimes.actor.testing import KitHost
from runtimes.cloudflare.actor import DurableActor
from runtimes.cloudflare.alarm import AlarmReport
from runtimes.cloudflare.index import ActorIndex, IndexShard, shard_name
from tests.cloudflare.standin import DurableObjectHome

__all__ = ["DurableNamespace", "DurableNamespaceHost", "IndexObjects"]

T = TypeVar("T")


class _ShardObject:
    """An index object as its stub reaches it (the Worker's stubs call the same two
    methods over RPC)."""

    def __init__(self, shard: IndexShard) -> None:
        self.shard = shard
        self.calls = 0

    async def add(self, actor: str) -> None:
        self.calls += 1
        self.shard.add(actor)

    async def names(self, after: str | None, limit: int) -> list[str]:
        self.calls += 1
        return self.shard.names(after, limit)


class IndexObjects:
    """The index objects of one namespace, each on its own home under ``root``, one
    live instance each (as workerd runs them)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.homes: dict[int, DurableObjectHome] = {}
        self.live: dict[int, _ShardObject] = {}

    def shard(self, number: int) -> _ShardObject:
        if number not in self.live:
            home = self.homes.get(number)
            if home is None:
                self.root.mkdir(parents=True, exist_ok=True)
                home = self.homes[number] = DurableObjectHome(
                    self.root / f"{shard_name(number)}.sqlite"
                )
            self.live[number] = _ShardObject(IndexShard(home.open()))
        return self.live[number]

    def index(self) -> ActorIndex:
        return ActorIndex(self.shard)

    def close(self) -> None:
        self.live.clear()
        for home in self.homes.values():
            home.close()


class DurableNamespaceHost:
    """One deployment's view of the namespace (see the module docstring)."""

    def __init__(self, target: DurableNamespace, config: ActorConfig, clock: Clock) -> None:
        self._target = target
        self.actor_config = config
        self.clock = clock
        self.registry = Registry(config.extensions)  # one deployment: one registry
        self.alarm_reports: list[AlarmReport] = []
        self._objects: dict[str, DurableActor] = {}
        self._draining = asyncio.Event()

    def _object(self, actor: str) -> DurableActor:
        name = check_actor_id(actor)
        obj = self._objects.get(name)
        if obj is None:
            holder = self._target.holders.get(name)
            if holder is not None and holder is not self and name in holder.active:
                raise ActorLocked(f"actor {name!r} is live in another deployment")
            obj = DurableActor(
                self._target.home(name).open(),  # a new isolate (the last one is evicted)
                self.actor_config,
                clock=self.clock,
                alarm_report=self.alarm_reports.append,
                actor=name,
                registry=self.registry,
                index=self._target.index.index(),
            )
            self._objects[name] = obj
            self._target.holders[name] = self
        return obj

    @property
    def active(self) -> frozenset[str]:
        return frozenset(name for name, obj in self._objects.items() if obj.is_open)

    @property
    def wakes(self) -> Mapping[str, int]:
        return {
            name: home.alarm
            for name, home in self._target.homes.items()
            if home.alarm is not None and name not in self.active
        }

    @asynccontextmanager
    async def use(self, actor: str, *, create: bool = False) -> AsyncIterator[Harness]:
        if self._draining.is_set():
            raise HostClosed("the host is shutting down")
        async with self._object(actor).use(actor, create=create) as harness:
            yield harness

    async def actors(self, *, after: str | None = None, limit: int = 100) -> list[str]:
        # As the Worker lists them: from the index objects, waking no actor's object.
        return await self._target.index.index().names(after=after, limit=limit)

    def accepting(self) -> AbstractContextManager[None]:
        # Each object paces its own actor (its pool's AcceptFirst); nothing is shared.
        return nullcontext()

    async def until_shutdown(self, awaitable: Awaitable[T]) -> tuple[bool, T | None]:
        work = asyncio.ensure_future(awaitable)
        drain = asyncio.ensure_future(self._draining.wait())
        try:
            await asyncio.wait({work, drain}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            drain.cancel()
        if work.done():
            return True, work.result()
        work.cancel()
        await asyncio.gather(work, return_exceptions=True)
        return False, None

    async def evict(self, actor: str, *, force: bool = False) -> bool:
        obj = self._objects.get(check_actor_id(actor))
        return obj is not None and await obj.evict(actor, force=force)

    async def wake(self, actor: str) -> bool:
        """workerd delivers the object's alarm: cleared, then ``alarm()``."""
        obj = self._object(actor)
        self._target.home(actor).alarm = None
        await obj.alarm()
        await obj.settle()
        return obj.is_open

    async def start(self) -> None:
        for obj in self._objects.values():
            await obj.start()

    async def close(self) -> None:
        self._draining.set()
        for obj in self._objects.values():
            await obj.close()
        self._release()

    async def crash(self) -> None:
        """Every isolate dies: harnesses closed without parking (closing writes no
        outcome), storage objects evicted; the files and the alarms stay."""
        self._draining.set()
        for name, obj in self._objects.items():
            obj.begin_shutdown()
            entry = obj.current(name)
            if entry is not None:
                await entry.close()
            with suppress(asyncio.CancelledError):
                await obj.settle()
            self._target.home(name).close()
        self._release()

    def _release(self) -> None:
        for name in self._objects:
            if self._target.holders.get(name) is self:
                del self._target.holders[name]
        self._objects = {}


class DurableNamespace:
    """The kit's target: a namespace of Durable Object homes under ``root``.
    ``listed_actors``: how many actors the kit's listing check creates (each is a
    SQLite file written with full syncs: ~0.1 s an actor on a busy disk)."""

    def __init__(self, root: Path, *, listed_actors: int = 200) -> None:
        self.root = root
        self.listed_actors = listed_actors
        self.homes: dict[str, DurableObjectHome] = {}
        self.holders: dict[str, DurableNamespaceHost] = {}
        self.index = IndexObjects(root / "index")

    def home(self, actor: str) -> DurableObjectHome:
        home = self.homes.get(actor)
        if home is None:
            home = self.homes[actor] = DurableObjectHome(self.root / f"{actor}.sqlite")
        return home

    def host(self, config: ActorConfig, clock: Clock) -> DurableNamespaceHost:
        return DurableNamespaceHost(self, config, clock)

    async def kill(self, host: KitHost) -> None:
        assert isinstance(host, DurableNamespaceHost)
        await host.crash()

    def _read(self, actor: str) -> dict[str, list[tuple[object, ...]]] | None:
        path = self.root / f"{actor}.sqlite"
        if not path.exists():
            return None
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            tables = [
                str(r[0])
                for r in conn.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
                )
            ]
            return {t: conn.execute(f'SELECT * FROM "{t}" ORDER BY 1').fetchall() for t in tables}
        finally:
            conn.close()

    def exists(self, actor: str) -> bool:
        content = self._read(actor)
        return content is not None and bool(content.get("perdure_actor_name"))

    def digest(self, actor: str) -> str | None:
        content = self._read(actor)
        if not content or not content.get("perdure_actor_name"):
            return None
        return hashlib.sha256(repr(sorted(content.items())).encode()).hexdigest()

    def close(self) -> None:
        for home in self.homes.values():
            home.close()
        self.index.close()
