"""Generation tasks: answers, retries with backoff, deferred polls, partials, recovery."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from core.faux import (
    FAUX_MODEL,
    FauxReply,
    faux_deferred,
    faux_error,
    faux_message,
)
from core.harness import (
    HarnessSettings,
    ProgressSettings,
    RetrySettings,
)
from core.harness.models import ModelError
from core.records import Waiting
from core.session import CommitEvent
from core.storage import TaskQuery
from tests.core.harness.support import MODEL, Rig, entries, hung_in_first_request, kinds
from tests.core.support import settle, until


async def generation(h: Any) -> Any:
    tasks = (
        await h.session.storage.scan_tasks(TaskQuery(kind="perdure.generation", order="desc"))
    ).items
    return tasks[0]


async def test_retryable_errors_back_off_exponentially_then_answer(tmp_path: Path) -> None:
    rig = Rig(
        tmp_path,
        steps=[
            faux_error("overloaded", retryable=True),
            faux_error("overloaded", retryable=True),
            faux_message("finally"),
        ],
    )
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    start = rig.clock.now()
    sub = await root.submit("hi")
    await until(lambda: h.next_wake() == start + 2000)
    task = await generation(h)
    assert isinstance(task.state, Waiting) and task.state.checkpoint["phase"] == "retry"
    live = await root.live()
    assert live["generation"]["retry"] == {"at": start + 2000, "attempt": 2, "error": "overloaded"}  # type: ignore[index,call-overload]
    rig.clock.advance(1999)
    await settle()
    assert rig.faux.state.call_count == 1
    rig.clock.advance(1)
    await until(lambda: h.next_wake() == start + 2000 + 4000)  # 2 s, then 4 s
    rig.clock.advance(4000)
    record = await sub.wait()
    assert record.status == "done" and rig.faux.state.call_count == 3
    await h.close()


async def test_retries_end_with_model_error_and_can_be_disabled_or_hinted(tmp_path: Path) -> None:
    settings = HarnessSettings(retry=RetrySettings(max_retries=1))
    rig = Rig(tmp_path, settings=settings, steps=[faux_error("busy", retryable=True)] * 2)
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    start = rig.clock.now()
    sub = await root.submit("hi")
    await until(lambda: h.next_wake() == start + 2000)
    rig.clock.advance(2000)
    record = await sub.wait()
    assert (record.status, record.reason, record.detail) == ("unanswered", "model_error", "busy")
    await h.close()

    rig = Rig(
        tmp_path / "off",
        settings=HarnessSettings(retry=RetrySettings(enabled=False)),
        steps=[faux_error("busy", retryable=True)],
    )
    h = await rig.open()
    record = await (await (await h.root(agent={"model": MODEL})).submit("hi")).wait()
    assert record.reason == "model_error" and rig.faux.state.call_count == 1
    await h.close()

    hinted = ModelError("slow down", retryable=True, retry_after_ms=90_000)
    rig = Rig(tmp_path / "hint", steps=[hinted, faux_message("ok")])
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    start = rig.clock.now()
    sub = await root.submit("hi")
    await until(lambda: h.next_wake() == start + 60_000)  # the hint, capped at the maximum
    rig.clock.advance(60_000)
    assert (await sub.wait()).status == "done"
    await h.close()


async def test_a_retry_backoff_survives_a_restart(tmp_path: Path) -> None:
    rig = Rig(tmp_path, "sqlite", steps=[faux_error("503", retryable=True), faux_message("ok")])
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    start = rig.clock.now()
    sub = await root.submit("hi")
    await until(lambda: h.next_wake() == start + 2000)
    await h.close()
    h = await rig.open()
    assert h.next_wake() == start + 2000  # derived from storage, before resume
    rig.clock.advance(2000)
    record = await (await h.submission(sub.id)).wait()  # type: ignore[union-attr]
    assert record.status == "done" and rig.faux.state.call_count == 2
    await h.close()


async def test_deferred_responses_are_polled_until_ready_also_across_a_restart(
    tmp_path: Path,
) -> None:
    rig = Rig(
        tmp_path,
        "sqlite",
        steps=[faux_deferred(faux_message("late answer"), pending=2, poll_after_ms=1000)],
    )
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    start = rig.clock.now()
    sub = await root.submit("hi")
    await until(lambda: h.next_wake() == start + 1000)
    task = await generation(h)
    assert task.state.checkpoint["phase"] == "poll"  # type: ignore[union-attr]
    rig.clock.advance(1000)
    await until(lambda: h.next_wake() == start + 2000)
    await h.close()
    h = await rig.open()
    assert h.next_wake() == start + 2000
    h.resume()
    rig.clock.advance(1000)
    await until(lambda: h.next_wake() == start + 3000)
    rig.clock.advance(1000)
    record = await (await h.submission(sub.id)).wait()  # type: ignore[union-attr]
    assert record.status == "done" and rig.faux.state.deferred_fetches == 3
    await h.close()


async def test_a_stream_failing_midway_records_the_partial_and_answers_model_error(
    tmp_path: Path,
) -> None:
    broken = FauxReply(
        faux_message("this answer breaks off"), fail_after=3, error=ModelError("connection reset")
    )
    rig = Rig(tmp_path, steps=[broken, faux_message("second try works")])
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    record = await (await root.submit("hi")).wait()
    assert (record.reason, record.detail) == ("model_error", "connection reset")
    items = await entries(h)
    failed = items[-1]
    assert failed.kind == "assistant" and failed.message["stop_reason"] == "error"  # type: ignore[index,call-overload]
    assert failed.message["content"][0]["text"] == "this answ"  # three 3-character tokens  # type: ignore[index,call-overload]
    record = await (await root.submit("again")).wait()
    assert record.status == "done"
    sent = rig.faux.state.requests[-1].messages
    assert [m.role for m in sent] == ["user", "user"]  # the failed answer stays out of context
    await h.close()


async def _paused_stream(
    tmp_path: Path, text: str, pause_at: int, **progress: int
) -> tuple[Rig, Any, Any, asyncio.Event]:
    """A response streaming ``text`` in 3-character tokens that pauses before token
    ``pause_at``; returns the rig, the harness, the submission and the resume event."""
    paused = asyncio.Event()
    resume = asyncio.Event()
    tokens = 0

    async def pace(_: float) -> None:
        nonlocal tokens
        tokens += 1
        await asyncio.sleep(0)  # a real stream yields between tokens
        if tokens == pause_at:
            paused.set()
            await resume.wait()

    settings = HarnessSettings(progress=ProgressSettings(**progress)) if progress else None
    rig = Rig(tmp_path, steps=[faux_message(text)], settings=settings)
    rig.faux.tokens_per_second = 1000
    rig.faux._sleep = pace
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    sub = await root.submit("hi")
    await paused.wait()
    await settle()
    return rig, h, sub, resume


async def test_partial_output_commits_once_the_response_streamed_a_while_then_every_interval(
    tmp_path: Path,
) -> None:
    rig, h, sub, resume = await _paused_stream(tmp_path, "abcdefghijklmnopqrstuvwxyz", 4)
    root = await h.root()
    live = await root.live()
    assert "partial" not in live["generation"]  # type: ignore[operator,index,call-overload]
    rig.clock.advance(100)  # streamed for partial_after_ms: the first partial commits
    await settle()
    live = await root.live()
    assert live["generation"]["partial"]["content"][0]["text"] == "abcdefghi"  # type: ignore[index,call-overload]
    resume.set()
    record = await sub.wait()
    assert record.status == "done"
    assert "generation" not in (await root.live())  # type: ignore[operator]
    await h.close()


async def test_a_response_past_the_size_threshold_commits_its_partial_at_once(
    tmp_path: Path,
) -> None:
    _rig, h, sub, resume = await _paused_stream(
        tmp_path, "abcdefghijklmnopqrstuvwxyz", 4, partial_after_bytes=6
    )
    root = await h.root()
    live = await root.live()  # no clock advance: the size alone triggered it
    assert live["generation"]["partial"]["content"][0]["text"] in ("abcdef", "abcdefghi")  # type: ignore[index,call-overload]
    resume.set()
    assert (await sub.wait()).status == "done"
    await h.close()


async def test_a_short_response_commits_no_partial(tmp_path: Path) -> None:
    rig = Rig(tmp_path, steps=[faux_message("a short answer, streamed in five tokens")])
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    progress_only = 0

    def count(event: CommitEvent) -> None:
        nonlocal progress_only
        if not (event.entries or event.tasks or event.submissions):
            progress_only += 1

    h.session.subscribe(count)
    record = await (await root.submit("hi")).wait()
    assert record.status == "done"
    assert progress_only == 0
    await h.close()


async def test_aborting_while_streaming_keeps_the_partial_as_an_aborted_entry(
    tmp_path: Path,
) -> None:
    paused = asyncio.Event()

    calls = 0

    async def pace(_: float) -> None:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0)
        if calls == 2:  # after the first token: hang mid-stream
            paused.set()
            await asyncio.Event().wait()

    rig = Rig(tmp_path, steps=[faux_message("partial words here"), faux_message("next")])
    rig.faux.tokens_per_second = 1000
    rig.faux._sleep = pace
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    sub = await root.submit("hi")
    await paused.wait()
    rig.faux._sleep = None
    rig.clock.advance(100)  # hung past partial_after_ms: its partial is committed
    await settle()
    assert await sub.abort() == "aborted"
    record = await sub.wait()
    assert (record.status, record.reason) == ("unanswered", "aborted")
    items = await entries(h)
    assert kinds(items) == ["user", "assistant"]
    assert items[-1].message["stop_reason"] == "aborted"  # type: ignore[index,call-overload]
    await h.close()


async def test_an_interrupted_request_is_resent_and_its_partial_kept_out_of_context(
    tmp_path: Path,
) -> None:
    paused = asyncio.Event()

    calls = 0

    async def pace(_: float) -> None:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0)
        if calls == 2:  # after the first token: hang mid-stream
            paused.set()
            await asyncio.Event().wait()

    rig = Rig(tmp_path, "sqlite", steps=[faux_message("cut off answer")])
    rig.faux.tokens_per_second = 1000
    rig.faux._sleep = pace
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    sub = await root.submit("hi")
    await paused.wait()
    rig.clock.advance(100)  # hung past partial_after_ms: its partial is committed
    await settle()
    await rig.crash(h)
    rig.faux._sleep = None
    rig.faux.respond(faux_message("complete answer"))
    h = await rig.open()
    record = await (await h.submission(sub.id)).wait()  # type: ignore[union-attr]
    assert record.status == "done"
    items = await entries(h)
    assert kinds(items) == ["user", "assistant", "assistant"]
    assert items[1].message["stop_reason"] == "aborted"  # type: ignore[index,call-overload]
    resent = rig.faux.state.requests[-1].messages
    assert [m.role for m in resent] == ["user"]
    await h.close()


async def test_preparation_interrupted_before_its_commit_runs_again_and_answers_once(
    tmp_path: Path,
) -> None:
    rig = Rig(tmp_path, "sqlite", steps=[faux_message("answer")])
    h = await rig.open()
    root = await h.root(agent={"model": MODEL, "instructions": "Be kind."})
    h.engine.scheduler._enabled = False  # submit without running the generation yet
    sub = await root.submit("hi")
    await rig.crash(h)
    h = await rig.open()
    record = await (await h.submission(sub.id)).wait()  # type: ignore[union-attr]
    assert record.status == "done"
    assert kinds(await entries(h)) == ["user", "system", "assistant"]
    await h.close()


@pytest.mark.parametrize("instructions", [None, "Be kind."])
async def test_the_first_request_is_pinned_by_a_commit_only_when_the_pin_writes_more(
    tmp_path: Path, instructions: str | None
) -> None:
    """Issue 36: a pin that would write the ``request`` checkpoint alone is held in
    memory and sent in the ``prepare`` phase (one task row less per run); a prompt
    change to record (the conversation's baseline here) still commits the pin, with
    the checkpoint, so a crash cannot record it twice."""
    from core.harness.runs import GENERATION

    rig = Rig(tmp_path, "sqlite", steps=[faux_message("answer")])
    h = await rig.open()
    agent: dict[str, Any] = {"model": MODEL}
    if instructions is not None:
        agent["instructions"] = instructions
    root = await h.root(agent=agent)
    written: list[Any] = []
    h.session.subscribe(
        lambda e: written.extend(t.checkpoint for t in e.tasks if t.kind == GENERATION)
    )
    record = await (await root.submit("hi")).wait()
    assert record.status == "done"
    items = await entries(h)
    pins = [cp for cp in written if cp is not None and cp["phase"] == "request"]
    if instructions is None:
        assert kinds(items) == ["user", "assistant"]
        assert pins == []
    else:
        assert kinds(items) == ["user", "system", "assistant"]
        assert [cp["cutoff"] for cp in pins] == [items[1].id]
    # Either way the request was sent once, with the pinned model and its whole context.
    (sent,) = rig.faux.state.requests
    assert sent.model == MODEL and sent.max_tokens == FAUX_MODEL.max_tokens
    roles = ["user"] if instructions is None else ["system", "user"]  # the baseline first
    assert [m.role for m in sent.messages] == roles
    await h.close()


async def test_a_pinned_model_that_disappeared_after_a_restart_answers_no_model(
    tmp_path: Path,
) -> None:
    rig, h, sub_id = await hung_in_first_request(tmp_path)
    await rig.crash(h)
    rig.faux._models.clear()
    h = await rig.open()
    record = await (await h.submission(sub_id)).wait()  # type: ignore[union-attr]
    assert (record.reason, record.detail) == ("no_model", f"Model {MODEL} is not available")
    await h.close()


async def test_system_prompt_sections_are_recorded_as_a_baseline_then_deltas(
    tmp_path: Path,
) -> None:
    from core.harness import define_extension, section

    mood = {"value": "calm"}
    rig = Rig(tmp_path, steps=[faux_message("one"), faux_message("two"), faux_message("three")])
    rig.registry.install(
        define_extension("mood", sections=[section("mood", lambda ctx: f"Be {mood['value']}.")])
    )
    h = await rig.open()
    root = await h.root(agent={"model": MODEL, "instructions": "Answer briefly."})
    await (await root.submit("a")).wait()
    await (await root.submit("b")).wait()  # nothing changed: no new system entry
    mood["value"] = "cheerful"
    await (await root.submit("c")).wait()
    systems = [e for e in await entries(h) if e.kind == "system"]
    assert [e.data for e in systems] == [
        {"sections": {"mood": "Be calm.", "instructions": "Answer briefly."}, "baseline": True},
        {"sections": {"mood": "Be cheerful."}},
    ]
    sent = rig.faux.state.requests[-1].messages
    assert sent[0].role == "system" and sent[0].content == "Be calm.\n\nAnswer briefly."  # type: ignore[union-attr]
    assert [m.role for m in sent] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
        "system",
    ]
    assert "Section mood:\nBe cheerful." in sent[-1].content  # type: ignore[union-attr]
    await h.close()


async def test_close_returns_when_it_cancels_a_job_that_never_ran_its_first_step(
    tmp_path: Path,
) -> None:
    rig = Rig(tmp_path, steps=[faux_message("hi")])
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    scheduler = h.engine.scheduler
    start = scheduler._start
    closing: list[asyncio.Future[None]] = []

    def start_after_close_was_queued(inv: Any) -> None:
        if not closing:  # close() is queued on the loop before the new job's first step
            closing.append(asyncio.ensure_future(h.close()))
        start(inv)

    scheduler._start = start_after_close_was_queued  # type: ignore[method-assign]
    await root.submit("hello")
    await until(lambda: bool(closing))
    done, _ = await asyncio.wait(closing, timeout=5)
    assert done, "Harness.close() hung on an invocation cancelled before its first step"
