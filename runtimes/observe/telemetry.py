"""``HostTelemetry``: the core's Telemetry port on a CPython host (logs + OpenTelemetry)."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, Tracer

from core.jsonvalue import JsonObject
from core.telemetry import SpanAttributes
from runtimes.observe.logs import describe_event, log_line

__all__ = ["HostTelemetry"]

_KEEP_SPANS = 1024


class HostTelemetry:
    """Spans for task phases and tool calls (children of whatever span is current, so a
    model request or a sandbox call made inside becomes their child), a ``tool`` log
    line per tool call, and an ``event`` log line per harness event, for one actor."""

    def __init__(self, actor: str, tracer: Tracer | None = None) -> None:
        self.actor = actor
        self.tracer = tracer or trace.get_tracer("perdure")
        # The latest phase span of each task, so an owned task's phases (a tool call of
        # a generation's round) continue its owner's trace. Bounded; empty after a
        # restart, where a recovered task starts a new trace.
        self._task_spans: OrderedDict[int, SpanContext] = OrderedDict()

    def span(self, name: str, attributes: SpanAttributes) -> AbstractContextManager[object]:
        return self._span(name, attributes)

    @contextmanager
    def _span(self, name: str, attributes: SpanAttributes) -> Iterator[object]:
        started = time.perf_counter()
        error: BaseException | None = None
        parent = None
        owner = attributes.get("perdure.task.owner")
        known = self._task_spans.get(owner) if isinstance(owner, int) else None
        if known is not None and not trace.get_current_span().get_span_context().is_valid:
            parent = trace.set_span_in_context(NonRecordingSpan(known))
        with self.tracer.start_as_current_span(
            name, context=parent, attributes={**attributes, "perdure.actor": self.actor}
        ) as span:
            task = attributes.get("perdure.task.id")
            if isinstance(task, int) and "perdure.task.kind" in attributes:
                self._task_spans[task] = span.get_span_context()
                self._task_spans.move_to_end(task)
                while len(self._task_spans) > _KEEP_SPANS:
                    self._task_spans.popitem(last=False)
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
