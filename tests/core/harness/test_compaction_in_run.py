"""Compaction inside a long run (issue 9): a background summary lands at the next
post-tools boundary and the run continues compacted; one compaction in flight per
conversation (a queued summary counts); a stale end is counted and explained; a range
too large for the summarizer is summarized chunk by chunk, checkpointed per chunk."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from core.faux import FauxState, FauxStep, faux_message, faux_tool_call
from core.harness import CompactionSettings, HarnessSettings, ModelRequest, Usage, UserMessage
from core.harness.builtin_documents import INBOX, LIVE
from core.harness.compaction import (
    SUMMARY_PROMPT,
    UPDATE_PROMPT,
    estimate_tokens,
    start_compaction,
    summary_text,
)
from core.harness.runs import queued_summary
from core.records import Completed
from tests.bench.bench_long_run import long_run, report
from tests.core.harness.support import Rig, echo, entries, extension, kinds, tool
from tests.core.harness.test_compaction import (
    MEDIUM,
    SETTINGS,
    SMALL,
    Router,
    compactions,
    contents,
)
from tests.core.harness.test_watch import drain
from tests.core.support import until

LIMIT = SMALL.context_window - SETTINGS.compaction.reserve_tokens


def call(text: str, id: str, usage: Usage | None = None) -> Any:
    return faux_message(faux_tool_call("echo", {"text": text}, id=id), usage=usage)


def rig_with_echo(tmp_path: Path, router: Router, backend: Any = "memory") -> Rig:
    rig = Rig(tmp_path, backend, settings=SETTINGS, models=[SMALL])
    rig.faux.respond(*[router] * 40)
    rig.registry.install(extension("tools", tool("echo", echo)))
    return rig


async def summary_queued(h: Any, conversation_id: int = 1) -> None:
    """Wait until a compaction summary waits in the inbox."""
    for _ in range(5000):
        if queued_summary(await h.session.document_value(INBOX, conversation_id)):
            return
        await asyncio.sleep(0.001)
    raise AssertionError("no summary was queued")


async def test_a_background_summary_lands_at_the_next_post_tools_boundary(
    tmp_path: Path,
) -> None:
    holder: dict[str, Any] = {}
    refused: list[Any] = []

    async def second_round(request: ModelRequest, state: FauxState) -> FauxStep:
        h = holder["h"]
        await summary_queued(h)  # the summary is queued while this request runs
        # ... and it still counts as in flight: no second background compaction.
        refused.append(
            await h.session.commit(lambda tx: start_compaction(tx, 1, reason="threshold"))
        )
        return call("two", "c2", Usage(input=2600, output=100))

    router = Router(
        answers=[call("one", "c1", MEDIUM), second_round, faux_message("all done")],
        summaries=[faux_message("the user asked to echo one")],
    )
    rig = rig_with_echo(tmp_path, router)
    h = holder["h"] = await rig.open()
    root = await h.root(agent={"model": SMALL.id})
    record = await (await root.submit("echo one, then two")).wait()
    assert record.status == "done"
    assert refused == [None]

    items = await entries(h)
    assert kinds(items) == [
        "user",
        "assistant",
        "tool_result",
        "assistant",
        "tool_result",
        "compaction",  # landed after the second tool round, inside the run
        "assistant",
    ]
    summary = items[5]
    assert summary.head == items[1].id and summary.data == {"reason": "threshold"}
    assert record.answer == items[6].id  # one run, one answer
    # The next generation's context starts at the summary; the question is summarized.
    third = router.answer_requests[2]
    assert contents(third)[0] == summary_text("the user asked to echo one")
    assert [m.role for m in third.messages] == [
        "user",
        "assistant",
        "tool_result",
        "assistant",
        "tool_result",
    ]
    assert "echo one, then two" not in str(contents(third))
    (task,) = await compactions(h)  # one compaction, though two rounds were in the band
    assert task.owner is None and isinstance(task.outcome, Completed)
    assert task.outcome.result == {"submission": task.outcome.result["submission"], "requests": 1}  # type: ignore[index]
    live = await root.live()
    assert isinstance(live, dict) and "compaction" not in live
    ledger = (await root.view())["docs"]["usage"]
    assert ledger["compactions"] == {"landed": 1}
    await h.close()


async def test_a_reset_still_waits_for_the_answer_while_summary_and_steer_land_after_tools(
    tmp_path: Path,
) -> None:
    holder: dict[str, Any] = {}

    async def second_round(request: ModelRequest, state: FauxState) -> FauxStep:
        h = holder["h"]
        await summary_queued(h)
        root = await h.conversation(1)
        holder["reset"] = await root.reset("Start over from the handoff.")
        holder["steer"] = await root.submit("and echo three", when_busy="steer")
        return call("two", "c2")

    router = Router(
        answers=[call("one", "c1", MEDIUM), second_round, faux_message("echoed")],
        summaries=[faux_message("echo requests so far")],
    )
    rig = rig_with_echo(tmp_path, router)
    h = holder["h"] = await rig.open()
    root = await h.root(agent={"model": SMALL.id})
    record = await (await root.submit("echo one and two")).wait()
    steer = await holder["steer"].wait()
    assert record.status == steer.status == "done" and record.answer == steer.answer
    assert (await holder["reset"].wait()).status == "done"
    assert kinds(await entries(h)) == [
        "user",
        "assistant",
        "tool_result",
        "assistant",
        "tool_result",
        "compaction",  # post-tools: the summary (a write) first ...
        "user",  # ... then the steer, which joins the run
        "assistant",
        "reset",  # the reset waited for the answer
    ]
    third = contents(router.answer_requests[2])
    assert third[0] == summary_text("echo requests so far") and third[-1] == "and echo three"
    await h.close()


async def test_a_stale_summary_is_counted_in_usage_and_explained_to_watchers(
    tmp_path: Path,
) -> None:
    release = asyncio.Event()

    async def late(request: ModelRequest, state: FauxState) -> FauxStep:
        await release.wait()
        return faux_message("too late", usage=Usage(input=700, output=30))

    router = Router(
        answers=[faux_message("first answer", usage=MEDIUM), faux_message("second answer")],
        summaries=[late],
    )
    rig = rig_with_echo(tmp_path, router)
    h = await rig.open()
    root = await h.root(agent={"model": SMALL.id})
    await (await root.submit("first question")).wait()
    await (await root.submit("second question")).wait()
    await until(lambda: len(router.summary_requests) == 1)
    watch = await root.watch()
    await (await root.reset("Carry on.")).wait()
    release.set()
    await root.wait_for_idle()
    (task,) = await compactions(h)
    ledger = (await root.view())["docs"]["usage"]
    assert ledger["compactions"]["stale"] == 1 and "landed" not in ledger["compactions"]
    assert ledger["compactions"]["stale_usage"]["input"] == 700  # what the summary spent
    live = await h.session.document_value(LIVE, root.id)
    explained = live["stale_compaction"]
    assert explained["task"] == task.id and "ended stale" in explained["message"]
    assert "compaction" not in live  # the next compaction may start
    frames = await drain(watch)
    watch.stop()
    told = [f for f in frames if f["type"] == "delta" and "ended stale" in str(f["ops"])]
    assert told, frames  # a watcher saw the explanation in a frame
    await h.close()


async def test_a_request_too_big_to_send_waits_for_the_compaction_in_flight(
    tmp_path: Path,
) -> None:
    release = asyncio.Event()

    async def slow_summary(request: ModelRequest, state: FauxState) -> FauxStep:
        await release.wait()
        return faux_message("summary of round one")

    router = Router(
        answers=[
            call("one", "c1", MEDIUM),  # the background compaction starts
            call("two", "c2", Usage(input=3400, output=100)),  # now too big to send
            faux_message("all done"),
        ],
        summaries=[slow_summary],
    )
    rig = rig_with_echo(tmp_path, router)
    h = await rig.open()
    root = await h.root(agent={"model": SMALL.id})
    sub = await root.submit("echo one, then two")
    await until(lambda: len(router.answer_requests) == 2)
    for _ in range(200):  # let the generation reach its wait
        await asyncio.sleep(0)
    assert len(await compactions(h)) == 1  # it joined the one in flight
    assert len(router.answer_requests) == 2
    release.set()
    assert (await sub.wait()).status == "done"
    assert len(await compactions(h)) == 1 and len(router.summary_requests) == 1
    assert kinds(await entries(h)) == [
        "user",
        "assistant",
        "tool_result",
        "assistant",
        "tool_result",
        "compaction",
        "assistant",
    ]
    third = router.answer_requests[2]
    assert contents(third)[0] == summary_text("summary of round one")
    assert sum(estimate_tokens(m) for m in third.messages) <= LIMIT
    await h.close()


# --------------------------------------------------------------------------- chunks


def _long_conversation_settings(enabled: bool) -> HarnessSettings:
    return HarnessSettings(
        compaction=CompactionSettings(
            enabled=enabled, reserve_tokens=1000, keep_recent_tokens=1, background_tokens=1000
        )
    )


async def _build_long_conversation(rig: Rig, rounds: int) -> None:
    """``rounds`` questions of 2,000 characters and their answers, with compaction off:
    a range several times the summarizer's limit (3,000 tokens)."""
    rig.settings = _long_conversation_settings(False)
    h = await rig.open()
    root = await h.root(agent={"model": SMALL.id})
    for n in range(rounds):
        rig.faux.respond(faux_message(f"answer {n}"))
        await (await root.submit(f"question {n}: " + "q" * 2000)).wait()
    await h.close()
    rig.settings = _long_conversation_settings(True)


