"""Harness events: recovery after a crash, retries, compactions and aborts are recorded
in the conversation's ``events`` document (part of the committed view, so a client that
attaches after the restart sees them) and reported to the telemetry port after commit."""

from __future__ import annotations

import asyncio
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

from core.faux import faux_error, faux_message, faux_tool_call
from core.harness import CompactionSettings, HarnessSettings, ToolContext
from core.harness.events import summarize_recovery
from core.jsonvalue import JsonObject
from core.telemetry import SpanAttributes
from core.times import iso_time
from core.tools import coding_tools
from tests.core.harness.support import MODEL, Args, Rig, extension, tool
from tests.core.support import until
from tests.remote_env.support import asgi_env, running_app, settings


class Recorder:
    """A Telemetry port that keeps what it is told, and when (committed or not)."""

    def __init__(self, rig: Rig) -> None:
        self.rig = rig
        self.events: list[tuple[int, JsonObject]] = []
        self.spans: list[str] = []

    def span(
        self, name: str, attributes: SpanAttributes, parent: str | None = None
    ) -> AbstractContextManager[object]:
        self.spans.append(name)
        return nullcontext()

    def trace_for(self, name: str, attributes: SpanAttributes, within: str | None) -> str | None:
        return None

    def event(self, conversation_id: int, event: JsonObject) -> None:
        self.events.append((conversation_id, event))


def events_of(view: JsonObject) -> list[JsonObject]:
    docs = view["docs"]
    assert isinstance(docs, dict)
    doc = docs.get("events") or {}
    assert isinstance(doc, dict)
    return [e for e in doc.get("items", []) if isinstance(e, dict)]  # type: ignore[union-attr]


async def test_a_crash_mid_tools_is_recorded_as_what_was_recovered_and_how(
    tmp_path: Path,
) -> None:
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    gate = asyncio.Event()
    searches: list[str] = []

    async def search(args: Args, ctx: ToolContext) -> str:
        searches.append(args.text)
        await gate.wait()
        return f"found {args.text}"

    async def pay(args: Args, ctx: ToolContext) -> str:
        await gate.wait()
        return "paid"

    async with running_app(settings(sandbox)) as app, asgi_env(app, "actor-ev") as env:
        rig = Rig(
            tmp_path,
            "sqlite",
            env=lambda conversation_id, cwd: env,
            steps=[
                faux_message(
                    faux_tool_call("search", {"text": "trains"}, id="c1"),
                    faux_tool_call("bash", {"command": "sleep 1; echo booked"}, id="c2"),
                    faux_tool_call("pay", {"text": "42"}, id="c3"),
                ),
                faux_message("all done"),
            ],
        )
        rig.registry.install(coding_tools())
        rig.registry.install(
            extension("travel", tool("search", search, replay="safe"), tool("pay", pay))
        )
        h = await rig.open()
        sub = await (await h.root(agent={"model": MODEL})).submit("book it")
        await until(lambda: bool(searches))
        await until(lambda: (sandbox / "actor-ev").exists())
        await asyncio.sleep(0.2)  # the bash op is in the sandbox's op log
        assert events_of(await h.view(1)) == []  # nothing happened worth telling yet
        await rig.crash(h)

        gate.set()
        rig.clock.advance(5)
        recorder = Recorder(rig)
        rig.telemetry = recorder
        h = await rig.open()
        # A client attaching right after the restart, before anything ran, sees the restart.
        (restart,) = events_of(await h.view(1))
        assert restart["kind"] == "restart"
        assert restart["at_iso"] == iso_time(rig.clock.now())
        tasks = restart["tasks"]
        assert isinstance(tasks, list)
        # The generation waits for its tools (not running): only the tools were cut short.
        assert sorted(str(t["tool"]) for t in tasks if isinstance(t, dict)) == [
            "bash",
            "pay",
            "search",
        ]
        record = await (await h.submission(sub.id)).wait()  # type: ignore[union-attr]
        assert record.status == "done"
        events = events_of(await h.view(1))
        recovered = {e["tool"]: e for e in events if e["kind"] == "tool_recovery"}
        assert recovered["search"]["how"] == "rerun"
        assert recovered["bash"]["how"] == "recovered"
        assert str(recovered["bash"]["op"]).endswith(":c2")
        assert recovered["pay"]["how"] == "interrupted"
        assert "replay policy unsafe" in str(recovered["pay"]["reason"])
        ordered = [e for e in events if e["kind"] == "tool_recovery"]
        line = summarize_recovery(sorted(ordered, key=lambda e: str(e["call_id"])))
        assert line == "search reran, bash recovered from the sandbox, pay interrupted"
        # The telemetry heard each of them, once, after its commit (n strictly increases).
        told = [e for _, e in recorder.events]
        assert [e["n"] for e in told] == [e["n"] for e in events]
        assert any(name.endswith("tool execute") for name in recorder.spans)
        await h.close()


