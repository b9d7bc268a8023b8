"""The scripted FauxModel: what tests and demos rely on."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from core.faux import (
    FauxModel,
    FauxReply,
    FauxState,
    faux_block,
    faux_deferred,
    faux_error,
    faux_message,
    faux_tool_call,
)
from core.harness import ModelError, ModelRequest, UserMessage
from core.harness.messages import ThinkingBlock, message_chars
from core.harness.models import Deferred, StreamDone, TextDelta, ThinkingDelta, ToolCallDelta
from core.tasks import CancelSignal

REQUEST = ModelRequest(model="faux/faux-1", messages=[UserMessage(content="hello")])


async def collect(stream: Any) -> list[Any]:
    return [event async for event in stream]


async def test_canned_messages_stream_as_deltas_and_end_with_the_message() -> None:
    faux = FauxModel(
        [
            faux_message(
                ThinkingBlock(thinking="hmm"), "hi there", faux_tool_call("t", {"a": 1}, id="c")
            )
        ],
        token_size=2,
    )
    events = await collect(faux.stream(REQUEST, CancelSignal()))
    assert [e.text for e in events if isinstance(e, ThinkingDelta)] == ["hm", "m"]
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "hi there"
    calls = [e for e in events if isinstance(e, ToolCallDelta)]
    assert (calls[0].id, calls[0].name) == ("c", "t")
    assert "".join(c.arguments for c in calls) == '{"a": 1}'
    done = events[-1]
    assert isinstance(done, StreamDone) and done.message.stop_reason == "tool_use"
    assert done.message.usage.input > 0 and done.message.model == "faux/faux-1"
    assert faux.state.call_count == 1 and faux.state.requests == [REQUEST]


async def test_usage_estimates_each_request_whole_across_interleaved_conversations() -> None:
    # The estimator reuses the count of the prefix a conversation's requests share; with
    # several conversations taking turns, and one whose history is rewritten behind its
    # first message (as compaction does), each estimate is still that of the request.
    faux = FauxModel(fallback=faux_message("ok"))

    async def estimate(messages: list[Any]) -> int:
        request = ModelRequest(model="faux/faux-1", messages=messages)
        done = (await collect(faux.stream(request, CancelSignal())))[-1]
        return int(done.message.usage.input)

    def whole(messages: list[Any]) -> int:
        return sum(message_chars(m) for m in messages) // 4

    a = [UserMessage(content="a" * 40)]
    b = [UserMessage(content="b" * 400)]
    for n in range(6):
        a, b = [*a, UserMessage(content="x" * (8 * n))], [*b, UserMessage(content="y" * 80)]
        assert await estimate(a) == whole(a)
        assert await estimate(b) == whole(b)
    rewritten = [a[0], UserMessage(content="summary " * 3)]
    assert await estimate(rewritten) == whole(rewritten)
    assert await estimate(a[:2]) == whole(a[:2])


async def test_function_steps_see_the_request_and_errors_are_raised() -> None:
    def echo(request: ModelRequest, state: FauxState) -> Any:
        return faux_message(f"you said {request.messages[-1].content}")  # type: ignore[union-attr]

    faux = FauxModel(
        [echo, faux_error("slow down", retryable=True), faux_error("too long", overflow=True)]
    )
    done = (await collect(faux.stream(REQUEST, CancelSignal())))[-1]
    assert done.message.text == "you said hello"
    for retryable, overflow in ((True, False), (False, True)):
        with pytest.raises(ModelError) as raised:
            await collect(faux.stream(REQUEST, CancelSignal()))
        assert (raised.value.retryable, raised.value.context_overflow) == (retryable, overflow)
    with pytest.raises(ModelError, match="no scripted response left"):
        await collect(faux.stream(REQUEST, CancelSignal()))


async def test_streams_can_fail_midway_block_until_cancelled_or_pace_tokens() -> None:
    faux = FauxModel(
        [
            FauxReply(faux_message("abcdefgh"), fail_after=2, error=ModelError("reset")),
            faux_block(),
        ],
        token_size=2,
    )
    seen: list[Any] = []

    async def drain() -> None:
        async for event in faux.stream(REQUEST, CancelSignal()):
            seen.append(event)

    with pytest.raises(ModelError, match="reset"):
        await drain()
    assert [e.text for e in seen if isinstance(e, TextDelta)] == ["ab", "cd"]
    signal = CancelSignal()
    blocked = asyncio.ensure_future(collect(faux.stream(REQUEST, signal)))
    await asyncio.sleep(0.01)
    assert not blocked.done()
    signal.set("aborted")
    assert not any(isinstance(e, StreamDone) for e in await blocked)

    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    paced = FauxModel([faux_message("abcdef")], token_size=2, tokens_per_second=50, sleep=sleep)
    await collect(paced.stream(REQUEST, CancelSignal()))
    assert waits == [0.02, 0.02, 0.02]


async def test_deferred_responses_need_fetches_and_can_be_cancelled() -> None:
    faux = FauxModel(
        [
            faux_deferred(faux_message("later"), pending=1, poll_after_ms=250),
            faux_deferred(faux_message("never")),
        ]
    )
    first = await collect(faux.stream(REQUEST, CancelSignal()))
    deferred = first[-1]
    assert isinstance(deferred, Deferred) and deferred.poll_after_ms == 250
    again = await collect(faux.fetch("faux/faux-1", deferred.handle, CancelSignal()))
    assert isinstance(again[-1], Deferred)
    ready = await collect(faux.fetch("faux/faux-1", deferred.handle, CancelSignal()))
    assert isinstance(ready[-1], StreamDone) and ready[-1].message.text == "later"
    assert faux.state.deferred_fetches == 2
    other = (await collect(faux.stream(REQUEST, CancelSignal())))[-1]
    await faux.cancel_deferred("faux/faux-1", other.handle)
    assert faux.state.cancelled_deferred == [other.handle]
    with pytest.raises(ModelError, match="unknown deferred"):
        await collect(faux.fetch("faux/faux-1", other.handle, CancelSignal()))
