"""Admission, the inbox and boundaries: request ids, when_busy modes, writes, reasons."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from core.errors import ConversationBusy, RequestIdConflict, UnknownRecord
from core.faux import FauxState, faux_error, faux_message, faux_tool_call
from core.harness import AssistantMessage, ModelRequest, ToolContext
from core.harness.builtin_documents import INBOX
from tests.core.harness.support import MODEL, Args, Rig, entries, extension, kinds, tool
from tests.core.support import settle, until


async def test_idle_input_is_placed_and_its_run_started_in_one_commit(tmp_path: Path) -> None:
    rig = Rig(tmp_path, steps=[faux_message("hello")])
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    before = rig.commits
    sub = await root.submit("hi")
    assert rig.commits == before + 1
    record = await sub.status()
    assert record.status == "placed" and record.entry is not None
    user = await h.session.storage.entry(record.entry)
    assert user is not None and user.kind == "user" and user.by_task_id is None
    live = await root.live()
    assert isinstance(live, dict) and live["run"]["inputs"][0]["id"] == sub.id
    done = await sub.wait()
    assert done.status == "done" and done.answer is not None
    answer = await h.session.storage.entry(done.answer)
    assert answer is not None and answer.message["content"][0]["text"] == "hello"  # type: ignore[index,call-overload]
    assert await root.live() == {}
    await h.close()


async def test_request_ids_dedupe_before_any_write_per_conversation_and_across_restarts(
    tmp_path: Path,
) -> None:
    rig = Rig(tmp_path, "sqlite", steps=[faux_message("one"), faux_message("two")])
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    first = await root.submit("hi", request_id="r1")
    commits = rig.commits
    again = await root.submit("hi", request_id="r1", when_busy="reject")
    assert again.id == first.id and rig.commits == commits  # no write, no busy check
    # The same request id naming other content is a client's mistake: refused, unwritten.
    with pytest.raises(RequestIdConflict, match=r"submission \d+ with different content"):
        await root.submit("something else", request_id="r1")
    assert rig.commits == commits
    with pytest.raises(
        RequestIdConflict, match="Request r1 already identifies a submission of type input"
    ):
        await root.write("note", data={"x": 1}, request_id="r1")
    other = await h.create_conversation(agent={"model": MODEL})
    elsewhere = await other.submit("hi", request_id="r1")
    assert elsewhere.id != first.id
    await first.wait()
    await elsewhere.wait()
    await h.close()

    h = await rig.open()
    root = await h.conversation(1)
    after = await root.submit("hi", request_id="r1")
    assert after.id == first.id
    with pytest.raises(RequestIdConflict, match="different content"):
        await root.submit("retry after restart", request_id="r1")
    reacquired = await h.submission(first.id)
    assert reacquired is not None and (await reacquired.status()).status == "done"
    assert await h.submission(10**6) is None
    await h.close()


async def test_reject_when_busy_raises_and_writes_nothing(tmp_path: Path) -> None:
    release = asyncio.Event()

    async def slow(request: ModelRequest, state: FauxState) -> AssistantMessage:
        await release.wait()
        return faux_message("done")

    rig = Rig(tmp_path, steps=[slow])
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    busy = await root.submit("first")
    await until(lambda: rig.faux.state.call_count == 1)
    commits = rig.commits
    with pytest.raises(ConversationBusy):
        await root.submit("second", when_busy="reject", request_id="nope")
    assert rig.commits == commits
    assert await h.session.storage.submission_by_request(1, "nope") is None
    release.set()
    await busy.wait()
    await h.close()


async def test_follow_ups_queue_and_start_the_next_run_one_at_a_time(tmp_path: Path) -> None:
    release = asyncio.Event()
    seen: list[list[str]] = []

    async def answer(request: ModelRequest, state: FauxState) -> AssistantMessage:
        seen.append([m.content for m in request.messages if m.role == "user"])  # type: ignore[union-attr]
        if state.call_count == 1:
            await release.wait()
        return faux_message(f"answer {state.call_count}")

    rig = Rig(tmp_path, steps=[answer, answer, answer])
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    first = await root.submit("one")
    await until(lambda: rig.faux.state.call_count == 1)
    second = await root.submit("two")
    third = await root.submit("three")
    assert (await second.status()).status == "queued"
    release.set()
    records = [await s.wait() for s in (first, second, third)]
    assert [r.status for r in records] == ["done", "done", "done"]
    assert len({r.answer for r in records}) == 3  # one run each
    assert seen == [["one"], ["one", "two"], ["one", "two", "three"]]
    await h.close()


async def test_an_inbox_nothing_was_queued_in_is_not_stored(tmp_path: Path) -> None:
    """Every admission opens the inbox; one that only finds it empty does not store it
    (a row and a revision fewer on a conversation's first submission). Readers get the
    empty inbox; the first queued item creates it, and it reads back after a reopen."""
    release = asyncio.Event()

    async def answer(request: ModelRequest, state: FauxState) -> AssistantMessage:
        if state.call_count == 2 and not release.is_set():
            await release.wait()
        return faux_message(f"answer {state.call_count}")

    rig = Rig(tmp_path, "sqlite", steps=[answer] * 4)
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    assert (await (await root.submit("one")).wait()).status == "done"
    assert await h.session.storage.find_document("inbox", "conversation", 1) is None
    assert await root.document(INBOX) == {"items": []}
    assert (await root.view())["docs"]["inbox"] == {"items": []}
    await h.close()

    h = await rig.open()
    root = await h.conversation(1)
    assert await h.session.storage.find_document("inbox", "conversation", 1) is None
    second = await root.submit("two")
    await until(lambda: rig.faux.state.call_count == 2)
    third = await root.submit("three")  # busy: queued, and the inbox is created
    assert (await third.status()).status == "queued"
    assert await h.session.storage.find_document("inbox", "conversation", 1) is not None
    await h.close()

    h = await rig.open()  # the queued item reads back from storage
    root = await h.conversation(1)
    inbox = await root.document(INBOX)
    assert [(i["id"], i["content"]) for i in inbox["items"]] == [(third.id, "three")]
    assert (await root.view())["docs"]["inbox"] == inbox
    release.set()
    records = [await (await h.submission(s.id)).wait() for s in (second, third)]  # type: ignore[union-attr]
    assert [r.status for r in records] == ["done", "done"]
    assert await root.document(INBOX) == {"items": []}
    await h.close()


async def test_a_steer_joins_the_current_run_after_its_tool_round(tmp_path: Path) -> None:
    in_tool = asyncio.Event()
    release = asyncio.Event()

    async def wait_tool(args: Args, ctx: ToolContext) -> str:
        in_tool.set()
        await release.wait()
        return "tool done"

    rig = Rig(
        tmp_path,
        steps=[
            faux_message(faux_tool_call("wait", {"text": "x"}, id="c1")),
            faux_message("final answer"),
        ],
    )
    rig.registry.install(extension("tools", tool("wait", wait_tool)))
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    first = await root.submit("start")
    await in_tool.wait()
    steer = await root.submit("also consider the bus", when_busy="steer")
    follow = await root.submit("afterwards", when_busy="follow_up")
    rig.faux.respond(faux_message("follow-up answer"))
    release.set()
    a, b = await first.wait(), await steer.wait()
    assert a.status == b.status == "done" and a.answer == b.answer  # one run answered both
    second_request = rig.faux.state.requests[1].messages
    assert [m.role for m in second_request][-2:] == ["tool_result", "user"]
    c = await follow.wait()
    assert c.status == "done" and c.answer != a.answer
    history = kinds(await entries(h))
    assert history == [
        "user",
        "assistant",
        "tool_result",
        "user",
        "assistant",
        "user",
        "assistant",
    ]
    await h.close()


async def test_a_request_id_with_other_content_is_refused_while_queued_placed_and_for_writes(
    tmp_path: Path,
) -> None:
    release = asyncio.Event()

    async def slow(request: ModelRequest, state: FauxState) -> AssistantMessage:
        await release.wait()
        return faux_message("ok")

    rig = Rig(tmp_path, steps=[slow, faux_message("second")])
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    note = await root.write("note", data={"n": 1}, request_id="w1")
    assert (await root.write("note", data={"n": 1}, request_id="w1")).id == note.id
    commits = rig.commits
    with pytest.raises(RequestIdConflict, match="different content"):
        await root.write("note", data={"n": 2}, request_id="w1")
    with pytest.raises(RequestIdConflict, match="different content"):
        await root.write("other", data={"n": 1}, request_id="w1")
    assert rig.commits == commits
    first = await root.submit("go", request_id="i1")
    await until(lambda: rig.faux.state.call_count == 1)
    queued = await root.submit("next", request_id="i2")  # queued behind the busy run
    assert (await queued.status()).status == "queued"
    commits = rig.commits
    assert (await root.submit("next", request_id="i2")).id == queued.id
    with pytest.raises(RequestIdConflict, match="different content"):
        await root.submit("not next", request_id="i2")
    with pytest.raises(RequestIdConflict, match="different content"):
        await root.submit("stop", request_id="i1")  # placed: compared with its entry
    assert rig.commits == commits
    release.set()
    await first.wait()
    await queued.wait()
    await h.close()


async def test_writes_land_at_once_when_idle_and_before_user_items_at_a_boundary(
    tmp_path: Path,
) -> None:
    release = asyncio.Event()

    async def slow(request: ModelRequest, state: FauxState) -> AssistantMessage:
        await release.wait()
        return faux_message("ok")

    rig = Rig(tmp_path, steps=[slow, faux_message("second")])
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    note = await root.write("note", data={"n": 1}, request_id="w1")
    assert (await note.status()).status == "done"
    first = await root.submit("go")
    await until(lambda: rig.faux.state.call_count == 1)
    follow = await root.submit("next")
    queued_write = await root.write("note", data={"n": 2})
    assert (await queued_write.status()).status == "queued"
    release.set()
    await first.wait()
    await follow.wait()
    assert (await queued_write.status()).status == "done"
    history = [(e.kind, e.data) for e in await entries(h)]
    notes = [i for i, (k, _) in enumerate(history) if k == "note"]
    user_next = max(i for i, (k, _) in enumerate(history) if k == "user")
    assert len(notes) == 2 and notes[1] < user_next  # the write is placed first
    with pytest.raises(ValueError, match="application kind"):
        await root.write("user")
    await h.close()


async def test_unanswered_reasons_no_model_model_error_and_aborted(tmp_path: Path) -> None:
    rig = Rig(tmp_path, steps=[faux_error("bad request")])
    h = await rig.open()
    no_model = await h.create_conversation()
    rec = await (await no_model.submit("hi")).wait()
    assert (rec.status, rec.reason) == ("unanswered", "no_model")
    unknown = await h.create_conversation(agent={"model": "faux/missing"})
    rec = await (await unknown.submit("hi")).wait()
    assert (rec.status, rec.reason, rec.detail) == (
        "unanswered",
        "no_model",
        "Model faux/missing is not available",
    )
    failing = await h.create_conversation(agent={"model": MODEL})
    rec = await (await failing.submit("hi")).wait()
    assert (rec.status, rec.reason, rec.detail) == ("unanswered", "model_error", "bad request")

    blocked = asyncio.Event()

    async def hang(request: ModelRequest, state: FauxState) -> AssistantMessage:
        await blocked.wait()
        return faux_message("never")

    rig.faux.respond(hang)
    slow = await h.create_conversation(agent={"model": MODEL})
    sub = await slow.submit("hi")
    await until(lambda: rig.faux.state.call_count == 2)
    assert await sub.abort() == "aborted"
    rec = await sub.wait()
    assert (rec.status, rec.reason) == ("unanswered", "aborted")
    assert await sub.abort() == "settled"
    await h.close()


async def test_a_queued_submission_can_be_withdrawn(tmp_path: Path) -> None:
    release = asyncio.Event()

    async def slow(request: ModelRequest, state: FauxState) -> AssistantMessage:
        await release.wait()
        return faux_message("ok")

    rig = Rig(tmp_path, steps=[slow])
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    first = await root.submit("one")
    await until(lambda: rig.faux.state.call_count == 1)
    queued = await root.submit("two")
    assert await queued.abort() == "aborted"
    assert (await queued.status()).reason == "aborted"
    release.set()
    await first.wait()
    await h.wait_for_idle()
    assert rig.faux.state.call_count == 1  # the withdrawn input started no run
    await h.close()


async def test_waiting_times_out_on_the_harness_clock_and_never_cancels_the_work(
    tmp_path: Path,
) -> None:
    release = asyncio.Event()

    async def slow(request: ModelRequest, state: FauxState) -> AssistantMessage:
        await release.wait()
        return faux_message("eventually")

    rig = Rig(tmp_path, steps=[slow])
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    sub = await root.submit("hi")
    waiting = asyncio.ensure_future(sub.wait(timeout=5))
    await settle()
    rig.clock.advance(5000)
    with pytest.raises(TimeoutError):
        await waiting
    cancelled = asyncio.ensure_future(sub.wait())
    await settle()
    cancelled.cancel()
    release.set()
    assert (await sub.wait()).status == "done"
    await h.close()


async def test_bad_submissions_are_refused_before_anything_is_written(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    commits = rig.commits
    for bad, message in (
        (lambda: root.submit(""), "non-empty"),
        (lambda: root.submit("x", when_busy="later"), "when_busy"),  # type: ignore[arg-type]
        (lambda: root.submit("x", request_id=""), "request id"),
        (lambda: root.write("note", data=float("nan")), "JSON"),
    ):
        with pytest.raises(ValueError, match=message):
            await bad()
    assert rig.commits == commits
    with pytest.raises(UnknownRecord):
        await h.conversation(999)
    await h.close()
