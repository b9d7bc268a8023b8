"""Views and watches: the committed view first, then one delta per commit; slow consumers
converge through a replace frame; watches end with a reason."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import pytest

from core.docops import apply_ops
from core.errors import UnknownRecord
from core.faux import faux_message, faux_tool_call
from core.harness import HarnessSettings, ProgressSettings
from core.harness.builtin_documents import INBOX
from core.harness.watch import MAX_PENDING_FRAMES
from core.session import Tx, define_doc
from runtimes.actor.clock import SystemClock
from tests.core.harness.support import MODEL, Rig, echo, extension, tool
from tests.core.support import settle


async def drain(watch: Any) -> list[dict[str, Any]]:
    frames = []
    while watch.pending:
        frames.append(await watch.__anext__())
    return frames


def replay(frames: list[dict[str, Any]]) -> Any:
    value: Any = None
    for frame in frames:
        if frame["type"] in ("view", "replace"):
            value = copy.deepcopy(frame["value"])
        else:
            value = apply_ops(value, copy.deepcopy(frame["ops"]))
    return value


async def test_a_watch_starts_with_the_view_and_its_deltas_rebuild_every_later_view(
    tmp_path: Path,
) -> None:
    rig = Rig(
        tmp_path,
        steps=[faux_message(faux_tool_call("echo", {"text": "a"}, id="c")), faux_message("done")],
    )
    rig.registry.install(extension("e", tool("echo", echo)))
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    watch = await root.watch()
    first = await watch.__anext__()
    assert first["type"] == "view"
    assert first["value"]["entries"] == []
    # The built-in documents not created yet are in the view at their initial values.
    docs = first["value"]["docs"]
    assert set(docs) == {"agent", "live", "inbox", "usage"} and docs["inbox"] == {"items": []}
    await (await root.submit("hi")).wait()
    await settle()
    frames = [first, *await drain(watch)]
    assert all(f["type"] == "delta" for f in frames[1:]) and len(frames) > 3
    seqs = [f["seq"] for f in frames[1:]]
    assert seqs == sorted(seqs)
    assert replay(frames) == await root.view()
    view = await root.view()
    assert [e["kind"] for e in view["entries"]] == ["user", "assistant", "tool_result", "assistant"]
    assert set(view["docs"]) == {"agent", "live", "inbox", "usage"}
    watch.stop()
    assert watch.reason == "stopped"
    await h.close()


async def test_a_document_not_created_yet_is_watched_from_its_initial_value(
    tmp_path: Path,
) -> None:
    """An inbox nothing was queued in is not stored; its watch starts at the empty inbox
    and follows the commit that creates it (and so does the conversation's watch)."""
    rig = Rig(tmp_path, steps=[faux_message("one"), faux_message("two")])
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    await (await root.submit("hi")).wait()
    assert await h.session.storage.find_document("inbox", "conversation", 1) is None
    seq = h.session.last_seq
    inbox = await h.watch_document(INBOX, 1)
    view = await root.watch()
    assert h.session.last_seq == seq  # watching writes nothing
    assert (await inbox.__anext__())["value"] == {"value": {"items": []}}
    frames = await drain(view)

    async def queue(tx: Tx) -> None:
        (await tx.doc(INBOX, 1)).value["items"].append({"id": 99})

    await h.session.commit(queue)
    assert replay([{"type": "view", "value": {"value": {"items": []}}}, *await drain(inbox)]) == {
        "value": {"items": [{"id": 99}]}
    }
    assert replay([*frames, *await drain(view)]) == await root.view()
    assert (await root.view())["docs"]["inbox"] == {"items": [{"id": 99}]}
    # A rewindable document is created whenever it is opened: a missing one is unknown.
    with pytest.raises(UnknownRecord):
        await h.watch_document(define_doc("test.r", history="rewindable"), 1)
    assert await h.session.storage.find_document("test.r", "conversation", 1) is None
    await h.close()


async def test_a_late_joiner_gets_the_current_view_not_a_replay(tmp_path: Path) -> None:
    rig = Rig(tmp_path, steps=[faux_message("one")])
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    await (await root.submit("hi")).wait()
    late = await root.watch()
    frames = await drain(late)
    assert [f["type"] for f in frames] == ["view"]
    assert frames[0]["value"] == await root.view()
    await h.close()
    assert late.reason == "closed"
    assert [f async for f in late] == []


async def test_a_consumer_more_than_100_frames_behind_gets_one_replace(tmp_path: Path) -> None:
    notes = define_doc("test.notes", initial=lambda: [])
    rig = Rig(tmp_path)
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    slow = await root.watch()
    fast = await root.watch()
    first = await fast.__anext__()
    fast_frames = [first]

    async def note(tx: Tx, i: int) -> None:
        doc = await tx.doc(notes, 1)
        doc.value.append(i)  # type: ignore[union-attr]

    for i in range(MAX_PENDING_FRAMES + 5):
        await h.session.commit(lambda tx, i=i: note(tx, i))
        fast_frames += await drain(fast)
    frames = await drain(slow)
    # 100 frames were pending (the view and 99 deltas); the 101st folded them into one
    # replace holding the view as of that commit, and the last 5 commits follow it.
    assert [f["type"] for f in frames] == ["replace"] + ["delta"] * 5
    assert frames[0]["value"]["docs"]["test.notes"] == list(range(MAX_PENDING_FRAMES))
    assert replay(frames) == replay(fast_frames) == await root.view()
    assert len(fast_frames) == MAX_PENDING_FRAMES + 6  # never behind: no replace
    await h.close()


async def test_the_task_graph_and_document_watches(tmp_path: Path) -> None:
    gate = asyncio.Event()
    in_tool = asyncio.Event()

    async def wait(args: Any, ctx: Any) -> str:
        in_tool.set()
        await gate.wait()
        return "done"

    rig = Rig(
        tmp_path, steps=[faux_message(faux_tool_call("wait", {}, id="c")), faux_message("ok")]
    )
    rig.registry.install(extension("e", tool("wait", wait)))
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    graph = await h.watch_task_graph()
    assert (await graph.__anext__())["value"] == {"tasks": {}}
    sub = await root.submit("go")
    await in_tool.wait()
    live = await h.task_graph()
    kinds = sorted((t["kind"], t["status"]) for t in live["tasks"].values())
    assert ("perdure.generation", "waiting") in kinds and ("perdure.tool", "running") in kinds
    tool_node = next(t for t in live["tasks"].values() if t["kind"] == "perdure.tool")
    assert tool_node["owner"] is not None
    gate.set()
    await sub.wait()
    await settle()
    assert replay([{"type": "view", "value": {"tasks": {}}}, *await drain(graph)]) == {"tasks": {}}

    notes = define_doc("test.scratch", initial=lambda: {"n": 0})

    async def create(tx: Tx) -> None:
        (await tx.doc(notes, 1)).value = {"n": 0, "created": True}

    await h.session.commit(create)
    doc_watch = await h.watch_document(notes, 1)
    assert (await doc_watch.__anext__())["value"] == {"value": {"n": 0, "created": True}}

    async def retire(tx: Tx) -> None:
        (await tx.doc(notes, 1)).retire()

    await h.session.commit(retire)
    assert doc_watch.reason == "retired"
    await h.close()


async def test_the_inspected_task_graph_shares_the_record_fields_and_names_the_tool_call(
    tmp_path: Path,
) -> None:
    """The inspector's graph (what ``GET .../tasks`` and ``perdure inspect`` show) and the
    record graph come from one builder: the same record fields, plus the derived state
    and a tool task's call."""
    gate = asyncio.Event()
    in_tool = asyncio.Event()

    async def wait(args: Any, ctx: Any) -> str:
        in_tool.set()
        await gate.wait()
        return "done"

    call = faux_tool_call("wait", {"text": "graz"}, id="c")
    rig = Rig(tmp_path, steps=[faux_message(call), faux_message("ok")])
    rig.registry.install(extension("e", tool("wait", wait, replay="safe")))
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    assert await h.inspected_task_graph() == {"scheduling": "paused", "tasks": []}
    sub = await root.submit("go")
    await in_tool.wait()
    inspected = await h.inspected_task_graph()
    records = (await h.task_graph())["tasks"]
    assert inspected["scheduling"] == "running"
    nodes = {n["id"]: n for n in inspected["tasks"]}  # type: ignore[index,union-attr]
    assert sorted(nodes) == sorted(int(k) for k in records)  # type: ignore[union-attr]
    shared = ("kind", "status", "conversation_id", "owner", "background", "abort_requested")
    for key, record_node in records.items():  # type: ignore[union-attr]
        assert {k: nodes[int(key)][k] for k in shared} == {k: record_node[k] for k in shared}
    tool_node = next(n for n in nodes.values() if n["kind"] == "perdure.tool")
    assert tool_node["state"] == "running" and tool_node["tool"] == "wait"
    assert tool_node["arguments"] == {"text": "graz"} and tool_node["replay"] == "safe"
    generation = next(n for n in nodes.values() if n["kind"] == "perdure.generation")
    assert generation["tool"] is None and generation["replay"] is None
    assert generation["status"] == "waiting" and generation["started_at_iso"] is not None
    gate.set()
    await sub.wait()
    await settle()
    assert (await h.inspected_task_graph())["tasks"] == []
    await h.close()


async def test_a_busy_conversation_wakes_waiting_consumers_in_batches_losing_nothing(
    tmp_path: Path,
) -> None:
    rig = Rig(tmp_path)
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    watch = await root.watch()
    frames = [await watch.__anext__()]
    wakes = 0

    async def consume() -> None:
        nonlocal wakes
        async for frame in watch:
            frames.append(frame)
            if not watch.pending:
                wakes += 1  # the consumer is about to wait again

    consumer = asyncio.create_task(consume())
    await settle()
    for i in range(50):  # fifty commits in quick succession, each yielding to the loop
        await root.write("note", data={"n": i})
        await asyncio.sleep(0)
    await settle()
    assert 2 <= len(frames) < 10  # woken at once for the first frame, then held back
    rig.clock.advance(20)  # the wake interval (harness clock) passes: the rest arrive
    await settle()
    assert replay(frames) == await root.view()
    assert [f["type"] for f in frames[1:]] == ["delta"] * 50
    assert wakes == 2  # batched: two wake-ups for fifty commits
    watch.stop()
    await consumer
    await h.close()


async def test_a_streaming_answer_reaches_watchers_as_appended_text_not_the_whole_partial(
    tmp_path: Path,
) -> None:
    text = "The train to Graz leaves at nine and the seat is booked for you."
    # No quiet start (tested apart): a fast machine streams this text in under 100 ms.
    progress = ProgressSettings(partial_interval_ms=0, partial_after_ms=0)
    settings = HarnessSettings(progress=progress)
    rig = Rig(tmp_path, steps=[faux_message(text)], settings=settings)
    # A real stream on the real clock: partials are committed one by one as it goes.
    rig.clock = SystemClock()  # type: ignore[assignment]
    rig.faux.tokens_per_second = 200
    rig.faux._sleep = asyncio.sleep
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    watch = await root.watch()
    frames = [await watch.__anext__()]
    await (await root.submit("book it")).wait()
    await settle()
    frames += await drain(watch)
    ops = [op for f in frames[1:] for op in f["ops"]]
    appends = [op for op in ops if op[0] == "a"]
    # Several partial commits, each carrying only what the stream added since the last.
    assert len(appends) >= 3, ops
    assert all(len(op[2]) < len(text) // 2 for op in appends)
    assert all(op[1][:3] == ["docs", "live", "generation"] for op in appends)
    whole = [op for op in ops if op[0] == "s" and isinstance(op[2], str) and len(op[2]) > 20]
    assert whole == []  # the whole partial text is never sent again
    assert replay(frames) == await root.view()  # the deltas still rebuild the view
    watch.stop()
    await h.close()
