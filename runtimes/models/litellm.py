"""The Models port over litellm (CPython hosts).

:class:`LitellmModels` serves a fixed set of model ids, each described by a
:class:`LitellmModel` (its :class:`ModelInfo`, the litellm model string, endpoint,
credentials and optional per-token :class:`Pricing`). A request is sent with
``litellm.acompletion(stream=True)`` and streamed back as perdure events.

Importing this module configures litellm for an embedded, offline use. The settings
are process-wide environment variables that litellm reads when it is first imported, so
they only take effect if nothing imported litellm earlier; they are set with
``setdefault``, so an operator's explicit value wins:

* ``LITELLM_LOCAL_MODEL_COST_MAP=True``: use the bundled price map instead of fetching
  one from GitHub at import;
* ``LITELLM_MODE=PRODUCTION``: do not load a ``.env`` file from the working directory
  into ``os.environ`` (litellm's default "DEV" mode does);
* ``LITELLM_LOG=ERROR``: litellm's own log handler prints errors only.

and then ``litellm.suppress_debug_info = True`` (no "Give Feedback / Get Help" banner on
stdout for every exception). litellm registers no callbacks or telemetry unless
configured to; this module adds none. Importing litellm itself also, process-wide, adds
three ``warnings`` ignore filters (pydantic deprecations it triggers), sets the
``httpx`` logger to WARNING and adds secret-redaction filters to a few loggers.

The adapter never retries (``max_retries=0``): the harness owns retries and backoff.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

# Must precede the litellm import, which reads them (see the module docstring).
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_LOG", "ERROR")
os.environ.setdefault("LITELLM_MODE", "PRODUCTION")

import httpx
import litellm
import openai
from litellm.exceptions import APIConnectionError, ContextWindowExceededError, Timeout
from litellm.llms.custom_httpx import async_client_cleanup

from core.harness.messages import Usage
from core.harness.models import (
    ModelError,
    ModelInfo,
    ModelRequest,
    Models,
    StreamDone,
    StreamEvent,
    StreamStart,
)
from runtimes.models._errors import error_from_status, transport_error
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

__all__ = ["LitellmModel", "LitellmModels", "close_litellm_clients"]

litellm.suppress_debug_info = True

_log = logging.getLogger(__name__)

# Keys the adapter sets itself; ``LitellmModel.extra`` may not replace them.
_RESERVED = frozenset(
    {
        "model",
        "messages",
        "stream",
        "stream_options",
        "tools",
        "max_tokens",
        "reasoning_effort",
        "max_retries",
        "num_retries",
        "api_base",
        "api_key",
        "drop_params",
    }
)


@dataclass(frozen=True, slots=True)
class LitellmModel:
    """How to reach one model through litellm.

    ``model``: the litellm model string (``"openai/gpt-4o-mini"``,
    ``"anthropic/claude-..."``); defaults to ``info.id``. Use it to serve an id under a
    different name, or an OpenAI-compatible server as ``"openai/<name>"`` + ``api_base``.
    ``pricing``: per-token prices; when set they decide the cost (so models litellm does
    not know get one), otherwise litellm's bundled price map does, and a model missing
    from it costs 0.0.
    ``drop_params``: let litellm drop parameters the model does not support (e.g.
    ``reasoning_effort`` on a non-reasoning model) instead of failing the request.
    ``extra``: further ``litellm.acompletion`` keyword arguments from the operator
    (``api_version``, ``extra_headers``, ...).
    """

    info: ModelInfo
    model: str | None = None
    api_base: str | None = None
    api_key: str | None = field(default=None, repr=False)
    pricing: Pricing | None = None
    drop_params: bool = True
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_info(self.info)
        if self.model is not None and not self.model.strip():
            raise ValueError("LitellmModel.model must be a non-empty string when given")
        clash = sorted(_RESERVED & set(self.extra))
        if clash:
            raise ValueError(f"LitellmModel.extra may not set {', '.join(clash)}")

    @property
    def litellm_model(self) -> str:
        return self.model or self.info.id


class LitellmModels(StreamingModels["LitellmModel"]):
    """:class:`core.harness.models.Models` over ``litellm.acompletion``.

    ``models`` maps each served id to its :class:`LitellmModel` (a bare
    :class:`ModelInfo` means "litellm knows this id, no extra settings").
    ``allowed_options``: the :attr:`ModelRequest.options` keys accepted (see
    :data:`runtimes.models._wire.DEFAULT_OPTIONS`); others fail the request.
    ``timeout``: seconds litellm waits to connect and for each read, unless the request's
    ``timeout`` option (or the model's ``extra["timeout"]``) says otherwise.

    ``stream`` yields :class:`StreamStart` once the provider accepted the request, the
    deltas as they arrive, then one :class:`StreamDone`. Failures raise
    :class:`ModelError` (before or after some deltas). When ``signal`` fires, the pending
    read is cancelled, the HTTP response is closed (the provider sees the connection
    drop) and the iterator ends without a :class:`StreamDone` and without raising; events
    already yielded stand. If ``signal`` is already set, no request is sent.
    """

    def __init__(
        self,
        models: Mapping[str, ModelInfo | LitellmModel],
        *,
        allowed_options: Iterable[str] = DEFAULT_OPTIONS,
        timeout: float = 600.0,
    ) -> None:
        if not isinstance(timeout, int | float) or isinstance(timeout, bool) or timeout <= 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        routes: dict[str, LitellmModel] = {}
        for model_id, entry in models.items():
            route = entry if isinstance(entry, LitellmModel) else LitellmModel(info=entry)
            if route.info.id != model_id:
                raise ValueError(f"model {model_id!r} is described by ModelInfo {route.info.id!r}")
            routes[model_id] = route
        self._routes = routes
        self._allowed = frozenset(allowed_options)
        self._timeout = float(timeout)

    # ------------------------------------------------------------------ internals

    async def _events(self, request: ModelRequest) -> AsyncGenerator[StreamEvent, None]:
        route = self._routes.get(request.model)
        if route is None:
            raise ModelError(f"model {request.model!r} is not served by this adapter")
        body, timeout = request_body(request, route.info, self._allowed)
        kwargs: dict[str, Any] = {**route.extra, **body}
        kwargs.update(
            model=route.litellm_model,
            stream=True,
            stream_options={"include_usage": True},
            max_retries=0,
            drop_params=route.drop_params,
            timeout=timeout if timeout is not None else route.extra.get("timeout", self._timeout),
        )
        if route.api_base is not None:
            kwargs["api_base"] = route.api_base
        if route.api_key is not None:
            kwargs["api_key"] = route.api_key

        try:
            response = await litellm.acompletion(**kwargs)
        except Exception as error:
            raise _model_error(error) from error
        if not isinstance(response, litellm.CustomStreamWrapper):
            raise ModelError(f"litellm answered {type(response).__name__}, not a stream")

        assembler = Assembler()
        raw_usage: Any = None
        try:
            yield StreamStart(request.model)
            chunks = aiter(response)
            while True:
                try:
                    chunk = await anext(chunks)
                except StopAsyncIteration:
                    break
                except Exception as error:
                    raise _model_error(error) from error
                parts = _Parts.of(chunk)
                if parts.usage is not None:
                    raw_usage = parts.usage
                if parts.finish_reason:
                    assembler.finish_reason = parts.finish_reason
                if parts.signature:
                    assembler.thinking_signature(parts.signature)
                for event in assembler.delta(
                    text=parts.text, thinking=parts.thinking, tool_calls=parts.tool_calls
                ):
                    yield event
        finally:
            # Idempotent; on cancellation this is what drops the connection. litellm
            # shields the close itself from further cancellation.
            await response.aclose()

        if raw_usage is not None:
            usage = _usage_of(raw_usage)
            cost = _cost(route, usage, raw_usage)
            assembler.usage = usage.model_copy(update={"cost": cost})
        yield StreamDone(assembler.finish(request.model))


async def close_litellm_clients() -> None:
    """Close the HTTP clients litellm cached for reuse, then forget them.

    litellm keeps its clients (and their pooled connections) in a process-wide cache,
    one set per event loop, shared by every caller in the process. Call this when the
    loop that made the requests is about to end (host shutdown, the end of a test's
    ``asyncio.run``); otherwise the pooled sockets are reclaimed by the garbage
    collector later, with ``ResourceWarning`` s. Later requests build fresh clients.
    """
    await _close_cached_clients()
    cache: Any = litellm.in_memory_llm_clients_cache  # untyped in litellm
    cache.flush_cache()


# --------------------------------------------------------------------------- helpers


if TYPE_CHECKING:  # mypy proves the adapter satisfies the port

    def _conforms(models: LitellmModels) -> Models:
        return models


# litellm leaves this one unannotated; give it its actual signature.
_close_cached_clients: Callable[[], Awaitable[None]] = (
    async_client_cleanup.close_litellm_async_clients
)


@dataclass(frozen=True, slots=True)
class _Parts:
    """The parts of one litellm chunk the adapter uses, with litellm's loose typing
    (pydantic objects whose fields may be missing or ``None``) kept in here."""

    text: str | None = None
    thinking: str | None = None
    signature: str | None = None
    tool_calls: tuple[ToolCallPart, ...] = ()
    finish_reason: str | None = None
    usage: Any = None

    @staticmethod
    def of(chunk: Any) -> _Parts:
        usage = getattr(chunk, "usage", None)
        choices = getattr(chunk, "choices", None) or []
        if not choices:
            return _Parts(usage=usage)
        choice = choices[0]
        delta = getattr(choice, "delta", None)
        calls: list[ToolCallPart] = []
        for call in _opt(delta, "tool_calls") or []:
            function = getattr(call, "function", None)
            calls.append(
                ToolCallPart(
                    index=getattr(call, "index", None) or 0,
                    id=_str_or_none(getattr(call, "id", None)),
                    name=_str_or_none(_opt(function, "name")),
                    arguments=_str_or_none(_opt(function, "arguments")) or "",
                )
            )
        signature = None
        for block in _opt(delta, "thinking_blocks") or []:
            if isinstance(block, Mapping) and isinstance(block.get("signature"), str):
                signature = block["signature"]
        return _Parts(
            text=_str_or_none(_opt(delta, "content")),
            thinking=_str_or_none(_opt(delta, "reasoning_content")),
            signature=signature,
            tool_calls=tuple(calls),
            finish_reason=_str_or_none(getattr(choice, "finish_reason", None)),
            usage=usage,
        )


def _opt(obj: Any, name: str) -> Any:
    return getattr(obj, name, None) if obj is not None else None


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _usage_of(raw: Any) -> Usage:
    dumped = raw.model_dump() if hasattr(raw, "model_dump") else raw
    return usage_from_openai(dumped if isinstance(dumped, Mapping) else {})


def _cost(route: LitellmModel, usage: Usage, raw_usage: Any) -> float:
    """USD for one response through litellm's cost calculator.

    With configured prices the token counts are passed Anthropic-style (uncached input
    plus separate cache counts), the form litellm's custom-price path prices without
    double counting. Otherwise litellm prices its own usage object from its map.
    """
    try:
        if route.pricing is not None:
            prompt_cost, completion_cost = litellm.cost_per_token(
                model=route.litellm_model,
                prompt_tokens=usage.input,
                completion_tokens=usage.output,
                cache_read_input_tokens=usage.cache_read,
                cache_creation_input_tokens=usage.cache_write,
                custom_cost_per_token={
                    "input_cost_per_token": route.pricing.input,
                    "output_cost_per_token": route.pricing.output,
                    "cache_read_input_token_cost": route.pricing.cache_read_price,
                    "cache_creation_input_token_cost": route.pricing.cache_write_price,
                },
            )
        else:
            prompt_cost, completion_cost = litellm.cost_per_token(
                model=route.litellm_model,
                prompt_tokens=getattr(raw_usage, "prompt_tokens", 0) or 0,
                completion_tokens=getattr(raw_usage, "completion_tokens", 0) or 0,
                usage_object=raw_usage,
            )
    except Exception as error:
        # An unpriced model must not fail a response that already streamed.
        _log.debug("no cost for %s: %s", route.litellm_model, error)
        return 0.0
    return float(prompt_cost) + float(completion_cost)


def _model_error(error: Exception) -> ModelError:
    """Classify an exception from litellm (see :mod:`runtimes.models._errors`)."""
    if isinstance(error, ModelError):
        return error
    original = getattr(error, "original_exception", None)
    if isinstance(original, Exception) and original is not error:
        # litellm's MidStreamFallbackError wraps what actually went wrong.
        return _model_error(original)
    message = str(error) or type(error).__name__
    if isinstance(error, ContextWindowExceededError):
        return ModelError(message, context_overflow=True)
    if isinstance(error, Timeout | APIConnectionError):
        return transport_error("model request failed", error)
    unreachable = _connection_failure(error)
    if unreachable is not None:
        # litellm reports a refused connection as "HTTP 500 InternalServerError ...
        # Connection error.": no server answered anything, so say that, retryably.
        return transport_error("cannot reach the model server", unreachable)
    status = getattr(error, "status_code", None)
    if isinstance(status, int) and 400 <= status <= 599:
        return error_from_status(status, message, headers=_headers_of(error))
    if isinstance(error, httpx.TransportError | OSError | TimeoutError):
        return transport_error("model request failed", error)
    return ModelError(f"{type(error).__name__}: {message}")


def _connection_failure(error: BaseException) -> BaseException | None:
    """The innermost cause when ``error`` came from failing to reach the server — the
    OpenAI client's connection error (no response at all; not its timeout), an httpx
    connect error or a refused socket anywhere in its chain of causes — else ``None``.
    A stream cut after the server answered is not one: it stays a transport error."""
    seen: set[int] = set()
    link: BaseException | None = error
    failed = False
    innermost = error
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        if isinstance(link, openai.APITimeoutError):
            return None
        failed = failed or isinstance(
            link, openai.APIConnectionError | httpx.ConnectError | ConnectionRefusedError
        )
        innermost = link
        link = link.__cause__ or link.__context__
    return innermost if failed else None


def _headers_of(error: Exception) -> dict[str, str]:
    """Response headers of a litellm/OpenAI error, wherever this version keeps them."""
    candidates: list[Any] = [
        getattr(error, "litellm_response_headers", None),
        getattr(getattr(error, "response", None), "headers", None),
        getattr(error, "headers", None),
    ]
    for source in candidates:
        items = getattr(source, "items", None)
        if not callable(items):
            continue
        try:
            headers = {str(k): str(v) for k, v in items()}
        except (TypeError, ValueError):
            continue
        if headers:
            return headers
    return {}
