"""Guard tests for the invariants (docs/design.md) the agent harness owns: 4, 7, 8 and 9.

(Invariant 7 is also exercised through a real sandbox in tests/recovery/test_recoverable.py
and through a real SIGKILL in tests/recovery/test_seed_crash.py.)
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import pytest

from core.errors import RequestIdConflict
from core.faux import FauxModel, FauxState, faux_error, faux_message, faux_tool_call
from core.harness import AssistantMessage, Harness, ModelRequest, Registry, ToolContext
from core.jsonvalue import JsonObject
from core.session import CommitEvent
from core.storage.sqlite import SqliteStorage
from core.testing import VirtualClock
from runtimes.actor.sqlite import Sqlite3Database
from tests.core.harness.support import MODEL, Args, Rig, durable_intent, extension, tool
from tests.core.support import until


async def test_invariant_04_the_intent_is_committed_before_the_tool_runs(tmp_path: Path) -> None:
    seen: list[Any] = []

    async def look(args: Args, ctx: ToolContext) -> str:
        # What a fresh process would find if this one died right now:
        seen.append(await durable_intent(ctx))
        return "looked"

    rig = Rig(
        tmp_path,
        "sqlite",
        steps=[
            faux_message(faux_tool_call("look", {"text": "final"}, id="c1")),
            faux_message("ok"),
        ],
    )
    rig.registry.install(extension("look", tool("look", look, replay="safe")))
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    await (await root.submit("go")).wait()
    assert seen == [
        {"phase": "execute", "arguments": {"text": "final"}, "replay": "safe", "attempt": 1}
    ]
    await h.close()


class _DeferringGate:
    """A commit gate that keeps commits pending until flushed, as the AWS host's does
    under the Lambda handler (here in memory: ``durable`` is what a crash would keep)."""

    def __init__(self) -> None:
        self.waiting: list[int] = []
        self.durable: list[int] = []

    @property
    def pending(self) -> int:
        return len(self.waiting)

    async def make_durable(self, seq: int, write_set: JsonObject) -> None:
        self.waiting.append(seq)

    async def flush(self) -> None:
        self.durable += self.waiting
        self.waiting = []


async def test_invariant_04_a_deferring_storage_is_flushed_before_a_tool_that_is_not_safe(
    tmp_path: Path,
) -> None:
    gate = _DeferringGate()
    pending_at_start: dict[str, list[int]] = {}

    async def effect(args: Args, ctx: ToolContext) -> str:
        pending_at_start[args.text] = list(gate.waiting)
        return "done"

    storage = await SqliteStorage.open(Sqlite3Database.open(tmp_path / "a.sqlite"), gate=gate)
    steps = [
        faux_message(faux_tool_call("safe", {"text": "safe"}, id="a")),
        faux_message("ok"),
        faux_message(faux_tool_call("unsafe", {"text": "unsafe"}, id="b")),
        faux_message("ok"),
        faux_message(faux_tool_call("recoverable", {"text": "recoverable"}, id="c")),
        faux_message("ok"),
    ]
    registry = Registry()
    registry.install(
        extension(
            "fx",
            tool("safe", effect, replay="safe"),
            tool("unsafe", effect),
            tool("recoverable", effect, replay="recoverable"),
        )
    )
    clock = VirtualClock()
    h = await Harness.open(storage, models=FauxModel(steps), registry=registry, clock=clock)
    root = await h.root(agent={"model": MODEL})
    for text in ("safe", "unsafe", "recoverable"):
        await (await root.submit(text)).wait()
    # A safe call may run on commits a crash would lose: it runs again (invariant 7).
    assert pending_at_start["safe"], pending_at_start
    # The others start only once everything committed, their intent too, is durable.
    assert pending_at_start["unsafe"] == pending_at_start["recoverable"] == []
    assert gate.durable and gate.durable == sorted(gate.durable)
    await h.close()


async def test_invariant_07_interrupted_calls_rerun_only_if_safe_twice(tmp_path: Path) -> None:
    """The policy matrix against a crash after the intent (see test_tools for all four)."""
    runs: list[str] = []
    started = asyncio.Event()

    async def effect(args: Args, ctx: ToolContext) -> str:
        runs.append(args.text)
        if len(runs) <= 2:
            started.set()
            await asyncio.Event().wait()
        return "done"

    rig = Rig(
        tmp_path,
        "sqlite",
        steps=[
            faux_message(
                faux_tool_call("safe", {"text": "s"}, id="a"),
                faux_tool_call("unsafe", {"text": "u"}, id="b"),
            ),
            faux_message("ok"),
        ],
    )
    rig.registry.install(
        extension("fx", tool("safe", effect, replay="safe"), tool("unsafe", effect))
    )
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    sub = await root.submit("go")
    await until(lambda: len(runs) == 2)
    await rig.crash(h)
    h = await rig.open()
    record = await (await h.submission(sub.id)).wait()  # type: ignore[union-attr]
    assert record.status == "done"
    assert sorted(runs) == ["s", "s", "u"]  # the safe call ran again, the unsafe one did not
    request = rig.faux.state.requests[-1].messages
    results = {m.tool_call_id: m for m in request if m.role == "tool_result"}  # type: ignore[union-attr]
    assert results["a"].content == "done" and not results["a"].is_error  # type: ignore[union-attr]
    assert "interrupted and may have partially run" in results["b"].content  # type: ignore[union-attr]
    await h.close()


async def test_invariant_08_a_request_id_dedupes_before_any_write_across_restarts(
    tmp_path: Path,
) -> None:
    rig = Rig(tmp_path, "sqlite", steps=[faux_message("once")])
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    first = await root.submit("hello", request_id="r-1")
    await first.wait()
    await h.close()
    h = await rig.open()
    root = await h.conversation(1)
    commits = rig.commits
    again = await root.submit("hello", request_id="r-1")
    assert again.id == first.id and rig.commits == commits
    with pytest.raises(RequestIdConflict):  # other content under the same id: refused
        await root.submit("hello again", request_id="r-1")
    assert rig.commits == commits
    assert rig.faux.state.call_count == 1
    await h.close()


async def test_invariant_09_every_accepted_input_settles_exactly_once(tmp_path: Path) -> None:
    """A random mix of inputs, modes, failures, tool rounds and aborts: each input
    settles once, done (with an answer) or unanswered (with a reason)."""
    rng = random.Random(7)

    async def respond(request: ModelRequest, state: FauxState) -> AssistantMessage:
        await asyncio.sleep(0)
        roll = rng.random()
        if roll < 0.15:
            raise faux_error("flaky provider")
        if roll < 0.45 and request.messages[-1].role == "user":
            return faux_message(faux_tool_call("echo", {"text": "x"}, id=f"c{state.call_count}"))
        return faux_message(f"answer {state.call_count}")

    async def echo(args: Args, ctx: ToolContext) -> str:
        await asyncio.sleep(0)
        return "echoed"

    rig = Rig(tmp_path, steps=[respond] * 500)
    rig.registry.install(extension("echo", tool("echo", echo)))
    h = await rig.open()
    settled: dict[int, list[str]] = {}

    def watch(event: CommitEvent) -> None:
        for sub in event.submissions:
            if sub.status in ("done", "unanswered"):
                settled.setdefault(sub.id, []).append(sub.status)
                assert (sub.status == "done") == (sub.answer is not None)
                assert (sub.status == "unanswered") == (sub.reason is not None)

    h.session.subscribe(watch)
    conversations = [await h.root(agent={"model": MODEL})] + [
        await h.create_conversation(agent={"model": MODEL}) for _ in range(2)
    ]
    accepted = []
    for i in range(40):
        conv = rng.choice(conversations)
        mode = rng.choice(["follow_up", "steer", "follow_up"])
        accepted.append(await conv.submit(f"input {i}", when_busy=mode))  # type: ignore[arg-type]
        if rng.random() < 0.1:
            await accepted[rng.randrange(len(accepted))].abort()
        for _ in range(rng.randrange(3)):
            await asyncio.sleep(0)
    records = [await s.wait(timeout=30) for s in accepted]
    await h.wait_for_idle()
    assert {r.status for r in records} <= {"done", "unanswered"}
    assert all(settled.get(s.id) in (["done"], ["unanswered"]) for s in accepted), settled
    await h.close()
