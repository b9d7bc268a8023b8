"""``HostTelemetry``: the core's Telemetry port on a CPython host (logs + OpenTelemetry)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from core.jsonvalue import JsonObject
from core.telemetry import SpanAttributes
from runtimes.observe.logs import describe_event, log_line

__all__ = ["HostTelemetry"]

# The kept trace contexts are W3C ``traceparent`` strings, whatever OTEL_PROPAGATORS says
# for HTTP: they are stored with tasks and read back by a later process.
_W3C = TraceContextTextMapPropagator()


class HostTelemetry:
    """Spans for task phases and tool calls, a ``tool`` log line per tool call, and an
    ``event`` log line per harness event, for one actor.

    Traces follow the task tree: a task that begins its own (a run's generation, a
    reminder, a compaction) gets a root span named by its kind when it is created,
    linked to the span that created it; its phases and the tasks it owns (tool calls,
    sub-agents) are that trace's spans. The core keeps each task's context with the
    task (:data:`core.telemetry.TRACE_MEMO`), so after a crash the recovered tasks'
    spans join the trace they began in — an operator sees one trace across the restart.
    """

    def __init__(self, actor: str, tracer: Tracer | None = None) -> None:
        self.actor = actor
        self.tracer = tracer or trace.get_tracer("perdure")

    def span(
        self, name: str, attributes: SpanAttributes, parent: str | None = None
    ) -> AbstractContextManager[object]:
        return self._span(name, attributes, parent)

    def trace_for(self, name: str, attributes: SpanAttributes, within: str | None) -> str | None:
        current = trace.get_current_span().get_span_context()
        if within is not None:
            kept = _context_of(within)
            if kept is not None and current.is_valid and current.trace_id == kept.trace_id:
                return _traceparent(current)  # the phase that creates it: a closer parent
            return within
        root = self.tracer.start_span(
            name,
            context=Context(),  # a root: not a child of whatever is current
            attributes={**attributes, "perdure.actor": self.actor},
            links=[Link(current)] if current.is_valid else None,
        )
        root.end()
        started = root.get_span_context()
        return _traceparent(started) if started.is_valid else None

    @contextmanager
    def _span(self, name: str, attributes: SpanAttributes, parent: str | None) -> Iterator[object]:
        started = time.perf_counter()
        error: BaseException | None = None
        kept = _context_of(parent) if parent is not None else None
        context = trace.set_span_in_context(NonRecordingSpan(kept)) if kept is not None else None
        with self.tracer.start_as_current_span(
            name, context=context, attributes={**attributes, "perdure.actor": self.actor}
        ) as span:
            try:
                yield span
            except BaseException as e:
                error = e
                raise
            finally:
                if name.startswith("tool "):
                    self._log_tool(name, attributes, time.perf_counter() - started, error)

    def _log_tool(
        self, name: str, attributes: SpanAttributes, seconds: float, error: BaseException | None
    ) -> None:
        tool = str(attributes.get("perdure.tool.name", name.removeprefix("tool ")))
        ms = int(seconds * 1000)
        outcome = "ok" if error is None else f"ended by {type(error).__name__}"
        fields = {
            "actor": self.actor,
            "tool": tool,
            "task": attributes.get("perdure.task.id"),
            "call_id": attributes.get("perdure.tool.call_id"),
            "duration_ms": ms,
            "ok": error is None,
        }
        log_line("tool", f"{self.actor}: tool {tool} {ms} ms {outcome}", fields)

    def event(self, conversation_id: int, event: JsonObject) -> None:
        # The line's kind is "event"; the event's own kind goes under "event".
        fields = {k: v for k, v in event.items() if k != "kind"}
        fields.update(event=event.get("kind"), actor=self.actor, conversation=conversation_id)
        log_line("event", f"{self.actor}/{conversation_id}: {describe_event(event)}", fields)
        span = trace.get_current_span()
        if span.is_recording():
            n = event.get("n")
            span.add_event(f"perdure.{event.get('kind')}", {"perdure.event.n": str(n)})


def _traceparent(context: SpanContext) -> str:
    carrier: dict[str, str] = {}
    _W3C.inject(carrier, context=trace.set_span_in_context(NonRecordingSpan(context)))
    return carrier["traceparent"]


def _context_of(traceparent: str) -> SpanContext | None:
    """The span context a kept ``traceparent`` names; ``None`` if it is not one."""
    context = trace.get_current_span(_W3C.extract({"traceparent": traceparent})).get_span_context()
    return context if context.is_valid else None
