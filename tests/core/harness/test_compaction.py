"""Compaction and reset: blocking, background (landing at a boundary or stale), overflow
retry, manual compaction, reset, crash while summarizing; old entries are never deleted."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from core.faux import FauxState, FauxStep, faux_error, faux_message, faux_tool_call
from core.harness import (
    AssistantMessage,
    CompactionSettings,
    HarnessSettings,
    ModelRequest,
    SystemMessage,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from core.harness.builtin_documents import INBOX
from core.harness.compaction import (
    COMPACTION,
    SUMMARY_PROMPT,
    compaction_need,
    context_tokens,
    select_cut,
    serialize,
    summary_text,
)
from core.harness.context import ContextView
from core.harness.models import ModelInfo
from core.records import Completed, Entry
from core.storage import TaskQuery
from tests.core.harness.support import Rig, entries, kinds
from tests.core.support import until

SMALL = ModelInfo("faux/small", context_window=4000, max_tokens=1000)
# Blocking above 3,000 tokens, background above 2,000; keep as little as one message.
SETTINGS = HarnessSettings(
    compaction=CompactionSettings(reserve_tokens=1000, keep_recent_tokens=1, background_tokens=1000)
)
BIG = Usage(input=3400, output=100)  # the next request would not fit: blocking
MEDIUM = Usage(input=2400, output=100)  # fits, but a background compaction starts


class Router:
    """A model that answers summary requests and conversation requests from two scripts
    (their relative order is up to the scheduler)."""

    def __init__(self, answers: list[FauxStep], summaries: list[FauxStep]) -> None:
        self.answers = answers
        self.summaries = summaries
        self.answer_requests: list[ModelRequest] = []
        self.summary_requests: list[ModelRequest] = []

    def __call__(self, request: ModelRequest, state: FauxState) -> FauxStep:
        first = request.messages[0] if request.messages else None
        if isinstance(first, SystemMessage) and first.content == SUMMARY_PROMPT:
            self.summary_requests.append(request)
            return self.summaries.pop(0)
        self.answer_requests.append(request)
        return self.answers.pop(0)


def gated(event: asyncio.Event, step: FauxStep) -> Callable[..., Awaitable[FauxStep]]:
    async def wait(request: ModelRequest, state: FauxState) -> FauxStep:
        await event.wait()
        return step

    return wait


def rig_for(tmp_path: Path, router: Router, backend: Any = "memory") -> Rig:
    rig = Rig(tmp_path, backend, settings=SETTINGS, models=[SMALL])
    rig.faux.respond(*[router] * 20)
    return rig


def contents(request: ModelRequest) -> list[str]:
    return [m.content if not isinstance(m, AssistantMessage) else m.text for m in request.messages]


async def compactions(h: Any) -> list[Any]:
    return (await h.session.storage.scan_tasks(TaskQuery(kind=COMPACTION, order="asc"))).items


# --------------------------------------------------------------------------- pure parts


def test_thresholds_follow_the_window_reserve_and_background_band() -> None:
    s = CompactionSettings()  # the defaults docs/design.md states: 16,384 / 20,000 / 32,768
    window = 128_000
    assert compaction_need(s, window - 16_384, window) == "background"
    assert compaction_need(s, window - 16_384 + 1, window) == "blocking"
    assert compaction_need(s, window - 16_384 - 32_768, window) is None
    assert compaction_need(s, window - 16_384 - 32_768 + 1, window) == "background"
    assert compaction_need(CompactionSettings(enabled=False), window, window) is None


def test_token_estimates_start_from_the_newest_reported_usage() -> None:
    answered = faux_message("x" * 40, usage=Usage(input=1000, output=20))
    later = UserMessage(content="y" * 400)
    assert context_tokens([UserMessage(content="z" * 4000), answered, later]) == 1020 + 101
    assert context_tokens([UserMessage(content="z" * 400)]) == 101  # no usage: estimates


def _entry(id: int, message: Any, kind: str = "user") -> Entry:
    from core.harness.messages import message_to_json

    return Entry(id=id, conversation_id=1, kind=kind, message=message_to_json(message))


def test_the_cut_keeps_recent_tokens_and_never_separates_a_result_from_its_call() -> None:
    call = faux_message(faux_tool_call("read", {"text": "a"}, id="c1"))
    result = ToolResultMessage(tool_call_id="c1", tool_name="read", content="r" * 400)
    items = [
        _entry(1, UserMessage(content="u" * 400)),
        _entry(2, faux_message("a" * 400), "assistant"),
        _entry(3, UserMessage(content="question")),
        _entry(4, call, "assistant"),
        _entry(5, result, "tool_result"),
    ]
    view = ContextView(None, items, [], {})
    assert select_cut(view, 50) == 4  # 50 tokens reach into the result: cut at its call
    assert select_cut(view, 108) == 3
    assert select_cut(view, 10_000) is None  # everything is recent: nothing to summarize
    text = serialize([UserMessage(content="hi"), call, result])
    assert "[User]: hi" in text and 'read(text="a")' in text
    assert "more characters truncated" not in text


# --------------------------------------------------------------------------- blocking


async def test_a_request_that_would_not_fit_waits_for_a_blocking_compaction(
    tmp_path: Path,
) -> None:
    router = Router(
        answers=[faux_message("first answer", usage=BIG), faux_message("second answer")],
        summaries=[faux_message("the user asked a first question")],
    )
    rig = rig_for(tmp_path, router)
    h = await rig.open()
    root = await h.root(agent={"model": SMALL.id})
    assert (await (await root.submit("first question")).wait()).status == "done"
    sub = await root.submit("second question")
    assert (await sub.wait()).status == "done"

    items = await entries(h)
    assert kinds(items) == ["user", "assistant", "user", "compaction", "assistant"]
    summary = items[3]
    assert summary.head == items[2].id  # the range starts at the kept question
    assert summary.data == {"reason": "threshold"}
    (prompt,) = router.summary_requests
    assert "[User]: first question" in contents(prompt)[1]
    assert "second question" not in contents(prompt)[1] and prompt.tools == []
    assert contents(router.answer_requests[1]) == [
        summary_text("the user asked a first question"),
        "second question",
    ]
    (task,) = await compactions(h)
    generation = (await h.session.storage.scan_tasks(TaskQuery(kind="perdure.generation"))).items
    assert task.owner in {g.id for g in generation}  # owned by the waiting generation
    assert isinstance(task.outcome, Completed)
    ctx = await root.context()
    assert [m.content for m in ctx.messages[:2]] == contents(router.answer_requests[1])
    assert (await root.live()).get("compaction") is None  # type: ignore[union-attr]
    await h.close()


async def test_a_crash_while_summarizing_resumes_the_compaction_and_answers_once(
    tmp_path: Path,
) -> None:
    never = asyncio.Event()
    router = Router(
        answers=[faux_message("first answer", usage=BIG), faux_message("second answer")],
        summaries=[gated(never, faux_message("lost"))],
    )
    rig = rig_for(tmp_path, router, "sqlite")
    h = await rig.open()
    root = await h.root(agent={"model": SMALL.id})
    await (await root.submit("first question")).wait()
    sub = await root.submit("second question")
    await until(lambda: len(router.summary_requests) == 1)
    await rig.crash(h)

    router.summaries.append(faux_message("summary after restart"))
    h = await rig.open()
    record = await (await h.submission(sub.id)).wait()  # type: ignore[union-attr]
    assert record.status == "done"
    items = await entries(h)
    assert kinds(items) == ["user", "assistant", "user", "compaction", "assistant"]
    assert len(router.summary_requests) == 2 and len(router.answer_requests) == 2
    assert contents(router.answer_requests[1])[0] == summary_text("summary after restart")
    await h.close()


# --------------------------------------------------------------------------- background


async def test_a_background_compaction_lands_at_the_next_boundary(tmp_path: Path) -> None:
    release = asyncio.Event()
    router = Router(
        answers=[
            faux_message("first answer", usage=MEDIUM),
            gated(release, faux_message("second answer")),
            faux_message("third answer"),
        ],
        summaries=[faux_message("short summary")],
    )
    rig = rig_for(tmp_path, router)
    h = await rig.open()
    root = await h.root(agent={"model": SMALL.id})
    await (await root.submit("first question")).wait()
    sub = await root.submit("second question")

    async def queued() -> bool:
        inbox = await h.session.document_value(INBOX, root.id)
        return isinstance(inbox, dict) and bool(inbox.get("items"))

    await until(lambda: len(router.summary_requests) == 1)
    for _ in range(5000):  # the summary waits in the inbox while the run goes on
        if await queued():
            break
        await asyncio.sleep(0.001)
    (task,) = await compactions(h)
    assert task.owner is None  # the conversation's, not the generation's
    assert kinds(await entries(h)) == ["user", "assistant", "user"]
    release.set()
    assert (await sub.wait()).status == "done"
    await root.wait_for_idle()
    items = await entries(h)
    assert kinds(items) == ["user", "assistant", "user", "assistant", "compaction"]
    assert items[4].head == items[2].id

    await (await root.submit("third question")).wait()
    assert contents(router.answer_requests[2]) == [
        summary_text("short summary"),
        "second question",
        "second answer",
        "third question",
    ]
    assert len(await compactions(h)) == 1  # one background compaction at a time
    await h.close()


async def test_a_background_summary_overtaken_by_a_reset_ends_stale(tmp_path: Path) -> None:
    release = asyncio.Event()
    router = Router(
        answers=[
            faux_message("first answer", usage=MEDIUM),
            faux_message("second answer"),
            faux_message("third answer"),
        ],
        summaries=[gated(release, faux_message("too late"))],
    )
    rig = rig_for(tmp_path, router)
    h = await rig.open()
    root = await h.root(agent={"model": SMALL.id})
    await (await root.submit("first question")).wait()
    await (await root.submit("second question")).wait()
    await until(lambda: len(router.summary_requests) == 1)
    reset = await root.reset("Carry on with the third question.")
    assert (await reset.wait()).status == "done"
    release.set()
    await root.wait_for_idle()

    (task,) = await compactions(h)
    assert isinstance(task.outcome, Completed)
    result: Any = task.outcome.result
    late = await h.submission(result["submission"])
    record = await late.wait()  # type: ignore[union-attr]
    assert (record.status, record.reason) == ("unanswered", "stale")
    assert record.request_id == f"compaction:{task.id}"
    assert "compaction" not in kinds(await entries(h))
    await (await root.submit("third question")).wait()
    assert contents(router.answer_requests[2]) == [
        "Carry on with the third question.",
        "third question",
    ]
    await h.close()


# --------------------------------------------------------------------------- overflow


async def test_a_context_overflow_compacts_and_retries_once(tmp_path: Path) -> None:
    router = Router(
        answers=[
            faux_message("first answer"),
            faux_error("prompt is too long", overflow=True),
            faux_message("second answer"),
        ],
        summaries=[faux_message("overflow summary")],
    )
    rig = rig_for(tmp_path, router)
    h = await rig.open()
    root = await h.root(agent={"model": SMALL.id})
    await (await root.submit("first question")).wait()
    assert (await (await root.submit("second question")).wait()).status == "done"
    items = await entries(h)
    assert kinds(items) == ["user", "assistant", "user", "compaction", "assistant"]
    assert items[3].data == {"reason": "overflow"}
    assert contents(router.answer_requests[2])[0] == summary_text("overflow summary")
    await h.close()

    router = Router(
        answers=[
            faux_message("first answer"),
            faux_error("prompt is too long", overflow=True),
            faux_error("prompt is still too long", overflow=True),
        ],
        summaries=[faux_message("overflow summary")],
    )
    rig = rig_for(tmp_path / "twice", router)
    h = await rig.open()
    root = await h.root(agent={"model": SMALL.id})
    await (await root.submit("first question")).wait()
    record = await (await root.submit("second question")).wait()
    assert (record.status, record.reason) == ("unanswered", "model_error")
    assert record.detail == "prompt is still too long"
    assert len(router.summary_requests) == 1 and len(router.answer_requests) == 3
    await h.close()


# --------------------------------------------------------------------------- by hand


async def test_compact_by_hand_with_instructions_when_idle_and_when_busy(tmp_path: Path) -> None:
    release = asyncio.Event()
    router = Router(
        answers=[
            faux_message("first answer"),
            faux_message("second answer"),
            gated(release, faux_message("third answer")),
        ],
        summaries=[faux_message("manual summary"), faux_message("busy summary")],
    )
    rig = rig_for(tmp_path, router)
    h = await rig.open()
    root = await h.root(agent={"model": SMALL.id})
    await (await root.submit("first question")).wait()
    await (await root.submit("second question")).wait()
    task_id = await root.compact("keep the numbers")
    await root.wait_for_idle()
    assert "Additional focus: keep the numbers" in contents(router.summary_requests[0])[1]
    items = await entries(h)
    assert kinds(items)[-1] == "compaction" and items[-1].data == {"reason": "manual"}
    task = await h.session.storage.task(task_id)
    assert task is not None and task.owner is None and isinstance(task.outcome, Completed)
    before = len(items)

    sub = await root.submit("third question")
    await until(lambda: len(router.answer_requests) == 3)
    await root.compact()
    await until(lambda: len(router.summary_requests) == 2)
    release.set()
    await sub.wait()
    await root.wait_for_idle()
    items = await entries(h)
    assert kinds(items)[before:] == ["user", "assistant", "compaction"]  # after the answer
    assert len(items) > before  # nothing was ever deleted
    await h.close()


async def test_nothing_to_compact_is_skipped(tmp_path: Path) -> None:
    router = Router(answers=[], summaries=[])
    rig = rig_for(tmp_path, router)
    h = await rig.open()
    root = await h.root(agent={"model": SMALL.id})
    task_id = await root.compact()
    await root.wait_for_idle()
    task = await h.session.storage.task(task_id)
    assert task is not None and task.outcome == Completed({"skipped": "nothing to compact"})
    assert router.summary_requests == [] and await entries(h) == []
    # Its end is told as an event, after its start: no client shows it running forever.
    assert await compaction_events(root) == [
        ("started", "manual", task_id),
        ("skipped", "nothing to compact", task_id),
    ]
    await h.close()


async def test_a_summary_that_fails_tells_its_end(tmp_path: Path) -> None:
    router = Router(
        answers=[faux_message("a first answer"), faux_message("a second answer")],
        summaries=[faux_error("the summarizer is down")],
    )
    rig = rig_for(tmp_path, router)
    h = await rig.open()
    root = await h.root(agent={"model": SMALL.id})
    await (await root.submit("first question")).wait()
    await (await root.submit("second question")).wait()
    task_id = await root.compact()
    await root.wait_for_idle()
    started, ended = await compaction_events(root)
    assert started == ("started", "manual", task_id)
    assert ended[0] == "failed" and ended[2] == task_id
    assert "the summarizer is down" in str(ended[1])
    await h.close()


async def compaction_events(root: Any) -> list[tuple[object, object, object]]:
    """The conversation's compaction events: (state, reason, task)."""
    view = await root.view()
    items = view["docs"]["events"]["items"]
    return [(e["state"], e.get("reason"), e["task"]) for e in items if e["kind"] == "compaction"]


