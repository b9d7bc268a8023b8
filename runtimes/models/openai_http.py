"""The Models port over plain httpx, speaking OpenAI's streaming chat completions API.

This is the adapter for hosts where litellm cannot run (Cloudflare Python Workers), so
it depends on httpx and the standard library only. Any server that implements
``POST {base_url}/chat/completions`` with ``stream: true`` (OpenAI, Workers AI's and AI
Gateway's OpenAI-compatible endpoints, vLLM, Ollama, OpenRouter, ...) works.

The wire protocol: server-sent events whose ``data:`` payloads are
``chat.completion.chunk`` objects, ended by ``data: [DONE]``; with
``stream_options.include_usage`` the last chunk carries ``usage`` and no choices.
Costs come from the configured :class:`Pricing` only (there is no price map here).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncGenerator, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import httpx

from core.harness.models import (
    ModelError,
    ModelInfo,
    ModelRequest,
    Models,
    StreamDone,
    StreamEvent,
    StreamStart,
)
from runtimes.models._errors import (
    error_from_status,
    is_context_overflow,
    parse_error_body,
    transport_error,
)
from runtimes.models._streaming import StreamingModels
from runtimes.models._wire import (
    DEFAULT_OPTIONS,
    Assembler,
    ToolCallPart,
    check_info,
    request_body,
    usage_from_openai,
)
from runtimes.models.pricing import Pricing

__all__ = ["OpenAICompatibleModels", "OpenAIModel"]

_MAX_ERROR_BODY = 64 * 1024
_RESERVED_HEADERS = frozenset({"authorization", "content-type", "content-length", "host"})


@dataclass(frozen=True, slots=True)
class OpenAIModel:
    """How to reach one model over HTTP.

    ``base_url``: up to and including the API version, e.g. ``"https://api.openai.com/v1"``.
    ``model``: the name sent in the request body; defaults to ``info.id``.
    ``api_key``: sent as ``Authorization: Bearer``. ``headers``: further request headers.
    ``max_tokens_field``: OpenAI's reasoning models accept only ``max_completion_tokens``.
    ``include_usage``: ask for the final usage chunk (``stream_options``); turn it off for
    servers that reject the field (usage and cost are then zero).
    """

    info: ModelInfo
    base_url: str
    api_key: str | None = field(default=None, repr=False)
    model: str | None = None
    pricing: Pricing | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
    include_usage: bool = True

    def __post_init__(self) -> None:
        check_info(self.info)
        try:
            url = httpx.URL(self.base_url)
        except httpx.InvalidURL as error:
            raise ValueError(f"OpenAIModel.base_url is not a URL: {self.base_url!r}") from error
        if url.scheme not in ("http", "https") or not url.host:
            raise ValueError(f"OpenAIModel.base_url must be an http(s) URL, got {self.base_url!r}")
        if self.model is not None and not self.model.strip():
            raise ValueError("OpenAIModel.model must be a non-empty string when given")
        if self.max_tokens_field not in ("max_tokens", "max_completion_tokens"):
            raise ValueError(f"unknown max_tokens_field {self.max_tokens_field!r}")
        clash = sorted(k for k in self.headers if k.lower() in _RESERVED_HEADERS)
        if clash:
            raise ValueError(f"OpenAIModel.headers may not set {', '.join(clash)}")

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + "/chat/completions"

    @property
    def remote_model(self) -> str:
        return self.model or self.info.id


class OpenAICompatibleModels(StreamingModels["OpenAIModel"]):
    """:class:`core.harness.models.Models` over one ``httpx.AsyncClient``.

    ``transport``: the httpx transport to use (tests inject one; Workers use the
    platform's); the adapter owns it and closes it in :meth:`aclose`.
    ``allowed_options``: accepted :attr:`ModelRequest.options` keys. ``timeout``: seconds
    to connect and per read, unless the request's ``timeout`` option says otherwise.

    The client is created on first use and belongs to that event loop; close it with
    :meth:`aclose` (or ``async with``) before the loop ends.

    ``stream`` has the same contract as the litellm adapter: :class:`StreamStart` once
    the server answered 200, deltas, one :class:`StreamDone`; failures raise
    :class:`ModelError` (classified by status code and error body, see
    :mod:`runtimes.models._errors`); when ``signal`` fires the response is closed (the
    connection dropped) and the iterator ends without :class:`StreamDone` and without
    raising. Nothing is retried here.
    """

    def __init__(
        self,
        models: Mapping[str, OpenAIModel],
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        allowed_options: Iterable[str] = DEFAULT_OPTIONS,
        timeout: float = 600.0,
    ) -> None:
        if not isinstance(timeout, int | float) or isinstance(timeout, bool) or timeout <= 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        for model_id, route in models.items():
            if not isinstance(route, OpenAIModel):
                raise TypeError(f"model {model_id!r}: expected an OpenAIModel")
            if route.info.id != model_id:
                raise ValueError(f"model {model_id!r} is described by ModelInfo {route.info.id!r}")
        self._routes = dict(models)
        self._transport = transport
        self._allowed = frozenset(allowed_options)
        self._timeout = float(timeout)
        self._client: httpx.AsyncClient | None = None
        self._closed = False

    async def __aenter__(self) -> OpenAICompatibleModels:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the client and its connections; later requests raise :class:`ModelError`."""
        self._closed = True
        if self._client is not None:
            await self._client.aclose()
        elif self._transport is not None:
            await self._transport.aclose()

    # ------------------------------------------------------------------ internals

    def _http(self) -> httpx.AsyncClient:
        if self._closed:
            raise ModelError("the model client is closed")
        if self._client is None:
            self._client = httpx.AsyncClient(transport=self._transport)
        return self._client

    async def _events(self, request: ModelRequest) -> AsyncGenerator[StreamEvent, None]:
        route = self._routes.get(request.model)
        if route is None:
            raise ModelError(f"model {request.model!r} is not served by this adapter")
        body, timeout = request_body(request, route.info, self._allowed)
        if route.max_tokens_field != "max_tokens":
            body[route.max_tokens_field] = body.pop("max_tokens")
        body["model"] = route.remote_model
        body["stream"] = True
        if route.include_usage:
            body["stream_options"] = {"include_usage": True}
        headers = {"Accept": "text/event-stream", **route.headers}
        if route.api_key:
            headers["Authorization"] = f"Bearer {route.api_key}"
        client = self._http()

        assembler = Assembler()
        done = False
        try:
            async with client.stream(
                "POST",
                route.url,
                json=body,
                headers=headers,
                timeout=httpx.Timeout(timeout if timeout is not None else self._timeout),
            ) as response:
                if not response.is_success:
                    raise await _status_error(response)
                yield StreamStart(request.model)
                async with contextlib.aclosing(_sse_data(response)) as payloads:
                    async for payload in payloads:
                        if payload.strip() == "[DONE]":
                            done = True
                            break
                        for event in _apply(assembler, _decode(payload)):
                            yield event
        except httpx.ConnectError as error:  # no server answered: the same words as litellm's
            raise transport_error("cannot reach the model server", error) from error
        except httpx.TransportError as error:
            # A cut after the finish reason loses at most the usage chunk: keep the answer.
            if assembler.finish_reason is None:
                raise transport_error("model stream failed", error) from error
        except httpx.HTTPError as error:  # decoding, redirects: retrying will not help
            raise ModelError(f"model stream failed: {type(error).__name__}: {error}") from error
        if not done and assembler.finish_reason is None:
            raise ModelError("the model stream ended before the response finished", retryable=True)
        if assembler.usage is not None and route.pricing is not None:
            usage = assembler.usage
            assembler.usage = usage.model_copy(update={"cost": route.pricing.cost(usage)})
        yield StreamDone(assembler.finish(request.model))


if TYPE_CHECKING:  # mypy proves the adapter satisfies the port

    def _conforms(models: OpenAICompatibleModels) -> Models:
        return models


async def _status_error(response: httpx.Response) -> ModelError:
    # Bounded: an error body is diagnostics, not worth unbounded memory. Stopping early is
    # fine, the caller's ``async with`` closes the response.
    raw = bytearray()
    async for piece in response.aiter_bytes():
        raw += piece
        if len(raw) >= _MAX_ERROR_BODY:
            break
    message, code = parse_error_body(bytes(raw[:_MAX_ERROR_BODY]))
    return error_from_status(response.status_code, message, code=code, headers=response.headers)


async def _sse_data(response: httpx.Response) -> AsyncGenerator[str, None]:
    """The ``data`` of each server-sent event (multi-line data joined by newlines);
    comments and other fields (``event``, ``id``, ``retry``) are ignored."""
    lines: list[str] = []
    async for line in response.aiter_lines():
        if not line:
            if lines:
                yield "\n".join(lines)
                lines = []
        elif line.startswith("data:"):
            value = line[5:]
            lines.append(value[1:] if value.startswith(" ") else value)
    if lines:
        yield "\n".join(lines)


def _decode(payload: str) -> dict[str, Any]:
    try:
        chunk = json.loads(payload)
    except ValueError as error:
        raise ModelError(f"malformed stream chunk: {payload[:200]!r}") from error
    if not isinstance(chunk, dict):
        raise ModelError(f"malformed stream chunk: {payload[:200]!r}")
    if chunk.get("error"):
        # Providers report failures after the 200 this way; they are their side's fault,
        # so retryable unless the prompt itself was too long.
        message, code = parse_error_body(json.dumps(chunk))
        if is_context_overflow(message, code):
            raise ModelError(f"model stream failed: {message}", context_overflow=True)
        raise ModelError(f"model stream failed: {message}", retryable=True)
    return chunk


def _apply(assembler: Assembler, chunk: Mapping[str, Any]) -> list[StreamEvent]:
    """Fold one decoded chunk into ``assembler``; the events it produces."""
    usage = chunk.get("usage")
    if isinstance(usage, Mapping):
        assembler.usage = usage_from_openai(usage)
    choices = chunk.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        return []
    choice = choices[0]
    finish = choice.get("finish_reason")
    if isinstance(finish, str) and finish:
        assembler.finish_reason = finish
    delta = choice.get("delta")
    if not isinstance(delta, Mapping):
        return []
    thinking = delta.get("reasoning_content")
    if not isinstance(thinking, str):
        thinking = delta.get("reasoning")
    return assembler.delta(
        text=_str(delta.get("content")),
        thinking=_str(thinking),
        tool_calls=[_tool_part(call) for call in delta.get("tool_calls") or []],
    )


def _tool_part(call: Any) -> ToolCallPart:
    if not isinstance(call, Mapping):
        raise ModelError(f"malformed tool call delta: {call!r}")
    function = call.get("function")
    function = function if isinstance(function, Mapping) else {}
    index = call.get("index", 0)
    return ToolCallPart(
        index=index if isinstance(index, int) else -1,
        id=_str(call.get("id")),
        name=_str(function.get("name")),
        arguments=_str(function.get("arguments")) or "",
    )


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None
