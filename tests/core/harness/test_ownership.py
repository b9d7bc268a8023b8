"""Ownership and abort across conversations, and sub-agents (foreground and background)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from core.errors import TaskNotFound, UnknownRecord
from core.faux import FauxState, faux_message, faux_tool_call
from core.harness import AssistantMessage, ModelRequest, ToolContext, UserMessage
from core.harness.harness import Submission
from core.harness.subagents import subagent_extension
from core.records import Aborted, Terminal
from core.session import Tx
from core.storage import ConversationQuery, SubmissionQuery, TaskQuery
from core.tasks import TaskRuntime, define_task
from core.testing.wrappers import CommitFault
from tests.core.harness.support import MODEL, Args, Rig, entries, extension, tool
from tests.core.support import settle, until


async def test_aborting_a_conversation_stops_foreground_work_withdraws_input_keeps_writes(
    tmp_path: Path,
) -> None:
    in_tool = asyncio.Event()

    async def hang(args: Args, ctx: ToolContext) -> str:
        in_tool.set()
        await asyncio.Event().wait()
        return "never"

    async def forever(task: Any, rt: TaskRuntime) -> None:
        await asyncio.Event().wait()

    rig = Rig(tmp_path, steps=[faux_message(faux_tool_call("hang", {}, id="c"))])
    rig.registry.install(
        extension("e", tool("hang", hang), tasks=[define_task("t.bg", phases={"p": forever})])
    )
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    background = await h.engine.create_task("t.bg", background=True)
    running = await root.submit("go")
    await in_tool.wait()
    queued = await root.submit("later")
    note = await root.write("note", data={"kept": True})
    assert await root.abort() >= 2  # the generation and its tool
    assert (await running.status()).reason == "aborted"
    assert (await queued.status()).reason == "aborted"
    assert (await note.status()).status == "done"
    assert [e.kind for e in await entries(h)][-2:] == ["tool_result", "note"]
    assert (await h.session.task(background.id)).live  # type: ignore[union-attr]
    assert await root.abort(background=True) == 1
    done = await h.session.task(background.id)
    assert done is not None and done.state == Terminal(Aborted())
    await h.close()


def _subagent_model(parent_steps: list[Any]) -> Any:
    """Answers the parent from ``parent_steps`` and every child input with a fixed text."""

    def respond(request: ModelRequest, state: FauxState) -> AssistantMessage:
        first = next(m for m in request.messages if isinstance(m, UserMessage))
        if first.content.startswith("CHILD:"):
            return faux_message(f"child answer to {first.content}")
        return parent_steps.pop(0)

    return respond


async def test_a_subagent_runs_in_a_child_conversation_owned_by_its_tool_call(
    tmp_path: Path,
) -> None:
    parent = [
        faux_message(faux_tool_call("subagent", {"task": "CHILD: find trains"}, id="c1")),
        faux_message("the sub-agent found trains"),
    ]
    rig = Rig(tmp_path, steps=[_subagent_model(parent)] * 3)
    rig.registry.install(subagent_extension())
    h = await rig.open()
    root = await h.root(agent={"model": MODEL, "instructions": "Delegate."})
    record = await (await root.submit("plan my trip")).wait()
    assert record.status == "done"
    (result,) = [e for e in await entries(h) if e.kind == "tool_result"]
    assert result.message["content"] == "child answer to CHILD: find trains"  # type: ignore[index,call-overload]
    child_id = result.message["details"]["conversation_id"]  # type: ignore[index,call-overload]
    child = await h.session.conversation(child_id)
    assert child is not None and child.owner is not None
    assert child.owner.task_id == result.by_task_id  # owned by the tool call's task
    child_conv = await h.conversation(child_id)
    assert (await child_conv.agent())["instructions"] == "Delegate."  # copied from the owner
    own = await root.usage()
    total = await root.usage(include_owned=True)
    child_usage = await child_conv.usage()
    assert child_usage.output > 0 and total == own + child_usage
    await h.close()


async def test_a_subagent_interrupted_by_a_crash_keeps_one_child_and_one_input(
    tmp_path: Path,
) -> None:
    parent = [
        faux_message(faux_tool_call("subagent", {"task": "CHILD: slow research"}, id="c1")),
        faux_message("done"),
    ]
    child_started = asyncio.Event()
    first_process = True

    async def respond(request: ModelRequest, state: FauxState) -> AssistantMessage:
        first = next(m for m in request.messages if isinstance(m, UserMessage))
        if first.content.startswith("CHILD:"):
            if first_process:
                child_started.set()
                await asyncio.Event().wait()  # the process dies while the child works
            return faux_message("child finished")
        return parent.pop(0)

    rig = Rig(tmp_path, "sqlite", steps=[respond] * 5)
    rig.registry.install(subagent_extension())
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    sub = await root.submit("research")
    await child_started.wait()
    await settle()
    await rig.crash(h)
    first_process = False
    h = await rig.open()
    record = await (await h.submission(sub.id)).wait()  # type: ignore[union-attr]
    assert record.status == "done"
    children = (
        await h.session.storage.scan_conversations(ConversationQuery(owner_conversation_id=1))
    ).items
    assert len(children) == 1
    inputs = (
        await h.session.storage.scan_submissions(SubmissionQuery(conversation_id=children[0].id))
    ).items
    assert [s.status for s in inputs] == ["done"]
    await h.close()


async def test_aborting_the_parent_aborts_the_subagent_run_below_it(tmp_path: Path) -> None:
    child_started = asyncio.Event()

    async def respond(request: ModelRequest, state: FauxState) -> AssistantMessage:
        first = next(m for m in request.messages if isinstance(m, UserMessage))
        if first.content.startswith("CHILD:"):
            child_started.set()
            await asyncio.Event().wait()
        return faux_message(faux_tool_call("subagent", {"task": "CHILD: hang"}, id="c1"))

    rig = Rig(tmp_path, steps=[respond] * 3)
    rig.registry.install(subagent_extension())
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    sub = await root.submit("go")
    await child_started.wait()
    (child,) = (
        await h.session.storage.scan_conversations(ConversationQuery(owner_conversation_id=1))
    ).items
    child_conv = await h.conversation(child.id)
    queued_in_child = await child_conv.submit("CHILD: more")
    await root.abort()
    assert (await sub.status()).reason == "aborted"
    child_inputs = (
        await h.session.storage.scan_submissions(SubmissionQuery(conversation_id=child.id))
    ).items
    assert {s.status for s in child_inputs} == {"unanswered"}
    assert (await queued_in_child.status()).reason == "aborted"
    assert h.idle(1) and h.idle(child.id) and h.engine.scheduler.idle()
    await h.close()


async def test_a_background_subagent_reports_back_once_after_the_parent_went_idle(
    tmp_path: Path,
) -> None:
    release = asyncio.Event()
    parent = [
        faux_message(faux_tool_call("background_subagent", {"task": "CHILD: dig"}, id="c1")),
        faux_message("I started a sub-agent."),
    ]

    async def respond(request: ModelRequest, state: FauxState) -> AssistantMessage:
        first = next(m for m in request.messages if isinstance(m, UserMessage))
        if first.content.startswith("CHILD:"):
            await release.wait()
            return faux_message("deep findings")
        return parent.pop(0)

    rig = Rig(tmp_path, "sqlite", steps=[respond] * 5)
    rig.registry.install(subagent_extension())
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    record = await (await root.submit("dig in the background")).wait()
    assert record.status == "done"
    await root.wait_for_idle()  # idle although the background sub-agent still works
    assert h.engine.scheduler.idle()  # background work does not count for idle either
    (task,) = (await h.session.storage.scan_tasks(TaskQuery(kind="perdure.subagent"))).items
    assert task.background
    await h.close()  # a restart while the child works
    h = await rig.open()
    release.set()
    await h.wait_for_task(task.id)
    reports = [e for e in await entries(h) if e.kind == "subagent_report"]
    assert [r.data["answer"] for r in reports] == ["deep findings"], reports  # type: ignore[index,call-overload]
    await h.close()


async def test_open_applies_abort_marks_a_crash_left_unapplied(tmp_path: Path) -> None:
    async def parent(task: Any, rt: TaskRuntime) -> None:
        async def spawn(tx: Tx, current: Any) -> Any:
            from core.records import Waiting

            child = await tx.create_task("t.child", owner=current.id)
            return Waiting({"phase": "p"}, (child.id,))

        await rt.commit(spawn)

    async def child(task: Any, rt: TaskRuntime) -> None:
        await asyncio.Event().wait()

    rig = Rig(tmp_path, "sqlite")
    rig.registry.install(
        extension(
            "t",
            tasks=[
                define_task("t.parent", phases={"p": parent}),
                define_task("t.child", phases={"p": child}),
            ],
        )
    )

    def cascade(writes: Any) -> bool:
        return any(getattr(w, "kind", None) == "t.child" and w.abort_requested for w in writes)

    # The process dies while the commit that cascades the mark is in storage.
    h = await rig.open(faults=[CommitFault("during", match=cascade)])
    await h.root(agent={"model": MODEL})
    top = await h.engine.create_task("t.parent")
    h.resume()
    await until(lambda: len(h.session.tasks) == 2)
    assert await h.abort_task(top.id) == "marked"
    await until(lambda: h.session.poisoned is not None)
    await rig.crash(h)
    h = await rig.open()
    marks = {t.kind: t.abort_requested for t in h.session.tasks.values()}
    assert marks == {"t.parent": True, "t.child": True}  # derived at open, before resume
    await h.close()


async def test_aborting_unknown_ids_is_refused_with_nothing_written(tmp_path: Path) -> None:
    rig = Rig(tmp_path, steps=[faux_message("a")])
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    sub = await root.submit("hi")
    await sub.wait()
    commits = rig.commits
    with pytest.raises(TaskNotFound, match="999"):
        await h.abort_task(999)
    with pytest.raises(UnknownRecord, match="999"):
        await h.abort_conversation(999)
    assert await Submission(h, 999, root.id).abort() == "not_found"
    assert await sub.abort() == "settled"  # already answered: nothing to abort
    assert rig.commits == commits
    await h.close()
