"""A rig for harness tests: reopenable storage, a scripted model, a virtual clock."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from core.faux import FAUX_MODEL, FauxModel, FauxState, FauxStep
from core.harness import (
    AssistantMessage,
    Harness,
    HarnessSettings,
    ModelRequest,
    Registry,
    ToolContext,
    define_extension,
    define_tool,
)
from core.harness.harness import EnvFactory
from core.harness.models import ModelInfo
from core.records import Entry, Terminal
from core.storage import EntryQuery, MemoryState, MemoryStorage, Storage
from core.telemetry import NO_TELEMETRY, Telemetry
from core.testing.clock import VirtualClock
from core.testing.wrappers import CommitFault, FaultyStorage
from runtimes.local.sqlite import open_sqlite_storage
from tests.core.support import until

MODEL = "faux/faux-1"


class Rig:
    """One durable world for a harness; ``open()`` starts a 'process' on it."""

    def __init__(
        self,
        tmp_path: Path,
        backend: Literal["memory", "sqlite"] = "memory",
        *,
        steps: Iterable[FauxStep] = (),
        settings: HarnessSettings | None = None,
        env: EnvFactory | None = None,
        models: Iterable[ModelInfo] = (FAUX_MODEL,),
    ) -> None:
        self.backend = backend
        self.path = tmp_path / "actor.sqlite"
        self.state = MemoryState()
        self.clock = VirtualClock()
        self.faux = FauxModel(steps, models=models)
        self.registry = Registry()
        self.settings = settings or HarnessSettings()
        self.env = env
        self.reports: list[BaseException] = []
        self.faulty: FaultyStorage | None = None
        self.telemetry: Telemetry = NO_TELEMETRY

    async def storage(self) -> Storage:
        if self.backend == "memory":
            return MemoryStorage(self.state)
        return await open_sqlite_storage(self.path)

    async def open(self, *, faults: list[CommitFault] | None = None) -> Harness:
        self.faulty = FaultyStorage(await self.storage(), faults or [])
        return await Harness.open(
            self.faulty,
            models=self.faux,
            registry=self.registry,
            env=self.env,
            clock=self.clock,
            settings=self.settings,
            report=self.reports.append,
            telemetry=self.telemetry,
        )

    async def crash(self, harness: Harness) -> None:
        """Stand in for a killed process: nothing more reaches storage."""
        assert self.faulty is not None
        self.faulty.crash()
        with contextlib.suppress(Exception):
            await harness.close()
        await self.faulty.inner.close()

    @property
    def commits(self) -> int:
        assert self.faulty is not None
        return self.faulty.commits


async def entries(harness: Harness, conversation_id: int = 1) -> list[Entry]:
    page = await harness.session.storage.scan_entries(
        EntryQuery(conversation_id, order="asc", limit=1000)
    )
    return page.items


def kinds(items: list[Entry]) -> list[str]:
    return [e.kind for e in items]


class Args(BaseModel):
    text: str = ""


def tool(name: str, execute: Any, *, replay: Any = "unsafe", **kw: Any) -> Any:
    return define_tool(
        name,
        description=f"the {name} tool",
        parameters=kw.pop("parameters", Args),
        execute=execute,
        replay=replay,
        **kw,
    )


def extension(name: str, *tools: Any, **kw: Any) -> Any:
    return define_extension(name, tools=list(tools), **kw)


async def never_answers(request: ModelRequest, state: FauxState) -> AssistantMessage:
    """A model step that never answers: the process dies (or closes) in its request."""
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


async def hung_in_first_request(tmp_path: Path) -> tuple[Rig, Harness, int]:
    """A SQLite rig whose root conversation got one input and whose model request for it
    never answers, once that request is sent: the rig, its harness, the submission's id."""
    rig = Rig(tmp_path, "sqlite", steps=[never_answers])
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    sub = await root.submit("hi")
    await until(lambda: rig.faux.state.call_count == 1)
    return rig, h, sub.id


async def echo(args: Args, ctx: ToolContext) -> str:
    return f"echo: {args.text}"


async def durable_intent(ctx: ToolContext) -> Any:
    """What a fresh process would find of the running call ``ctx``'s intent if this one
    died now: its task's stored checkpoint, or, for a task kept in memory, the intent its
    round's stored checkpoint notes (the policy) with the stored assistant entry's
    arguments, in the same shape; ``None`` if neither is stored."""
    storage = ctx.harness.session.storage
    stored = await storage.task(ctx.task_id)
    if stored is not None:
        return stored.checkpoint
    owner = ctx.harness.session.tasks[ctx.task_id].owner
    round_ = await storage.task(owner) if owner is not None else None
    cp = round_.checkpoint if round_ is not None else None
    policy = (cp or {}).get("unstored", {}).get(str(ctx.task_id))
    entry = await storage.entry(cp["assistant"]) if policy is not None and cp else None
    if entry is None or not isinstance(entry.message, dict):
        return None
    [call] = [c for c in entry.message["content"] if c.get("id") == ctx.call_id]
    return {"phase": "execute", "arguments": call["arguments"], "replay": policy, "attempt": 1}


def ended_tools(h: Harness) -> list[Any]:
    """The tool task records that end in ``h``'s commits from now on, in order, whether
    the commit wrote them or kept them in memory (``Tx.leave_unstored``)."""
    ended: list[Any] = []
    h.session.subscribe(
        lambda e: ended.extend(
            t for t in e.tasks if t.kind == "perdure.tool" and isinstance(t.state, Terminal)
        )
    )
    return ended