class Summarizer:
    """Summary requests: recorded, checked against the limit, answered by chunk."""

    def __init__(self) -> None:
        self.requests: list[ModelRequest] = []
        self.gate: asyncio.Event | None = None  # blocks the request it is set for
        self.gate_at: int | None = None

    async def __call__(self, request: ModelRequest, state: FauxState) -> FauxStep:
        assert request.messages[0].content == SUMMARY_PROMPT
        size = sum(estimate_tokens(m) for m in request.messages)
        assert size <= LIMIT, f"a summary request of {size} tokens exceeds {LIMIT}"
        self.requests.append(request)
        n = len(self.requests)
        if self.gate is not None and n == self.gate_at:
            await self.gate.wait()
        return faux_message(f"summary after part {n}")


def prompt_of(request: ModelRequest) -> str:
    message = request.messages[1]
    assert isinstance(message, UserMessage)
    return message.content


async def test_a_range_too_large_is_summarized_chunk_by_chunk(tmp_path: Path) -> None:
    rig = Rig(tmp_path, settings=_long_conversation_settings(False), models=[SMALL])
    await _build_long_conversation(rig, 12)  # about 6,000 tokens of questions
    summarizer = Summarizer()
    rig.faux.respond(*[summarizer] * 10)
    h = await rig.open()
    root = await h.conversation(1)
    task_id = await root.compact()
    await root.wait_for_idle()
    task = await h.session.storage.task(task_id)
    assert task is not None and isinstance(task.outcome, Completed)
    requests = summarizer.requests
    assert len(requests) >= 3  # the range did not fit one request
    assert task.outcome.result["requests"] == len(requests)  # type: ignore[index]
    prompts = [prompt_of(r) for r in requests]
    assert "<previous-summary>" not in prompts[0] and "question 0:" in prompts[0]
    for n, prompt in enumerate(prompts[1:], start=1):
        assert f"<previous-summary>\nsummary after part {n}\n</previous-summary>" in prompt
        assert UPDATE_PROMPT in prompt
    for n in range(12):  # every question went to exactly one request
        assert sum(f"question {n}:" in p for p in prompts) == 1, n
    items = await entries(h)
    assert items[-1].kind == "compaction"
    assert items[-1].message["content"] == summary_text(  # type: ignore[index]
        f"summary after part {len(requests)}"
    )
    await h.close()