async def test_retries_compactions_and_aborts_are_events(tmp_path: Path) -> None:
    settings_ = HarnessSettings(compaction=CompactionSettings(keep_recent_tokens=1))
    rig = Rig(
        tmp_path,
        steps=[
            faux_error("overloaded", retryable=True),
            faux_message("first answer"),
            faux_message("second answer"),
            faux_message("the summary"),
        ],
        settings=settings_,
    )
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    sub = await root.submit("hello")
    await until(lambda: h.next_wake() not in (None, rig.clock.now()))
    (retry,) = events_of(await h.view(1))
    assert retry["kind"] == "retry" and retry["attempt"] == 2 and retry["error"] == "overloaded"
    assert retry["delay_ms"] == settings_.retry.base_delay_ms
    assert retry["until_iso"] == iso_time(int(retry["until"]))  # type: ignore[arg-type]
    rig.clock.advance(settings_.retry.base_delay_ms)
    await sub.wait()
    await (await root.submit("again")).wait()
    task = await root.compact()
    await root.wait_for_idle()
    states = [e["state"] for e in events_of(await h.view(1)) if e["kind"] == "compaction"]
    assert states == ["started", "landed"]
    assert all(e["task"] == task for e in events_of(await h.view(1)) if e["kind"] == "compaction")

    rig.faux.respond(faux_message(faux_tool_call("wait", {}, id="w1")))
    blocked = asyncio.Event()

    async def wait(args: Args, ctx: ToolContext) -> str:
        blocked.set()
        await asyncio.Event().wait()
        return "never"

    h.registry.install(extension("waiting", tool("wait", wait)))
    await root.configure(tools=["wait"])
    await root.submit("wait forever")
    await blocked.wait()
    marked = await root.abort()
    last = events_of(await h.view(1))[-1]
    assert last["kind"] == "abort" and last["tasks"] == marked > 0
    assert last["scope"] == "conversation" and last["background"] is False
    await h.close()


def aborts(view: JsonObject) -> list[JsonObject]:
    return [e for e in events_of(view) if e["kind"] == "abort"]


async def test_every_abort_path_is_an_event_in_the_commit_that_marks(tmp_path: Path) -> None:
    """A submission's abort (placed: its run; queued: withdrawn), a task aborted by id and
    a reminder cancelled are told like a conversation's abort: an ``abort`` event with the
    path (``scope``) in the view, and to the telemetry port once committed. Marking what is
    already marked or ended tells nothing more."""
    rig = Rig(tmp_path, "sqlite")
    recorder = Recorder(rig)
    rig.telemetry = recorder
    blocked = asyncio.Event()

    async def wait(args: Args, ctx: ToolContext) -> str:
        blocked.set()
        await asyncio.Event().wait()
        return "never"

    rig.registry.install(extension("waiting", tool("wait", wait)))
    h = await rig.open()
    root = await h.root(agent={"model": MODEL, "tools": ["wait"]})

    # A placed submission: its abort marks the run's generation.
    rig.faux.respond(faux_message(faux_tool_call("wait", {}, id="w1")))
    placed = await root.submit("wait forever")
    await blocked.wait()
    queued = await root.submit("after that")  # follow_up: queued behind the run
    assert (await queued.status()).status == "queued"
    assert await queued.abort() == "aborted"
    (withdrawn,) = aborts(await h.view(1))
    assert withdrawn["scope"] == "submission" and withdrawn["withdrawn"] is True
    assert withdrawn["submission"] == queued.id and withdrawn["tasks"] == 0
    live = (await h.view(1))["docs"]["live"]  # type: ignore[index]
    generation = live["run"]["generation"]  # type: ignore[index,call-overload]
    assert await placed.abort() == "aborted"
    assert (await placed.wait()).reason == "aborted"
    run = aborts(await h.view(1))[-1]
    assert run["scope"] == "submission" and run["submission"] == placed.id
    assert run["task"] == generation and run["task_kind"] == "generation"

    # One task by id: a tool call, named by its tool.
    blocked.clear()
    rig.faux.respond(faux_message(faux_tool_call("wait", {}, id="w2")), faux_message("ok"))
    await root.submit("wait again")
    await blocked.wait()
    (tool_task,) = [t for t in h.session.tasks.values() if t.kind == "perdure.tool"]
    assert await h.abort_task(tool_task.id) == "marked"
    by_id = aborts(await h.view(1))[-1]
    assert (by_id["scope"], by_id["task"], by_id["tool"]) == ("task", tool_task.id, "wait")
    assert by_id["task_kind"] == "tool"
    await root.wait_for_idle()
    count = len(aborts(await h.view(1)))
    assert await h.abort_task(tool_task.id) == "terminal"  # ended: nothing more to tell
    assert len(aborts(await h.view(1))) == count

    # A reminder cancelled.
    reminder = (await root.remind("never", after=60)).task
    await h.cancel_reminder(reminder)
    timer = aborts(await h.view(1))[-1]
    assert (timer["scope"], timer["task"], timer["task_kind"]) == ("timer", reminder, "reminder")
    await h.close()

    # Durable: a reopened harness (a client attaching after a restart) sees them all, and
    # the telemetry heard each once, after its commit.
    h = await rig.open()
    stored = aborts(await h.view(1))
    assert [e["scope"] for e in stored] == ["submission", "submission", "task", "timer"]
    told = [e for _, e in recorder.events if e["kind"] == "abort"]
    assert [e["n"] for e in told] == [e["n"] for e in stored]
    await h.close()
