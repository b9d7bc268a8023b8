"""A durable world for recovery tests: one storage (memory or a real SQLite file) that
"processes" open, crash and reopen, a scripted model, tools with recorded effects, and
the consistency checker run against what was committed."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from core.errors import ApprovalDecided
from core.faux import (
    FAUX_MODEL,
    FauxModel,
    FauxState,
    FauxStep,
    faux_message,
    faux_tool_call,
)
from core.harness import Harness, HarnessSettings, Registry, ToolContext
from core.harness.models import ModelInfo, ModelRequest
from core.harness.schedules import SCHEDULE
from core.storage import MemoryState, MemoryStorage, Storage
from core.testing.clock import VirtualClock
from core.testing.consistency import SettlementLog, check_consistency
from core.testing.wrappers import CommitFault, FaultyStorage
from runtimes.actor.sqlite import Sqlite3Database
from runtimes.local.sqlite import open_sqlite_storage
from tests.core.harness.support import MODEL, Args, extension, tool

__all__ = ["MODEL", "World"]

Backend = Literal["memory", "sqlite"]


@dataclass
class Effects:
    """What tools did, by op (task id, call id): the ground truth for "at most once"."""

    runs: dict[tuple[str, int, str], int] = field(default_factory=dict)

    def record(self, name: str, ctx: ToolContext) -> None:
        key = (name, ctx.task_id, ctx.call_id)
        self.runs[key] = self.runs.get(key, 0) + 1

    def twice(self, name: str) -> list[tuple[str, int, str]]:
        return [k for k, n in self.runs.items() if k[0] == name and n > 1]


class World:
    """One durable actor: ``open()`` starts a process on it, ``crash()`` kills it."""

    def __init__(
        self,
        tmp: Path,
        backend: Backend = "memory",
        *,
        settings: HarnessSettings | None = None,
        window: int | None = None,
    ) -> None:
        self.backend = backend
        self.path = tmp / "actor.sqlite"
        self.state = MemoryState()
        self.clock = VirtualClock()
        self.script: deque[FauxStep] = deque()
        models = (FAUX_MODEL,)
        if window is not None:  # a small context window: compactions happen by themselves
            models = (ModelInfo(FAUX_MODEL.id, context_window=window, max_tokens=1_000),)
        self.faux = FauxModel(fallback=self._next, models=models)
        self.registry = Registry()
        self.settings = settings or HarnessSettings()
        self.effects = Effects()
        self.gate = asyncio.Event()  # released: slow tools finish
        self.log = SettlementLog()
        self.hold_summaries = False  # True: summary requests wait for the gate
        self.reports: list[BaseException] = []
        self.faulty: FaultyStorage | None = None
        self.harness: Harness | None = None
        self.install_tools("safe")

    # ------------------------------------------------------------------ the model

    def _next(self, request: ModelRequest, state: FauxState) -> FauxStep:
        if not request.tools:  # a summary request (compaction): always answer
            if self.hold_summaries:
                return self._held_summary
            return faux_message("summary of the conversation so far")
        if self.script:
            return self.script.popleft()
        return faux_message("ok")

    async def _held_summary(self, request: ModelRequest, state: FauxState) -> FauxStep:
        await self.gate.wait()
        return faux_message("summary of the conversation so far")

    async def slow_answer(self, request: ModelRequest, state: FauxState) -> FauxStep:
        """A request that hangs until the gate opens (or the call is cancelled)."""
        await self.gate.wait()
        return faux_message("a slow answer")

    def say(self, *steps: FauxStep) -> None:
        self.script.extend(steps)

    def call(self, *names: str) -> None:
        """Script one tool round calling ``names``, then an answer."""
        self.say(
            faux_message(*(faux_tool_call(n, {"text": n}, id=f"c{i}") for i, n in enumerate(names)))
        )

    # ------------------------------------------------------------------ tools

    def install_tools(self, quick_replay: str) -> None:
        """(Re)install the ``fx`` extension; ``quick``'s replay policy changes with it."""
        effects, world = self.effects, self

        async def quick(args: Args, ctx: ToolContext) -> str:
            effects.record("quick", ctx)
            return "quick done"

        async def risky(args: Args, ctx: ToolContext) -> str:
            effects.record("risky", ctx)
            return "risky done"

        async def asks(args: Args, ctx: ToolContext) -> str:
            effects.record("asks", ctx)
            return "asked and done"

        async def slow(args: Args, ctx: ToolContext) -> str:
            effects.record("slow", ctx)
            wait = asyncio.ensure_future(world.gate.wait())
            stop = asyncio.ensure_future(ctx.signal.wait())
            try:
                await asyncio.wait([wait, stop], return_when=asyncio.FIRST_COMPLETED)
            finally:
                wait.cancel()
                stop.cancel()
            return "slow done"

        self.registry.install(
            extension(
                "fx",
                tool("quick", quick, replay=quick_replay),
                tool("risky", risky),
                tool("slow", slow, replay="safe"),
                # Approvals: ``asks`` waits for a decision; ``asks_exp`` is denied
                # after a minute undecided. Both unsafe: a run is at most once.
                tool("asks", asks, approval="always"),
                tool("asks_exp", asks, approval="always", approval_expires_s=60),
            )
        )

    # ------------------------------------------------------------------ processes

    async def storage(self) -> Storage:
        if self.backend == "memory":
            return MemoryStorage(self.state)
        return await open_sqlite_storage(self.path, driver="sqlite3")

    async def open(self, faults: list[CommitFault] | None = None) -> Harness:
        return await self.open_on(await self.storage(), faults)

    async def open_on(self, storage: Storage, faults: list[CommitFault] | None = None) -> Harness:
        """Start a process on ``storage`` (this world's, opened some special way)."""
        self.faulty = FaultyStorage(storage, faults or [])
        h = await Harness.open(
            self.faulty,
            models=self.faux,
            registry=self.registry,
            clock=self.clock,
            settings=self.settings,
            report=self.reports.append,
        )
        self.log.attach(h.session)
        self.harness = h
        return h

    async def crash(self) -> None:
        """A killed process: nothing more reaches storage, then the file is released."""
        assert self.faulty is not None and self.harness is not None
        self.faulty.crash()
        with contextlib.suppress(Exception):
            await self.harness.close()
        await self.faulty.inner.close()
        self.harness = None

    async def close(self) -> None:
        if self.harness is not None:
            await self.harness.close()
            self.harness = None

    # ------------------------------------------------------------------ checks

    async def problems(self, *, settled: bool) -> list[str]:
        """Read the committed state with a fresh storage (and, for SQLite, a second
        connection for the integrity and cross-table checks)."""
        storage = await self.storage()
        db = Sqlite3Database.open(self.path) if self.backend == "sqlite" else None
        try:
            found = await check_consistency(storage, settled=settled, db=db)
        finally:
            await storage.close()
            if db is not None:
                await db.close()
        found += self.log.problems
        found += [f"unsafe tool ran twice: {k}" for k in self.effects.twice("risky")]
        found += [f"approved tool ran twice: {k}" for k in self.effects.twice("asks")]
        found += await self._unapproved_runs()
        return found

    async def _unapproved_runs(self) -> list[str]:
        """Runs of an ``asks`` call whose recorded decision is not an approval (invariant
        17): read from the task's checkpoint while live, its outcome once settled."""
        storage = await self.storage()
        found = []
        try:
            for _name, task_id, call_id in (k for k in self.effects.runs if k[0] == "asks"):
                task = await storage.task(task_id)
                value = task.checkpoint if task is not None and task.checkpoint else None
                if task is not None and value is None and task.outcome is not None:
                    value = getattr(task.outcome, "result", None)
                approval = value.get("approval") if isinstance(value, dict) else None
                if not isinstance(approval, dict) or approval.get("decision") != "approve":
                    found.append(f"tool call {call_id} of task {task_id} ran unapproved")
        finally:
            await storage.close()
        return found

    async def settle(self, timeout: float = 4.0) -> None:
        """Let everything finish: slow tools and requests released, the clock moved to
        every durable deadline, until no foreground work is left and nothing waits for a
        time but recurring schedules. ``timeout`` (real seconds) bounds it: not settling is
        a liveness failure."""
        assert self.harness is not None
        h = self.harness
        self.gate.set()
        h.resume()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while loop.time() < deadline:
            await asyncio.sleep(0)
            for pending in h.approvals():  # a person answers what is still asked
                with contextlib.suppress(ApprovalDecided):
                    await h.decide_approval(pending["id"], "approve")
            wake = h.next_wake()
            if wake is None and h.engine.scheduler.idle():
                return
            # A recurring schedule always has a next occurrence: settled is when nothing
            # else is live and none of its occurrences is due.
            recurring = all(t.kind == SCHEDULE for t in h.session.tasks.values())
            due = wake is not None and wake <= self.clock.now()
            if recurring and not due and h.engine.scheduler.idle():
                return
            if wake is not None and wake > self.clock.now():
                self.clock.set(wake)
        live = [t for t in h.session.tasks.values()]
        raise AssertionError(f"never settled: next wake {h.next_wake()}, live tasks {live}")
