"""``ObservedModels``: a Models wrapper that traces and logs each model request."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode, Tracer

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
from core.jsonvalue import JsonValue
from core.tasks import CancelSignal
from runtimes.observe.logs import log_line

__all__ = ["ObservedModels"]


class ObservedModels:
    """Delegates to ``inner``; each ``stream``/``fetch`` gets a ``CLIENT`` span (a child of
    the generation phase's span) and one ``model`` log line: model, latency, time to the
    first token, tokens in and out, cost, or the error."""

    def __init__(self, inner: Models, tracer: Tracer | None = None) -> None:
        self.inner = inner
        self.tracer = tracer or trace.get_tracer("perdure")

    def info(self, model_id: str) -> ModelInfo | None:
        return self.inner.info(model_id)

    def stream(self, request: ModelRequest, signal: CancelSignal) -> AsyncIterator[StreamEvent]:
        return self._observe(request.model, "request", self.inner.stream(request, signal))

    def fetch(
        self, model_id: str, handle: JsonValue, signal: CancelSignal
    ) -> AsyncIterator[StreamEvent]:
        return self._observe(model_id, "poll", self.inner.fetch(model_id, handle, signal))

    async def cancel_deferred(self, model_id: str, handle: JsonValue) -> None:
        await self.inner.cancel_deferred(model_id, handle)

    async def _observe(
        self, model: str, what: str, events: AsyncIterator[StreamEvent]
    ) -> AsyncIterator[StreamEvent]:
        # Started, not made current: a generator's body runs in its consumer's context,
        # and attaching across yields would detach in the wrong one.
        span = self.tracer.start_span(
            f"model {what} {model}",
            kind=trace.SpanKind.CLIENT,
            attributes={"gen_ai.request.model": model},
        )
        started = time.perf_counter()
        first: float | None = None
        usage: Usage | None = None
        error: BaseException | None = None
        done = False
        try:
            async for event in events:
                if first is None and not isinstance(event, StreamStart):
                    first = time.perf_counter()
                if isinstance(event, StreamDone):
                    usage, done = event.message.usage, True
                yield event
        except GeneratorExit:
            # The consumer stopped reading: normal once the final message arrived.
            if not done:
                error = asyncio.CancelledError("the request was abandoned")
            raise
        except BaseException as e:
            error = e
            raise
        finally:
            self._finish(span, model, started, first, usage, error)

    def _finish(
        self,
        span: Span,
        model: str,
        started: float,
        first: float | None,
        usage: Usage | None,
        error: BaseException | None,
    ) -> None:
        ms = int((time.perf_counter() - started) * 1000)
        first_ms = None if first is None else int((first - started) * 1000)
        fields: dict[str, object] = {"model": model, "latency_ms": ms, "first_token_ms": first_ms}
        if usage is not None:
            fields.update(input_tokens=usage.input, output_tokens=usage.output, cost=usage.cost)
            span.set_attribute("gen_ai.usage.input_tokens", usage.input)
            span.set_attribute("gen_ai.usage.output_tokens", usage.output)
        first_text = "" if first_ms is None else f" (first token {first_ms} ms)"
        if error is None:
            tokens = (
                f", {usage.input} in / {usage.output} out tokens, ${usage.cost:.4f}"
                if usage is not None
                else ""
            )
            log_line("model", f"model {model}: {ms} ms{first_text}{tokens}", fields)
        else:
            retryable = isinstance(error, ModelError) and error.retryable
            why = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
            log_line(
                "model",
                f"model {model}: failed after {ms} ms: {why}"
                + (" (retryable)" if retryable else ""),
                {**fields, "error": why, "retryable": retryable},
            )
            span.set_status(Status(StatusCode.ERROR, why))
        span.end()