async def test_a_crash_between_chunks_resumes_at_the_next_chunk(tmp_path: Path) -> None:
    rig = Rig(tmp_path, "sqlite", settings=_long_conversation_settings(False), models=[SMALL])
    await _build_long_conversation(rig, 12)
    summarizer = Summarizer()
    summarizer.gate, summarizer.gate_at = asyncio.Event(), 2  # never set: the crash comes
    rig.faux.respond(*[summarizer] * 10)
    h = await rig.open()
    root = await h.conversation(1)
    task_id = await root.compact()
    await until(lambda: len(summarizer.requests) == 2)  # chunk 1 checkpointed, chunk 2 sent
    before = await h.session.storage.task(task_id)
    assert before is not None and before.checkpoint["position"] > 0  # type: ignore[index]
    assert before.checkpoint["summary"] == "summary after part 1"  # type: ignore[index]
    await rig.crash(h)

    summarizer.gate = None
    h = await rig.open()
    h.resume()
    root = await h.conversation(1)
    await root.wait_for_idle()
    resumed = [prompt_of(r) for r in summarizer.requests[2:]]
    # The first request after the restart is chunk 2 again, on top of chunk 1's summary.
    assert prompt_of(summarizer.requests[1]) == resumed[0]
    assert "<previous-summary>\nsummary after part 1\n</previous-summary>" in resumed[0]
    first_chunk = prompt_of(summarizer.requests[0])
    for n in range(12):  # nothing summarized twice (the lost request aside), nothing lost
        seen = sum(f"question {n}:" in p for p in [first_chunk, *resumed])
        assert seen == 1, n
    task = await h.session.storage.task(task_id)
    assert task is not None and isinstance(task.outcome, Completed)
    items = await entries(h)
    assert [e.kind for e in items].count("compaction") == 1 and items[-1].kind == "compaction"
    ledger = (await h.view(1))["docs"]["usage"]
    assert ledger["compactions"] == {"landed": 1}
    await h.close()