async def test_reset_starts_a_new_range_and_waits_for_a_running_answer(tmp_path: Path) -> None:
    release = asyncio.Event()
    router = Router(
        answers=[
            faux_message("first answer"),
            gated(release, faux_message("second answer")),
            faux_message("third answer"),
        ],
        summaries=[],
    )
    rig = rig_for(tmp_path, router)
    h = await rig.open()
    root = await h.root(agent={"model": SMALL.id})
    await (await root.submit("first question")).wait()
    sub = await root.submit("second question")
    await until(lambda: len(router.answer_requests) == 2)
    reset = await root.reset("Summary: two questions so far.")
    assert (await reset.status()).status == "queued"
    release.set()
    await sub.wait()
    assert (await reset.wait()).status == "done"
    items = await entries(h)
    assert kinds(items) == ["user", "assistant", "user", "assistant", "reset"]
    assert items[4].head == items[4].id
    ctx = await root.context()
    assert [m.content for m in ctx.messages] == ["Summary: two questions so far."]

    await root.reset()  # no handoff: an empty context
    assert (await root.context()).messages == []
    await (await root.submit("third question")).wait()
    assert contents(router.answer_requests[2]) == ["third question"]
    assert len(await entries(h)) == 8  # the history keeps everything
    await h.close()


async def test_bad_writes_compactions_and_resets_are_refused_with_nothing_written(
    tmp_path: Path,
) -> None:
    rig = rig_for(tmp_path, Router([], []))
    h = await rig.open()
    root = await h.root(agent={"model": SMALL.id})
    commits = rig.commits
    for kind in ("compaction", "reset", "system", "user"):
        with pytest.raises(ValueError, match="application kind"):
            await root.write(kind)
    with pytest.raises(ValueError, match="valid message"):
        await root.write("note", message={"role": "narrator", "content": "hi"})
    with pytest.raises(ValueError, match="instructions"):
        await root.compact(5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="handoff"):
        await root.reset(["x"])  # type: ignore[arg-type]
    assert rig.commits == commits and await entries(h) == []
    await root.write("note", message={"role": "user", "content": "an aside"})
    assert [m.content for m in (await root.context()).messages] == ["an aside"]
    await h.close()
