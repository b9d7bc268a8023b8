"""Shared helpers for kernel tests: engines over reopenable storage, a virtual clock."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Literal

from core.engine import Engine
from core.storage import MemoryState, MemoryStorage, Storage
from core.tasks import TaskDefinition, TaskRegistry
from core.testing.clock import VirtualClock
from core.testing.wrappers import CommitFault, FaultyStorage
from runtimes.local.sqlite import open_sqlite_storage

Backend = Literal["memory", "sqlite"]


class World:
    """One durable world (a storage that survives 'processes') plus a virtual clock.

    ``await world.open(...)`` starts a new 'process' on the same storage; the previous
    engine must be closed (or crashed) first, as a host guarantees.
    """

    def __init__(self, tmp_path: Path, backend: Backend = "memory") -> None:
        self.backend = backend
        self.path = tmp_path / "world.sqlite"
        self.state = MemoryState()
        self.clock = VirtualClock()
        self.registry = TaskRegistry()
        self.reports: list[BaseException] = []
        self.faulty: FaultyStorage | None = None

    async def storage(self) -> Storage:
        if self.backend == "memory":
            return MemoryStorage(self.state)
        return await open_sqlite_storage(self.path, driver="sqlite3")

    async def open(
        self,
        *definitions: TaskDefinition,
        faults: list[CommitFault] | None = None,
        resume: bool = True,
    ) -> Engine:
        for d in definitions:
            self.registry.install(d)
        storage = await self.storage()
        self.faulty = FaultyStorage(storage, faults or [])
        engine = await Engine.open(
            self.faulty, tasks=self.registry, clock=self.clock, report=self.reports.append
        )
        if resume:
            engine.resume()
        return engine

    async def crash(self, engine: Engine) -> None:
        """Stand in for a killed process: storage fails every call, then the engine is
        torn down (its close can write nothing) and the file handle released."""
        assert self.faulty is not None
        self.faulty.crash()
        with contextlib.suppress(Exception):
            await engine.close()
        await self.faulty.inner.close()


async def until(predicate: Callable[[], bool], *, timeout: float = 5.0) -> None:
    """Yield to the loop until ``predicate()`` holds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.001)


async def settle() -> None:
    """Let every ready callback and task run a few rounds."""
    for _ in range(20):
        await asyncio.sleep(0)


def gate() -> tuple[asyncio.Event, Callable[[], Awaitable[Any]]]:
    event = asyncio.Event()
    return event, event.wait
