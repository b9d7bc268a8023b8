"""Both model adapters against a real OpenAI-compatible HTTP server on 127.0.0.1.

Every test runs twice (``subject`` is parametrized): once through litellm, once through
the plain httpx adapter. Nothing is mocked: requests cross a real socket and the server
records what it received.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time

import pytest

from core.harness.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from core.harness.models import (
    StreamStart,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    ToolSpec,
)
from core.tasks.signal import CancelSignal
from runtimes.models import Pricing
from tests.models.fake_openai import (
    Fail,
    FakeOpenAI,
    Stream,
    context_overflow_body,
    finish,
    reasoning,
    text,
    tool_call,
    usage,
)
from tests.models.support import (
    INFO,
    MODEL_ID,
    REMOTE_NAME,
    Subject,
    collect,
    collect_until_error,
    done,
    of_type,
    request,
)

# --------------------------------------------------------------------------- answers


async def test_streams_text_then_one_done(subject: Subject, server: FakeOpenAI) -> None:
    server.script(Stream([text("Hel"), text("lo"), text(" there"), finish("stop"), usage(12, 3)]))
    async with subject.models() as models:
        events = await collect(models.stream(request(), CancelSignal()))

    assert events[0] == StreamStart(MODEL_ID)
    assert [e.text for e in of_type(events, TextDelta)] == ["Hel", "lo", " there"]
    message = done(events).message
    assert message.content == [TextBlock(text="Hello there")]
    assert message.stop_reason == "stop"
    assert message.model == MODEL_ID
    assert message.usage.input == 12 and message.usage.output == 3
    assert len(server.received) == 1


async def test_assembles_tool_calls_from_fragments(subject: Subject, server: FakeOpenAI) -> None:
    server.script(
        Stream(
            [
                text("Let me look."),
                tool_call(0, id="call_a", name="read", arguments=""),
                tool_call(0, arguments='{"pa'),
                tool_call(0, arguments='th": "src/m'),
                tool_call(0, arguments='ain.py", "limit": 20}'),
                tool_call(1, id="call_b", name="ls", arguments='{"path"'),
                tool_call(1, arguments=': "."}'),
                finish("tool_calls"),
                usage(40, 30),
            ]
        )
    )
    async with subject.models() as models:
        events = await collect(models.stream(request(), CancelSignal()))

    deltas = of_type(events, ToolCallDelta)
    assert deltas[0].index == 0 and deltas[0].id == "call_a" and deltas[0].name == "read"
    by_index: dict[int, str] = {}
    for d in deltas:
        by_index[d.index] = by_index.get(d.index, "") + d.arguments
    assert json.loads(by_index[0]) == {"path": "src/main.py", "limit": 20}
    assert json.loads(by_index[1]) == {"path": "."}

    message = done(events).message
    assert message.stop_reason == "tool_use"
    assert message.text == "Let me look."
    assert message.tool_calls == [
        ToolCall(id="call_a", name="read", arguments={"path": "src/main.py", "limit": 20}),
        ToolCall(id="call_b", name="ls", arguments={"path": "."}),
    ]


async def test_streams_thinking_from_reasoning_content(
    subject: Subject, server: FakeOpenAI
) -> None:
    server.script(
        Stream(
            [
                reasoning("The user "),
                reasoning("says hi."),
                text("Hi!"),
                finish("stop"),
                usage(5, 9),
            ]
        )
    )
    async with subject.models() as models:
        events = await collect(models.stream(request(thinking="high"), CancelSignal()))

    assert [e.text for e in of_type(events, ThinkingDelta)] == ["The user ", "says hi."]
    message = done(events).message
    assert message.content[0] == ThinkingBlock(thinking="The user says hi.")
    assert message.content[1] == TextBlock(text="Hi!")
    assert server.last_body()["reasoning_effort"] == "high"


@pytest.mark.parametrize(
    ("finish_reason", "has_call", "expected"),
    [
        ("stop", False, "stop"),
        ("length", False, "length"),
        ("tool_calls", True, "tool_use"),
        ("length", True, "length"),
    ],
)
async def test_maps_finish_reasons(
    subject: Subject, server: FakeOpenAI, finish_reason: str, has_call: bool, expected: str
) -> None:
    chunks = [text("partial")]
    if has_call:
        chunks.append(tool_call(0, id="c1", name="ls", arguments="{}"))
    server.script(Stream([*chunks, finish(finish_reason), usage(1, 1)]))
    async with subject.models() as models:
        events = await collect(models.stream(request(), CancelSignal()))
    assert done(events).message.stop_reason == expected


async def test_usage_and_cost_from_configured_prices(subject: Subject, server: FakeOpenAI) -> None:
    server.script(Stream([text("ok"), finish("stop"), usage(1000, 200, cached=300)]))
    pricing = Pricing(input=2e-6, output=8e-6, cache_read=5e-7)
    async with subject.models(pricing=pricing) as models:
        events = await collect(models.stream(request(), CancelSignal()))

    got = done(events).message.usage
    assert (got.input, got.output, got.cache_read, got.cache_write) == (700, 200, 300, 0)
    assert got.cost == pytest.approx(700 * 2e-6 + 300 * 5e-7 + 200 * 8e-6)
    assert server.last_body()["stream_options"] == {"include_usage": True}


async def test_without_a_usage_chunk(subject: Subject, server: FakeOpenAI) -> None:
    server.script(Stream([text("ok"), finish("stop")]))
    async with subject.models(pricing=Pricing(input=1.0, output=1.0)) as models:
        events = await collect(models.stream(request(), CancelSignal()))
    got = done(events).message.usage
    if subject.kind == "http":
        assert got == Usage()
    else:
        # litellm estimates the usage with its bundled tokenizer when the server sends none.
        assert got.input > 0 and got.output > 0
        assert got.cost == got.input + got.output


# --------------------------------------------------------------------------- request shape


async def test_request_carries_messages_tools_and_limits(
    subject: Subject, server: FakeOpenAI
) -> None:
    server.script(Stream([text("done"), finish("stop"), usage(1, 1)]))
    messages: list[Message] = [
        SystemMessage(content="You are terse."),
        UserMessage(content="List the files."),
        AssistantMessage(
            content=[
                TextBlock(text="Listing."),
                ToolCall(id="c1", name="ls", arguments={"p": "."}),
            ],
            stop_reason="tool_use",
        ),
        ToolResultMessage(tool_call_id="c1", tool_name="ls", content="a.py\nb.py"),
        SystemMessage(content="Reminder: be brief."),
        UserMessage(content="Thanks"),
    ]
    tools = [
        ToolSpec(
            name="ls",
            description="List a directory",
            parameters={
                "type": "object",
                "properties": {"p": {"type": "string"}},
                "required": ["p"],
            },
        )
    ]
    async with subject.models() as models:
        await collect(
            models.stream(
                request(
                    messages,
                    tools=tools,
                    thinking="low",
                    max_tokens=500,
                    options={"temperature": 0.25},
                ),
                CancelSignal(),
            )
        )

    body = server.last_body()
    assert body["model"] == REMOTE_NAME
    assert body["stream"] is True
    assert body["max_tokens"] == 500
    assert body["reasoning_effort"] == "low"
    assert body["temperature"] == 0.25
    sent = body["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "system", "user"]
    assert sent[0]["content"] == "You are terse."
    assert sent[4]["content"] == "Reminder: be brief."
    assert sent[2]["tool_calls"][0]["id"] == "c1"
    assert sent[2]["tool_calls"][0]["function"]["name"] == "ls"
    assert json.loads(sent[2]["tool_calls"][0]["function"]["arguments"]) == {"p": "."}
    assert sent[3]["tool_call_id"] == "c1"
    assert sent[3]["content"] == "a.py\nb.py"
    assert not [k for m in sent for k in m if k.startswith("perdure_")]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "ls",
                "description": "List a directory",
                "parameters": tools[0].parameters,
            },
        }
    ]
    assert server.received[-1].headers["authorization"] == "Bearer sk-test"


async def test_max_tokens_defaults_to_and_is_capped_by_the_model_limit(
    subject: Subject, server: FakeOpenAI
) -> None:
    server.script(
        Stream([text("a"), finish("stop")]),
        Stream([text("b"), finish("stop")]),
    )
    async with subject.models() as models:
        await collect(models.stream(request(), CancelSignal()))
        assert server.last_body()["max_tokens"] == INFO.max_tokens
        assert "reasoning_effort" not in server.last_body()
        await collect(models.stream(request(max_tokens=10**6), CancelSignal()))
        assert server.last_body()["max_tokens"] == INFO.max_tokens


async def test_unlisted_option_fails_before_any_request(
    subject: Subject, server: FakeOpenAI
) -> None:
    async with subject.models() as models:
        events, error = await collect_until_error(
            models.stream(request(options={"api_base": "http://evil.example"}), CancelSignal())
        )
    assert events == []
    assert error is not None and not error.retryable and "api_base" in str(error)
    assert server.received == []


async def test_unknown_model(subject: Subject, server: FakeOpenAI) -> None:
    async with subject.models() as models:
        assert models.info(MODEL_ID) == INFO
        assert models.info("nope/nope") is None
        _, error = await collect_until_error(
            models.stream(request(model="nope/nope"), CancelSignal())
        )
        assert error is not None and not error.retryable
        _, error = await collect_until_error(models.fetch(MODEL_ID, "h", CancelSignal()))
        assert error is not None and "deferred" in str(error)
        await models.cancel_deferred(MODEL_ID, "h")
    assert server.received == []


# --------------------------------------------------------------------------- errors


OPENAI_RATE_LIMIT = {
    "error": {"message": "Rate limit reached for requests", "type": "requests", "code": "rate"}
}


@pytest.mark.parametrize(
    ("reply", "retryable", "overflow", "retry_after_ms"),
    [
        pytest.param(
            Fail(429, OPENAI_RATE_LIMIT, {"Retry-After": "3"}), True, False, 3000, id="429"
        ),
        pytest.param(
            Fail(429, OPENAI_RATE_LIMIT, {"retry-after-ms": "1500"}), True, False, 1500, id="429-ms"
        ),
        pytest.param(
            Fail(500, {"error": {"message": "boom", "type": "server_error"}}),
            True,
            False,
            None,
            id="500",
        ),
        pytest.param(
            Fail(529, {"error": {"message": "Overloaded", "type": "overloaded_error"}}),
            True,
            False,
            None,
            id="529",
        ),
        pytest.param(Fail(400, context_overflow_body()), False, True, None, id="400-context"),
        pytest.param(
            Fail(401, {"error": {"message": "Incorrect API key", "code": "invalid_api_key"}}),
            False,
            False,
            None,
            id="401",
        ),
        pytest.param(
            Fail(400, {"error": {"message": "max_tokens is too large: 99999"}}),
            False,
            False,
            None,
            id="400-other",
        ),
        pytest.param(
            Fail(404, {"error": {"message": "The model does not exist"}}),
            False,
            False,
            None,
            id="404",
        ),
    ],
)
async def test_classifies_error_answers(
    subject: Subject,
    server: FakeOpenAI,
    reply: Fail,
    retryable: bool,
    overflow: bool,
    retry_after_ms: int | None,
) -> None:
    server.script(reply)
    async with subject.models() as models:
        events, error = await collect_until_error(models.stream(request(), CancelSignal()))
    assert events == []
    assert error is not None
    assert (error.retryable, error.context_overflow) == (retryable, overflow)
    assert error.retry_after_ms == retry_after_ms
    assert len(server.received) == 1, "adapters must not retry on their own"


async def test_error_in_the_middle_of_the_stream(subject: Subject, server: FakeOpenAI) -> None:
    server.script(Stream([text("one "), text("two "), text("three"), finish("stop")], cut_after=2))
    async with subject.models() as models:
        events, error = await collect_until_error(models.stream(request(), CancelSignal()))
    assert [e.text for e in of_type(events, TextDelta)] == ["one ", "two "]
    assert error is not None and error.retryable and not error.context_overflow


async def test_error_event_after_the_200(subject: Subject, server: FakeOpenAI) -> None:
    failure = {"error": {"message": "The server had an error", "type": "server_error"}}
    server.script(Stream([text("so far"), failure, finish("stop")]))
    async with subject.models() as models:
        events, error = await collect_until_error(models.stream(request(), CancelSignal()))
    assert events[-1] == TextDelta("so far")
    assert error is not None and error.retryable and "The server had an error" in str(error)


async def test_connection_refused_is_retryable(subject: Subject) -> None:
    with socket.socket() as sock:  # a port nobody listens on once this closes
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with subject.models(base_url=f"http://127.0.0.1:{port}/v1") as models:
        events, error = await collect_until_error(models.stream(request(), CancelSignal()))
    assert events == []
    assert error is not None and error.retryable
    # One plain sentence, the same from both adapters: not litellm's "HTTP 500:
    # litellm.InternalServerError: InternalServerError: OpenAIException - Connection error."
    message = str(error)
    assert message.startswith("cannot reach the model server: "), message
    assert "HTTP 500" not in message and "InternalServerError" not in message, message


# --------------------------------------------------------------------------- cancellation


async def test_cancel_mid_stream_closes_the_connection(
    subject: Subject, server: FakeOpenAI
) -> None:
    server.script(Stream([text("tick")], delay=0.05, forever=True))
    signal = CancelSignal()
    events = []
    async with subject.models() as models:
        async for event in models.stream(request(), signal):
            events.append(event)
            if isinstance(event, TextDelta):
                cancelled_at = time.monotonic()
                signal.set("aborted")
        end = await asyncio.to_thread(server.wait_stream_end, 5.0)

    assert of_type(events, TextDelta), "the first delta arrived before the cancel"
    assert events[-1] == TextDelta("tick"), "no StreamDone after a cancel"
    assert end is not None and not end.completed, "the server saw the client leave"
    assert end.at - cancelled_at < 1.0


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param(Stream([text("late"), finish("stop")], delay=30), id="before-first-chunk"),
        pytest.param(Stream([text("late"), finish("stop")], stall=30), id="before-headers"),
    ],
)
async def test_cancel_while_waiting_for_the_server(
    subject: Subject, server: FakeOpenAI, reply: Stream
) -> None:
    server.script(reply)
    signal = CancelSignal()
    async with subject.models() as models:
        stream = models.stream(request(), signal)

        async def cancel_soon() -> None:
            await asyncio.sleep(0.3)
            signal.set("aborted")

        canceller = asyncio.create_task(cancel_soon())
        started = time.monotonic()
        events = await collect(stream)
        await canceller
        elapsed = time.monotonic() - started
        end = await asyncio.to_thread(server.wait_stream_end, 5.0)

    assert not of_type(events, TextDelta)
    assert elapsed < 2.0
    assert end is not None and not end.completed and end.chunks_sent == 0


async def test_signal_already_set_sends_nothing(subject: Subject, server: FakeOpenAI) -> None:
    signal = CancelSignal()
    signal.set("aborted")
    async with subject.models() as models:
        events = await collect(models.stream(request(), signal))
    assert events == []
    assert server.received == []


async def test_consumer_stopping_early_closes_the_connection(
    subject: Subject, server: FakeOpenAI
) -> None:
    server.script(Stream([text("tick")], delay=0.05, forever=True))
    async with subject.models() as models:
        stream = models.stream(request(), CancelSignal())
        async for event in stream:
            if isinstance(event, TextDelta):
                break
        await stream.aclose()  # type: ignore[attr-defined]
        end = await asyncio.to_thread(server.wait_stream_end, 5.0)
    assert end is not None and not end.completed
