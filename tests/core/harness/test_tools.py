"""Tool tasks: validation, hooks, results, limits, execution modes, replay and recovery."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from core.env import EnvUnavailable
from core.faux import faux_message, faux_tool_call
from core.harness import Block, HarnessSettings, Hooks, ToolCall, ToolContext, ToolResult
from core.records import Aborted, Completed, Failed, Terminal
from core.storage import TaskQuery
from tests.core.harness.support import MODEL, Args, Rig, echo, ended_tools, entries, extension, tool
from tests.core.support import until


def _by_call(items: list[Any]) -> list[Any]:
    """Tool results in call-id order (parallel calls finish in any order)."""
    found = [e for e in items if e.kind == "tool_result"]
    return sorted(found, key=lambda e: e.data["call_id"])


def results(items: list[Any]) -> list[dict[str, Any]]:
    return [e.message for e in _by_call(items)]


def diagnostics(items: list[Any]) -> list[list[str]]:
    return [[d["code"] for d in e.data["diagnostics"]] for e in _by_call(items)]


def calling(*calls: ToolCall, then: str = "done") -> list[Any]:
    return [faux_message(*calls), faux_message(then)]


async def run_once(rig: Rig, text: str = "go") -> Any:
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    record = await (await root.submit(text)).wait()
    return h, record


async def test_a_tool_round_records_intent_result_and_answer(tmp_path: Path) -> None:
    rig = Rig(tmp_path, steps=calling(faux_tool_call("echo", {"text": "hi"}, id="c1")))
    rig.registry.install(extension("basics", tool("echo", echo)))
    h = await rig.open()
    ended = ended_tools(h)
    root = await h.root(agent={"model": MODEL})
    record = await (await root.submit("go")).wait()
    assert record.status == "done"
    items = await entries(h)
    (result,) = [e for e in items if e.kind == "tool_result"]
    assert result.message["content"] == "echo: hi" and not result.message["is_error"]  # type: ignore[index,call-overload]
    assert result.data == {"call_id": "c1", "diagnostics": []}
    (task,) = ended
    assert task.id == result.by_task_id and task.kind == "perdure.tool"
    assert task.state == Terminal(Completed({"entry": result.id}))
    # Started at its intent by the round commit: kept in memory, its result entry is its end.
    assert await h.session.storage.task(task.id) is None
    assert rig.faux.state.requests[1].messages[-1].content == "echo: hi"  # type: ignore[union-attr]
    assert [t.name for t in rig.faux.state.requests[0].tools] == ["echo"]
    await h.close()


async def test_calls_to_tools_not_offered_are_answered_without_a_task(tmp_path: Path) -> None:
    rig = Rig(tmp_path, steps=calling(faux_tool_call("ghost", {}, id="c1")))
    h, record = await run_once(rig)
    assert record.status == "done"
    items = await entries(h)
    assert diagnostics(items) == [["tool_unavailable"]]
    assert (await h.session.storage.scan_tasks(TaskQuery(kind="perdure.tool"))).items == []
    await h.close()


class Strict(BaseModel):
    n: int


async def test_invalid_arguments_become_a_result_not_a_crash(tmp_path: Path) -> None:
    ran: list[int] = []

    async def count(args: Strict, ctx: ToolContext) -> str:
        ran.append(args.n)
        return str(args.n)

    rig = Rig(tmp_path, steps=calling(faux_tool_call("count", {"n": "many"}, id="c1")))
    rig.registry.install(extension("strict", tool("count", count, parameters=Strict)))
    h, record = await run_once(rig)
    assert record.status == "done" and ran == []
    items = await entries(h)
    assert diagnostics(items) == [["invalid_arguments"]]
    assert "Invalid arguments for tool count: n:" in results(items)[0]["content"]
    await h.close()


async def test_before_tool_hooks_block_replace_and_fail_closed(tmp_path: Path) -> None:
    asked: list[str] = []

    async def gate(call: ToolCall, ctx: ToolContext) -> Any:
        asked.append(call.arguments["text"])
        if call.arguments["text"] == "forbidden":
            return Block("Nobody approved this.")
        if call.arguments["text"] == "boom":
            raise RuntimeError("hook crashed")
        if call.arguments["text"] == "rewrite":
            return {"text": "rewritten"}
        if call.arguments["text"] == "invalid":
            return {"text": 42}
        return None

    async def never(call: ToolCall, ctx: ToolContext) -> Any:
        asked.append("second hook")
        return None

    rig = Rig(
        tmp_path,
        steps=calling(
            faux_tool_call("echo", {"text": "forbidden"}, id="a"),
            faux_tool_call("echo", {"text": "boom"}, id="b"),
            faux_tool_call("echo", {"text": "rewrite"}, id="c"),
            faux_tool_call("echo", {"text": "invalid"}, id="d"),
        ),
    )
    rig.registry.install(extension("guard", tool("echo", echo), hooks=Hooks(before_tool=gate)))
    rig.registry.install(extension("late", hooks=Hooks(before_tool=never)))
    h, record = await run_once(rig)
    assert record.status == "done"
    items = await entries(h)
    contents = [r["content"] for r in results(items)]
    assert contents[0] == "[error] Nobody approved this."
    assert "A before_tool hook failed: RuntimeError: hook crashed" in contents[1]
    assert contents[2] == "echo: rewritten"
    assert "Invalid arguments" in contents[3]
    assert diagnostics(items) == [["blocked"], ["blocked"], [], ["invalid_arguments"]]
    assert asked.count("second hook") == 2  # only the calls the first hook let through
    assert any("hook crashed" in str(e) for e in rig.reports)
    await h.close()


async def test_after_tool_hooks_replace_results(tmp_path: Path) -> None:
    async def redact(call: ToolCall, result: ToolResult, ctx: ToolContext) -> ToolResult:
        return ToolResult(result.content.replace("secret", "[redacted]"))

    rig = Rig(tmp_path, steps=calling(faux_tool_call("echo", {"text": "secret"}, id="c1")))
    rig.registry.install(extension("redact", tool("echo", echo), hooks=Hooks(after_tool=redact)))
    h, _ = await run_once(rig)
    assert results(await entries(h))[0]["content"] == "echo: [redacted]"
    await h.close()


async def test_output_is_bounded_keeping_the_head(tmp_path: Path) -> None:
    async def flood(args: Args, ctx: ToolContext) -> str:
        return "\n".join(f"line {i}" for i in range(3000))

    rig = Rig(tmp_path, steps=calling(faux_tool_call("flood", {}, id="c1")))
    rig.registry.install(extension("flood", tool("flood", flood)))
    h, _ = await run_once(rig)
    items = await entries(h)
    content = results(items)[0]["content"]
    assert content.startswith("line 0\nline 1\n") and "line 1999\n" in content
    assert "line 2000" not in content
    assert "[Output truncated to its beginning: 1000 lines" in content
    assert diagnostics(items) == [["truncated"]]
    await h.close()


async def test_a_failing_tool_or_non_json_details_become_error_results_and_the_run_goes_on(
    tmp_path: Path,
) -> None:
    async def crash(args: Args, ctx: ToolContext) -> str:
        ctx.output("partial progress")
        raise OSError("disk full")

    async def weird(args: Args, ctx: ToolContext) -> ToolResult:
        return ToolResult("ok", details={"value": float("nan")})

    rig = Rig(
        tmp_path,
        steps=calling(faux_tool_call("crash", {}, id="a"), faux_tool_call("weird", {}, id="b")),
    )
    rig.registry.install(extension("bad", tool("crash", crash), tool("weird", weird)))
    h = await rig.open()
    tools = ended_tools(h)
    root = await h.root(agent={"model": MODEL})
    record = await (await root.submit("go")).wait()
    assert record.status == "done"
    items = await entries(h)
    contents = [r["content"] for r in results(items)]
    assert contents[0] == "partial progress\n[error] OSError: disk full"
    assert "returned details that are not JSON" in contents[1]
    assert diagnostics(items) == [["tool_error"], ["tool_error"]]
    assert [type(t.outcome).__name__ for t in tools] == ["Failed", "Failed"]
    assert isinstance(tools[0].outcome, Failed)
    await h.close()


async def test_an_unreachable_environment_is_interrupted_for_effects_an_error_for_reads(
    tmp_path: Path,
) -> None:
    # The request may have reached the sandbox before the link failed: for a tool with an
    # effect the outcome is unknown (interrupted), for a safe one nothing happened.
    async def unreachable(args: Args, ctx: ToolContext) -> str:
        raise EnvUnavailable("cannot reach the sandbox: ConnectError()")

    rig = Rig(
        tmp_path,
        steps=calling(
            faux_tool_call("mutate", {}, id="a"),
            faux_tool_call("recover", {}, id="b"),
            faux_tool_call("look", {}, id="c"),
        ),
    )
    rig.registry.install(
        extension(
            "net",
            tool("mutate", unreachable),
            tool("recover", unreachable, replay="recoverable"),
            tool("look", unreachable, replay="safe"),
        )
    )
    h, record = await run_once(rig)
    assert record.status == "done"
    items = await entries(h)
    contents = [r["content"] for r in results(items)]
    assert diagnostics(items) == [["interrupted"], ["interrupted"], ["tool_error"]]
    for name, content in zip(("mutate", "recover"), contents[:2], strict=True):
        assert content.startswith(f"[error] Tool {name} was interrupted and may have partially")
        assert "could not be reached: cannot reach the sandbox" in content
    assert contents[2] == "[error] EnvUnavailable: cannot reach the sandbox: ConnectError()"
    await h.close()


@pytest.mark.parametrize("mode", ["parallel", "sequential", "tool-declared"])
async def test_parallel_and_sequential_execution(tmp_path: Path, mode: str) -> None:
    log: list[str] = []
    gate = asyncio.Event()

    async def step(args: Args, ctx: ToolContext) -> str:
        log.append(f"start {args.text}")
        if args.text == "a" and mode == "parallel":
            await gate.wait()
        log.append(f"end {args.text}")
        if args.text == "b":
            gate.set()
        return args.text

    settings = HarnessSettings(tool_execution="sequential" if mode == "sequential" else "parallel")
    rig = Rig(
        tmp_path,
        settings=settings,
        steps=calling(
            faux_tool_call("step", {"text": "a"}, id="a"),
            faux_tool_call("step", {"text": "b"}, id="b"),
        ),
    )
    execution = "sequential" if mode == "tool-declared" else "parallel"
    rig.registry.install(extension("steps", tool("step", step, execution_mode=execution)))
    h, record = await run_once(rig)
    assert record.status == "done"
    if mode == "parallel":
        assert log == ["start a", "start b", "end b", "end a"]
    else:
        assert log == ["start a", "end a", "start b", "end b"]
    assert [r["tool_call_id"] for r in results(await entries(h))] == ["a", "b"]
    await h.close()


async def test_a_tool_replaced_while_it_runs_finishes_on_the_old_code(tmp_path: Path) -> None:
    started = asyncio.Event()
    release = asyncio.Event()

    async def old(args: Args, ctx: ToolContext) -> str:
        started.set()
        await release.wait()
        return "old code"

    async def new(args: Args, ctx: ToolContext) -> str:
        return "new code"

    rig = Rig(
        tmp_path,
        steps=[
            faux_message(faux_tool_call("work", {}, id="a")),
            faux_message(faux_tool_call("work", {}, id="b")),
            faux_message("done"),
        ],
    )
    rig.registry.install(extension("work", tool("work", old)))
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    sub = await root.submit("go")
    await started.wait()
    rig.registry.install(extension("work", tool("work", new)))
    release.set()
    await sub.wait()
    assert [r["content"] for r in results(await entries(h))] == ["old code", "new code"]
    await h.close()


async def test_a_hook_decision_kept_in_a_memo_survives_a_restart(tmp_path: Path) -> None:
    asked: list[str] = []
    stored = asyncio.Event()
    block_after_asking = asyncio.Event()

    async def approve(call: ToolCall, ctx: ToolContext) -> Any:
        decision = await ctx.memo("approval:deploy")
        if decision is None:
            asked.append(call.id)
            decision = await ctx.memo("approval:deploy", "yes")
            stored.set()
            await block_after_asking.wait()  # the process dies here, before the intent
        return None if decision == "yes" else Block("denied")

    rig = Rig(tmp_path, "sqlite", steps=calling(faux_tool_call("deploy", {}, id="c1")))
    rig.registry.install(
        extension("deploy", tool("deploy", echo), hooks=Hooks(before_tool=approve))
    )
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    sub = await root.submit("ship it")
    await stored.wait()
    await rig.crash(h)
    block_after_asking.set()
    h = await rig.open()
    record = await (await h.submission(sub.id)).wait()  # type: ignore[union-attr]
    assert record.status == "done"
    assert asked == ["c1"]  # asked once, although the hook ran twice
    assert results(await entries(h))[0]["content"] == "echo: "
    await h.close()


@pytest.mark.parametrize(
    ("stored", "current", "reruns"),
    [
        ("safe", "safe", True),
        ("safe", "unsafe", False),
        ("unsafe", "safe", False),
        ("unsafe", "unsafe", False),
    ],
)
async def test_an_interrupted_call_reruns_only_when_both_policies_are_safe(
    tmp_path: Path, stored: str, current: str, reruns: bool
) -> None:
    runs: list[str] = []
    first_run = asyncio.Event()

    async def effect(args: Args, ctx: ToolContext) -> str:
        runs.append(ctx.op.id)
        ctx.output("half done")
        if len(runs) == 1:
            first_run.set()
            await asyncio.Event().wait()  # the process dies mid-effect
        return "finished"

    rig = Rig(tmp_path, "sqlite", steps=calling(faux_tool_call("effect", {}, id="c1")))
    rig.settings = HarnessSettings()
    rig.registry.install(extension("fx", tool("effect", effect, replay=stored)))
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    sub = await root.submit("go")
    await first_run.wait()
    await until(lambda: rig.commits >= 5)
    await asyncio.sleep(0.15)  # let the throttled output commit
    await rig.crash(h)
    rig.registry.install(extension("fx", tool("effect", effect, replay=current)))
    h = await rig.open()
    record = await (await h.submission(sub.id)).wait()  # type: ignore[union-attr]
    assert record.status == "done"
    items = await entries(h)
    (result,) = results(items)
    if reruns:
        assert len(runs) == 2 and result["content"] == "finished"
        assert runs[0] == runs[1]  # same op id: the rerun is recognisably the same call
    else:
        assert len(runs) == 1
        assert result["is_error"]
        assert "Tool effect was interrupted and may have partially run" in result["content"]
        assert diagnostics(items) == [["interrupted"]]
    await h.close()


async def test_a_round_kept_in_memory_recovers_only_its_calls_without_a_result(
    tmp_path: Path,
) -> None:
    """A round whose calls all start at their intent keeps their tasks in memory (issue
    36: no task row per call). Crashed after one call's result committed: the answered
    call is not run again; the other is created again under its id and recovered by the
    policy the round commit noted (unsafe: reported interrupted, not run twice)."""
    from core.testing.consistency import check_consistency

    runs: list[str] = []
    hung = asyncio.Event()

    async def fast(args: Args, ctx: ToolContext) -> str:
        runs.append(f"fast {ctx.op.id}")
        return "fast done"

    async def hang(args: Args, ctx: ToolContext) -> str:
        runs.append(f"hang {ctx.op.id}")
        hung.set()
        await asyncio.Event().wait()  # the process dies mid-effect
        return "never"

    steps = calling(
        faux_tool_call("fast", {}, id="c1"), faux_tool_call("hang", {}, id="c2"), then="done"
    )
    rig = Rig(tmp_path, "sqlite", steps=steps)
    rig.registry.install(
        extension("fx", tool("fast", fast, replay="safe"), tool("hang", hang, replay="unsafe"))
    )
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    sub = await root.submit("go")
    await hung.wait()
    await until(lambda: len([e for e in h.session.tasks.values() if e.kind == "perdure.tool"]) == 1)
    (hang_task,) = [t for t in h.session.tasks.values() if t.kind == "perdure.tool"]
    assert (await h.session.storage.scan_tasks(TaskQuery(kind="perdure.tool"))).items == []
    await rig.crash(h)

    h = await rig.open()
    record = await (await h.submission(sub.id)).wait()  # type: ignore[union-attr]
    assert record.status == "done", (record, rig.reports)
    assert runs == [f"fast {runs[0].split()[1]}", f"hang {hang_task.id}:c2"]
    items = await entries(h)
    by_call = {e.data["call_id"]: e for e in items if e.kind == "tool_result"}
    assert by_call["c1"].message["content"] == "fast done"  # type: ignore[index]
    assert "Tool hang was interrupted" in by_call["c2"].message["content"]  # type: ignore[index]
    # Created again under its own id: its end is stored, with its result entry.
    again = await h.session.storage.task(hang_task.id)
    assert again is not None and again.owner == hang_task.owner
    assert await check_consistency(h.session.storage, settled=True) == []
    await h.close()


async def test_aborting_a_tool_call_answers_it_as_aborted_and_the_run_continues(
    tmp_path: Path,
) -> None:
    started = asyncio.Event()

    async def slow(args: Args, ctx: ToolContext) -> str:
        started.set()
        await asyncio.Event().wait()
        return "never"

    rig = Rig(tmp_path, steps=calling(faux_tool_call("slow", {}, id="c1"), then="moved on"))
    rig.registry.install(extension("slow", tool("slow", slow)))
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    sub = await root.submit("go")
    await started.wait()
    (tool_task,) = [t for t in h.session.tasks.values() if t.kind == "perdure.tool"]
    assert await h.abort_task(tool_task.id) == "marked"
    record = await sub.wait()
    assert record.status == "done"
    items = await entries(h)
    assert results(items)[0]["content"] == "[error] Tool slow was aborted"
    assert diagnostics(items) == [["aborted"]]
    done = await h.session.storage.task(tool_task.id)
    assert done is not None and isinstance(done.outcome, Aborted)
    await h.close()
