"""Context derivation: active ranges, edits, tool-result pairing, exclusions, prompt sections."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from core.faux import FauxModel, faux_message
from core.harness import Harness
from core.harness.context import MISSING_RESULT, ActiveRange, RangeCache, derive_context
from core.harness.messages import (
    AssistantMessage,
    SystemMessage,
    TextBlock,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    message_to_json,
)
from core.records import Entry
from runtimes.actor.clock import SystemClock
from tests.bench.perdure_side import _registry, build_recovery_store, open_storage
from tests.core.harness.support import MODEL, Rig


def entry(i: int, message: Any = None, kind: str = "custom", **kw: Any) -> Entry:
    return Entry(
        id=i,
        conversation_id=1,
        kind=kind,
        message=None if message is None else message_to_json(message),
        **kw,
    )


def user(text: str) -> UserMessage:
    return UserMessage(content=text)


def assistant(text: str = "", *calls: str, stop: str = "stop") -> AssistantMessage:
    blocks: list[Any] = [TextBlock(text=text)] if text else []
    blocks += [ToolCall(id=c, name="t", arguments={}) for c in calls]
    return AssistantMessage(content=blocks, stop_reason=stop if not calls else "tool_use")  # type: ignore[arg-type]


def result(call: str, text: str = "ok") -> ToolResultMessage:
    return ToolResultMessage(tool_call_id=call, tool_name="t", content=text)


def roles(messages: list[Any]) -> list[str]:
    def label(m: Any) -> str:
        if m.role == "assistant":
            return str(m.text)
        return str(getattr(m, "tool_call_id", "") or m.content)

    return [f"{m.role}:{label(m)}" for m in messages]


def derive(entries: list[Entry]) -> Any:
    active = ActiveRange(head=None)
    for e in entries:
        active.add(e)
    return derive_context(None, active.entries, active.messages)


def test_tool_results_follow_their_call_in_call_order_and_missing_ones_are_synthesized() -> None:
    view = derive(
        [
            entry(1, user("go")),
            entry(2, assistant("", "a", "b", "c")),
            entry(3, result("c")),
            entry(4, user("steer")),
            entry(5, result("a")),
            entry(6, result("zzz")),  # a result without a call: dropped
        ]
    )
    assert roles(view.messages) == [
        "user:go",
        "assistant:",
        "tool_result:a",
        "tool_result:b",
        "tool_result:c",
        "user:steer",
    ]
    missing = view.messages[3]
    assert missing.is_error and missing.content == MISSING_RESULT  # type: ignore[union-attr]
    assert missing.details == {"reason": "missing_result"}  # type: ignore[union-attr]


def test_aborted_and_failed_answers_stay_out_and_entries_without_messages_are_skipped() -> None:
    view = derive(
        [
            entry(1, user("q")),
            entry(2, assistant("half", stop="aborted")),
            entry(3, assistant("broken", stop="error")),
            entry(4, None, kind="note"),
            entry(5, assistant("answer")),
        ]
    )
    assert roles(view.messages) == ["user:q", "assistant:answer"]
    assert len(view.entries) == 5  # the raw entries remain


def test_the_newest_edit_per_target_wins_omit_or_replace() -> None:
    view = derive(
        [
            entry(1, user("secret")),
            entry(2, user("keep")),
            entry(3, None, kind="edit", edits=[{"target": 1, "action": "omit"}]),
            entry(
                4,
                None,
                kind="edit",
                edits=[
                    {
                        "target": 1,
                        "action": "replace",
                        "messages": [message_to_json(user("[redacted]"))],
                    }
                ],
            ),
            entry(5, None, kind="edit", edits=[{"target": 2, "action": "omit"}]),
        ]
    )
    assert roles(view.messages) == ["user:[redacted]"]


def test_a_system_entry_preceded_only_by_users_moves_to_the_front_and_sections_fold() -> None:
    view = derive(
        [
            entry(1, user("hi")),
            entry(
                2,
                SystemMessage(content="base"),
                kind="system",
                data={"sections": {"a": "A", "b": "B"}, "baseline": True},
            ),
            entry(3, assistant("hello")),
            entry(
                4,
                SystemMessage(content="delta"),
                kind="system",
                data={"sections": {"a": None, "c": "C"}},
            ),
        ]
    )
    assert roles(view.messages) == ["system:base", "user:hi", "assistant:hello", "system:delta"]
    assert view.sections == {"b": "B", "c": "C"}


# --------------------------------------------------------------------------- incremental == full

steps = st.lists(
    st.one_of(
        st.tuples(st.just("user"), st.sampled_from("xyz")),
        st.tuples(
            st.just("assistant"), st.lists(st.sampled_from("abcde"), max_size=3, unique=True)
        ),
        st.tuples(st.just("result"), st.sampled_from("abcdef")),
        st.tuples(st.just("aborted"), st.just("")),
        st.tuples(st.just("system"), st.sampled_from(["k1", "k2"])),
        st.tuples(st.just("view"), st.just("")),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(steps)
def test_incremental_views_equal_full_derivation(script: list[tuple[str, Any]]) -> None:
    active = ActiveRange(head=None)
    next_id = 1
    for op, arg in script:
        if op == "view":
            fast = active.view(None)
            full = derive_context(None, list(active.entries), list(active.messages))
            assert fast.messages == full.messages and fast.sections == full.sections
            continue
        if op == "user":
            e = entry(next_id, user(arg))
        elif op == "assistant":
            e = entry(next_id, assistant("t", *arg) if arg else assistant("t"))
        elif op == "result":
            e = entry(next_id, result(arg))
        elif op == "aborted":
            e = entry(next_id, assistant("cut", stop="aborted"))
        else:
            e = entry(
                next_id, SystemMessage(content=arg), kind="system", data={"sections": {arg: arg}}
            )
        active.add(e)
        next_id += 1
    fast = active.view(None)
    full = derive_context(None, list(active.entries), list(active.messages))
    assert fast.messages == full.messages and fast.sections == full.sections
    cut = active.view(next_id // 2)
    assert (
        cut.messages
        == derive_context(
            None,
            [e for e in active.entries if e.id <= next_id // 2],
            [
                m
                for e, m in zip(active.entries, active.messages, strict=True)
                if e.id <= next_id // 2
            ],
        ).messages
    )


@settings(max_examples=300, deadline=None)
@given(steps, steps)
def test_incremental_views_of_a_compacted_range_equal_full_derivation(
    kept: list[tuple[str, Any]], later: list[tuple[str, Any]]
) -> None:
    """A summary is committed after the entries it keeps (their ids are older): folding
    it must not give up the incremental path, and views must stay exact."""
    head = sum(op != "view" for op, _ in kept) + 1
    active = ActiveRange(head=head)
    next_id = 1

    def check() -> None:
        fast = active.view(None)
        full = derive_context(head, list(active.entries), list(active.messages))
        assert fast.messages == full.messages and fast.sections == full.sections
        assert fast.prompted == full.prompted

    for op, arg in [*kept, ("summary", ""), *later]:
        if op == "view":
            check()
            continue
        if op == "summary":
            assert next_id == head
            e = entry(next_id, user("the summary"), kind="compaction", head=1)
        elif op == "user":
            e = entry(next_id, user(arg))
        elif op == "assistant":
            e = entry(next_id, assistant("t", *arg) if arg else assistant("t"))
        elif op == "result":
            e = entry(next_id, result(arg))
        elif op == "aborted":
            e = entry(next_id, assistant("cut", stop="aborted"))
        else:
            e = entry(
                next_id, SystemMessage(content=arg), kind="system", data={"sections": {arg: arg}}
            )
        active.add(e)
        next_id += 1
    check()
    assert not active._full_only  # the summary joined the flattened prefix


def test_a_range_rebased_on_a_new_head_marker_equals_the_reloaded_range() -> None:
    """A head marker committed: the range built from the kept entries in memory is the
    one a reload would build from storage (entries from the marker's start on); a marker
    whose start the range may not hold (or older than its head) asks for the reload."""
    old = ActiveRange(head=None)
    for e in [
        entry(1, user("u1")),
        entry(2, assistant("a1", "c1")),
        entry(3, result("c1")),
        entry(4, user("u2")),
        entry(5, AssistantMessage(content=[TextBlock(text="a2")], usage={"input": 7})),
        entry(6, SystemMessage(content="s"), kind="system", data={"sections": {"x": "s"}}),
        entry(7, user("u3")),
    ]:
        old.add(e)
    marker = entry(9, user("summary"), kind="compaction", head=4)
    old.add(entry(8, user("u4")))  # committed before the marker, after the cut
    rebased = old.rebased(marker)
    assert rebased is not None
    reloaded = ActiveRange(head=9)
    for e in [e for e in old.entries if e.id >= 4] + [marker]:
        reloaded.add(e)
    assert rebased.ids == reloaded.ids == [4, 5, 6, 7, 8, 9]
    assert rebased.messages == reloaded.messages  # usage of the kept answer dropped too
    fast, full = rebased.view(None), reloaded.view(None)
    assert (fast.messages, fast.sections) == (full.messages, full.sections)
    assert old.rebased(entry(10, user("reset"), kind="reset", head=10)) is not None
    assert old.rebased(entry(10, user("s"), kind="compaction", head=0)) is None  # not held
    assert rebased.rebased(entry(8, user("s"), kind="compaction", head=8)) is None  # older


def test_the_range_cache_drops_a_settled_conversations_range_only_over_its_limit() -> None:
    cache = RangeCache(limit=2)
    one, two, three = ActiveRange(head=None), ActiveRange(head=None), ActiveRange(head=None)
    cache.keep(1, one)
    cache.keep(2, two)
    cache.settled(1)  # within the limit: kept
    cache.keep(3, three)  # a running conversation's range is kept beyond it
    assert (cache.get(1), cache.get(2), cache.get(3), len(cache)) == (one, two, three, 3)
    cache.settled(2)
    assert (cache.get(2), len(cache)) == (None, 2)
    cache.settled(1)  # at the limit again: kept
    cache.drop(3)
    assert cache.get(3) is None and cache.get(1) is one


async def test_a_conversation_whose_range_was_dropped_asks_with_its_whole_context(
    tmp_path: Path,
) -> None:
    """More conversations than the harness keeps ranges of: each reloads its range from
    storage, and every request still carries the conversation's full history."""
    rig = Rig(tmp_path, "sqlite", steps=[faux_message(f"answer {i}") for i in range(6)])
    h = await rig.open()
    h._ranges.limit = 1
    a = await h.root(agent={"model": MODEL})
    b = await h.create_conversation(agent={"model": MODEL})
    for turn in range(3):
        for name, conversation in (("a", a), ("b", b)):
            record = await (await conversation.submit(f"{name}{turn}")).wait()
            assert record.status == "done"
    assert len(h._ranges) == 1
    users = [
        [m.content for m in request.messages if m.role == "user"]
        for request in rig.faux.state.requests
    ]
    assert users[-2] == ["a0", "a1", "a2"] and users[-1] == ["b0", "b1", "b2"]
    await h.close()


async def test_loading_a_long_range_gives_the_loop_back_between_pages(tmp_path: Path) -> None:
    """A conversation's range is read 500 entries a page; on a storage that answers
    without suspending (MemoryStorage here, a Durable Object's SQL there) the load still
    lets other ready work run between pages, so the request that started a turn is
    answered before the turn has read a long transcript (issue 36)."""
    rig = Rig(tmp_path, "memory")
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    for n in range(1_100):
        await root.write("note", data={"n": n})
    await h.close()
    h = await rig.open()  # a fresh harness: no range in memory
    await h.root(agent={"model": MODEL})
    h._ranges.drop(root.id)
    progress: list[bool] = []

    async def other_work() -> None:  # queued behind the load's first step
        for _ in range(3):
            progress.append(load.done())
            await asyncio.sleep(0)

    load = asyncio.ensure_future(h.context(root.id))
    other = asyncio.ensure_future(other_work())
    await asyncio.gather(load, other)
    assert progress[:2] == [False, False], progress  # ran while the pages were read
    assert len([e for e in (await load).entries if e.kind == "note"]) == 1_100
    await h.close()


async def test_a_resumed_generation_reads_its_context_without_waiting_for_the_others(
    tmp_path: Path,
) -> None:
    """Only a new turn gives the loop back before it reads its context (a request is
    waiting for its answer); generations resumed together after a restart do not, so the
    first of them reaches its model call before the others have asked for their context
    (the recovery path's first phase, docs/performance.md). The store's generations
    were stopped in their first request, pinned without a commit: each prepares again,
    reading its context to plan and again to send."""
    path = tmp_path / "actor.sqlite"
    await build_recovery_store(path, conversations=6, entries=120, live=4)
    storage, _ = await open_storage(path)
    first_call: list[list[int]] = []
    reached = asyncio.Event()

    def step(request: Any, state: Any) -> Any:
        if not first_call:
            first_call.append(list(asked))
            reached.set()
        return faux_message("done")

    h = await Harness.open(
        storage, models=FauxModel(fallback=step), registry=_registry(), clock=SystemClock()
    )
    asked: list[int] = []
    context = h.context

    async def counted(conversation_id: int, cutoff: int | None = None) -> Any:
        asked.append(conversation_id)  # a resumed generation asks for its context
        return await context(conversation_id, cutoff)

    h.context = counted  # type: ignore[method-assign]
    h.resume()
    await asyncio.wait_for(reached.wait(), 30)
    (conversations,) = first_call
    assert len(conversations) == 2 and len(set(conversations)) == 1, conversations
    await h.close()