async def test_a_reset_between_chunks_ends_the_compaction_stale_without_more_requests(
    tmp_path: Path,
) -> None:
    rig = Rig(tmp_path, settings=_long_conversation_settings(False), models=[SMALL])
    await _build_long_conversation(rig, 12)
    summarizer = Summarizer()
    summarizer.gate, summarizer.gate_at = asyncio.Event(), 2
    rig.faux.respond(*[summarizer] * 10)
    h = await rig.open()
    root = await h.conversation(1)
    task_id = await root.compact()
    await until(lambda: len(summarizer.requests) == 2)
    await (await root.reset("A fresh start.")).wait()
    summarizer.gate.set()  # chunk 2 returns; chunk 3 must not be asked for
    await root.wait_for_idle()
    assert len(summarizer.requests) == 2
    task = await h.session.storage.task(task_id)
    assert task is not None and isinstance(task.outcome, Completed)
    assert task.outcome.result == {"stale": True, "requests": 2}
    ledger = (await h.view(1))["docs"]["usage"]
    assert ledger["compactions"]["stale"] == 1
    assert "compaction" not in kinds(await entries(h))
    await h.close()


# --------------------------------------------------------------------------- crashes in a run


async def test_a_crash_while_a_summary_waits_at_a_post_tools_boundary(tmp_path: Path) -> None:
    holder: dict[str, Any] = {}
    never = asyncio.Event()

    async def stuck(request: ModelRequest, state: FauxState) -> FauxStep:
        holder["queued"] = True
        await never.wait()
        return call("lost", "lost")

    async def second_round(request: ModelRequest, state: FauxState) -> FauxStep:
        await summary_queued(holder["h"])
        return await stuck(request, state)

    router = Router(
        answers=[call("one", "c1", MEDIUM), second_round],
        summaries=[faux_message("summary of the start")],
    )
    rig = rig_with_echo(tmp_path, router, "sqlite")
    h = holder["h"] = await rig.open()
    root = await h.root(agent={"model": SMALL.id})
    sub = await root.submit("echo one, then two")
    await until(lambda: bool(holder.get("queued")))
    await rig.crash(h)

    router.answers += [call("two", "c2"), faux_message("all done")]
    h = await rig.open()
    record = await (await h.submission(sub.id)).wait()  # type: ignore[union-attr]
    assert record.status == "done"
    assert len(router.summary_requests) == 1  # not summarized again
    assert kinds(await entries(h)) == [
        "user",
        "assistant",
        "tool_result",
        "assistant",
        "tool_result",
        "compaction",
        "assistant",
    ]
    assert contents(router.answer_requests[-1])[0] == summary_text("summary of the start")
    assert len(await compactions(h)) == 1
    await h.close()


