"""The httpx adapter's own edges: SSE framing quirks, configuration, its transport.

The shared behaviour (text, tools, errors, cancellation) is covered against the real
server in ``test_adapters.py``; these tests feed exact bytes through the adapter's
injectable transport to pin down parsing details a well-behaved server never shows.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import pytest

from core.harness.messages import TextBlock, ThinkingBlock
from core.harness.models import ModelInfo, StreamDone, TextDelta, ThinkingDelta
from core.tasks.signal import CancelSignal
from runtimes.models import OpenAICompatibleModels, OpenAIModel, Pricing
from tests.models.fake_openai import FakeOpenAI, Stream, finish, text, usage
from tests.models.support import INFO, MODEL_ID, collect, collect_until_error, done, request

Handler = Callable[[httpx.Request], httpx.Response]


def sse(*payloads: str, sep: str = "\n\n") -> bytes:
    return "".join(f"data: {p}{sep}" for p in payloads).encode()


def chunk(delta: dict[str, object], finish_reason: str | None = None) -> str:
    return json.dumps({"choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]})


def adapter(handler: Handler, **route: object) -> OpenAICompatibleModels:
    model = OpenAIModel(info=INFO, base_url="https://llm.example/v1", **route)  # type: ignore[arg-type]
    return OpenAICompatibleModels({MODEL_ID: model}, transport=httpx.MockTransport(handler))


def answering(body: bytes, status: int = 200, seen: list[httpx.Request] | None = None) -> Handler:
    def handle(req: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(req)
        return httpx.Response(status, content=body, headers={"content-type": "text/event-stream"})

    return handle


async def test_sse_framing_quirks() -> None:
    body = (
        b": keep-alive comment\r\n\r\n"
        b"event: message\r\n"
        + sse(chunk({"content": "a"}), sep="\r\n\r\n")
        + b"data:"
        + chunk({"content": "b"}).encode()
        + b"\n\n"  # no space after the colon
        + sse(chunk({"reasoning": "why"}))  # OpenRouter/Ollama name for reasoning text
        + sse(chunk({}, "stop"))
        + sse("[DONE]")
    )
    async with adapter(answering(body)) as models:
        events = await collect(models.stream(request(), CancelSignal()))
    assert [e for e in events if isinstance(e, TextDelta | ThinkingDelta)] == [
        TextDelta("a"),
        TextDelta("b"),
        ThinkingDelta("why"),
    ]
    assert done(events).message.content == [ThinkingBlock(thinking="why"), TextBlock(text="ab")]


async def test_end_without_done_marker_after_a_finish_reason_is_an_answer() -> None:
    body = sse(chunk({"content": "ok"}), chunk({}, "stop"))
    async with adapter(answering(body)) as models:
        events = await collect(models.stream(request(), CancelSignal()))
    assert done(events).message.text == "ok"


async def test_end_without_finish_reason_is_a_retryable_error() -> None:
    body = sse(chunk({"content": "cut"}))
    async with adapter(answering(body)) as models:
        events, error = await collect_until_error(models.stream(request(), CancelSignal()))
    assert events[-1] == TextDelta("cut")
    assert error is not None and error.retryable


@pytest.mark.parametrize(
    ("error", "retryable", "overflow"),
    [
        ({"message": "The server had an error", "type": "server_error"}, True, False),
        ({"message": "x", "code": "context_length_exceeded"}, False, True),
    ],
)
async def test_error_event_after_the_200(
    error: dict[str, object], retryable: bool, overflow: bool
) -> None:
    body = sse(chunk({"content": "so far"}), json.dumps({"error": error}))
    async with adapter(answering(body)) as models:
        events, got = await collect_until_error(models.stream(request(), CancelSignal()))
    assert events[-1] == TextDelta("so far")
    assert got is not None and (got.retryable, got.context_overflow) == (retryable, overflow)


async def test_malformed_chunk_is_not_retryable() -> None:
    async with adapter(answering(sse("{not json"))) as models:
        _, error = await collect_until_error(models.stream(request(), CancelSignal()))
    assert error is not None and not error.retryable and "malformed" in str(error)


async def test_plain_text_error_body_and_http_date_retry_after() -> None:
    def handle(req: httpx.Request) -> httpx.Response:
        return httpx.Response(
            503,
            text="upstream unavailable",
            headers={"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"},
        )

    async with adapter(handle) as models:
        _, error = await collect_until_error(models.stream(request(), CancelSignal()))
    assert error is not None and error.retryable
    assert "upstream unavailable" in str(error)
    assert error.retry_after_ms == 0, "a date in the past means: retry now"


async def test_route_settings_shape_the_request() -> None:
    seen: list[httpx.Request] = []
    body = sse(chunk({"content": "x"}, "stop"), "[DONE]")
    async with adapter(
        answering(body, seen=seen),
        model="@cf/meta/llama",
        api_key="k-1",
        headers={"cf-aig-authorization": "Bearer gw"},
        max_tokens_field="max_completion_tokens",
        include_usage=False,
    ) as models:
        await collect(models.stream(request(max_tokens=77), CancelSignal()))
    sent = json.loads(seen[0].content)
    assert seen[0].url == "https://llm.example/v1/chat/completions"
    assert seen[0].headers["authorization"] == "Bearer k-1"
    assert seen[0].headers["cf-aig-authorization"] == "Bearer gw"
    assert sent["model"] == "@cf/meta/llama"
    assert sent["max_completion_tokens"] == 77 and "max_tokens" not in sent
    assert "stream_options" not in sent


def test_configuration_is_validated() -> None:
    with pytest.raises(ValueError, match="base_url"):
        OpenAIModel(info=INFO, base_url="ftp://x")
    with pytest.raises(ValueError, match="may not set"):
        OpenAIModel(info=INFO, base_url="https://x/v1", headers={"Authorization": "x"})
    with pytest.raises(ValueError, match="positive"):
        OpenAIModel(info=ModelInfo(id="m", context_window=0, max_tokens=1), base_url="https://x")
    with pytest.raises(ValueError, match="described by"):
        OpenAICompatibleModels({"other": OpenAIModel(info=INFO, base_url="https://x/v1")})
    route = OpenAIModel(info=INFO, base_url="https://x/v1", api_key="sk-secret")
    assert "sk-secret" not in repr(route)


async def test_closed_adapter_refuses_requests() -> None:
    models = adapter(answering(sse("[DONE]")))
    await models.aclose()
    _, error = await collect_until_error(models.stream(request(), CancelSignal()))
    assert error is not None and "closed" in str(error)


async def test_injected_real_transport(server: FakeOpenAI) -> None:
    server.script(Stream([text("via transport"), finish("stop"), usage(3, 2)]))
    route = OpenAIModel(
        info=INFO, base_url=server.base_url, model="fake-1", pricing=Pricing(input=1, output=10)
    )
    transport = httpx.AsyncHTTPTransport(retries=0)
    async with OpenAICompatibleModels({MODEL_ID: route}, transport=transport) as models:
        events = await collect(models.stream(request(), CancelSignal()))
    final = events[-1]
    assert isinstance(final, StreamDone)
    assert final.message.text == "via transport"
    assert final.message.usage.cost == 3 * 1 + 2 * 10