# --------------------------------------------------------------------------- the long run


async def test_a_long_run_compacts_inside_the_run_once_at_a_time(tmp_path: Path) -> None:
    """The issue's workload, scaled down (the full 2,000 rounds: tests/bench, -m slow)."""
    run = await long_run(tmp_path / "long.sqlite", 400)
    assert run.over_limit == [], run.over_limit
    assert run.landed >= 2 and run.stale == 0
    assert run.compactions == run.landed  # each one landed; none was started in vain
    # Each landing frees about 100 rounds (the background band plus what the summary
    # dropped): a compaction right after another would mean a stale size estimate.
    assert run.compactions <= 400 // 100
    assert run.summary_requests <= run.landed + run.chunks
    assert run.in_flight <= 1


@pytest.mark.slow
@pytest.mark.timeout(900)
async def test_the_2000_round_run_keeps_its_per_round_cost_flat(tmp_path: Path) -> None:
    """The issue's workload at full size; ``.ci/run`` runs it with ``pytest -m slow``.

    Cost: the mean ms/round of rounds 1,901-2,000 is at most 1.2x that of rounds 1-100
    of the same run, in wall time and in this process's CPU time. A shared 2-core
    machine can stall any 100-round window (another process, a WAL checkpoint), so the
    run is repeated, up to three times, until one meets both; the compaction checks
    must hold on every run.
    """
    ratios: list[tuple[float, float]] = []
    for attempt in range(3):
        run = await long_run(tmp_path / f"long{attempt}.sqlite", 2000)
        print(report(run))
        assert run.over_limit == [], run.over_limit
        assert run.in_flight <= 1 and run.stale == 0
        assert run.compactions == run.landed >= 10
        assert run.summary_requests <= run.landed + run.chunks
        wall = run.ms_per_round(1901, 2000) / run.ms_per_round(1, 100)
        cpu = run.ms_per_round(1901, 2000, cpu=True) / run.ms_per_round(1, 100, cpu=True)
        ratios.append((wall, cpu))
        if max(wall, cpu) <= 1.2:
            break
    assert max(ratios[-1]) <= 1.2, ratios


async def test_a_message_larger_than_the_summarizer_is_cut_to_fit(tmp_path: Path) -> None:
    rig = Rig(tmp_path, settings=_long_conversation_settings(False), models=[SMALL])
    h = await rig.open()
    root = await h.root(agent={"model": SMALL.id})
    rig.faux.respond(faux_message("that is long"), faux_message("ok"))
    await (await root.submit("question 0: " + "z" * 40_000)).wait()  # ~10,000 tokens
    await (await root.submit("question 1: short")).wait()
    await h.close()
    rig.settings = _long_conversation_settings(True)
    summarizer = Summarizer()
    rig.faux.respond(*[summarizer] * 10)
    h = await rig.open()
    root = await h.conversation(1)
    await root.compact()
    await root.wait_for_idle()
    prompts = [prompt_of(r) for r in summarizer.requests]  # each checked against the limit
    assert "[... truncated to fit the summarizer]" in prompts[0]
    assert "question 1: short" in prompts[-1]
    assert kinds(await entries(h))[-1] == "compaction"
    await h.close()
