"""The Telemetry port: how the core tells its host what it did, for logs and traces.

The core never writes a log line or exports a span itself (no streams, no exporters,
no wall clock in ``core``). It calls this port, injected by the host; the default,
:data:`NO_TELEMETRY`, does nothing. A host implements it on top of its logging and
OpenTelemetry (see ``runtimes/observe``).
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Protocol

from core.jsonvalue import JsonObject

if TYPE_CHECKING:
    from core.records import Task

__all__ = [
    "NO_TELEMETRY",
    "TRACE_MEMO",
    "NoTelemetry",
    "SpanAttributes",
    "Telemetry",
    "phase_span",
]

SpanAttributes = Mapping[str, str | int | float | bool]

TRACE_MEMO = "perdure.trace"
"""The task memo holding the trace context :meth:`Telemetry.trace_for` gave the task when
it was created. A memo, because memos survive checkpoints, hand-over and reopen (so a
task recovered after a crash carries on in its trace) and need no storage change (a
record without it, written earlier or with tracing off, simply has none)."""


class Telemetry(Protocol):
    """What the core reports. Contract:

    * ``span(name, attributes, parent)`` brackets one unit of work (a task phase, a
      tool's execution). The core enters it on the event loop around the awaited work and
      exits it when the work ends — normally, by an exception (which the manager must
      let through: it may record it, never swallow or replace it) or by cancellation.
      Spans nest by the asyncio task's context: an implementation may keep the current
      span in a ``contextvars`` variable, so work awaited inside (a model request, a
      sandbox call) becomes a child. ``parent``, when given, is a context
      ``trace_for`` returned (the core keeps it with the task, see :data:`TRACE_MEMO`):
      the span is its child whatever span is current. Entering and exiting must not
      block or raise.
    * ``trace_for(name, attributes, within)`` is asked, in the commit that creates a
      task, for the trace context the task's spans will name as ``parent``: an opaque
      string (a W3C ``traceparent`` on OpenTelemetry) or ``None`` (not tracing). The
      core stores it durably with the task, so the spans of a task recovered after a
      restart continue the trace it began in. ``within`` is the owner task's kept
      context for a child task (the child belongs to that trace; the current span, if
      it is in it, is the more precise parent), ``None`` for a task that begins its own
      trace (the implementation may record that trace's root, ``name``, at once, and
      link it to the current span that caused it). Cheap; must not block or raise.
    * ``event(conversation_id, event)`` reports one harness event (see
      :mod:`core.harness.events`) *after* the commit that recorded it is durable, on the
      mutation line: it must be cheap, must not raise, and must not call back into the
      harness. ``event`` is a JSON object the callee may keep but must not mutate.
    """

    def span(
        self, name: str, attributes: SpanAttributes, parent: str | None = None
    ) -> AbstractContextManager[object]: ...

    def event(self, conversation_id: int, event: JsonObject) -> None: ...

    def trace_for(
        self, name: str, attributes: SpanAttributes, within: str | None
    ) -> str | None: ...


_NO_SPAN: AbstractContextManager[object] = nullcontext()
"""A span that reports nothing (a ``nullcontext`` holds no state: one serves all)."""


class NoTelemetry:
    """Reports nothing."""

    def span(
        self, name: str, attributes: SpanAttributes, parent: str | None = None
    ) -> AbstractContextManager[object]:
        return _NO_SPAN

    def trace_for(self, name: str, attributes: SpanAttributes, within: str | None) -> str | None:
        return None

    def event(self, conversation_id: int, event: JsonObject) -> None:
        return None


NO_TELEMETRY: Telemetry = NoTelemetry()


def phase_span(telemetry: Telemetry, task: Task, phase: str) -> AbstractContextManager[object]:
    """The span of one phase of ``task``: named by its kind and phase, with its ids, in
    the trace the task keeps (:data:`TRACE_MEMO`), so also after a restart."""
    if telemetry is NO_TELEMETRY:  # the default: no name and attributes to build per phase
        return _NO_SPAN
    attributes: dict[str, str | int | float | bool] = {
        "perdure.task.id": task.id,
        "perdure.task.kind": task.kind,
    }
    if task.owner is not None:
        attributes["perdure.task.owner"] = task.owner
    trace = task.memos.get(TRACE_MEMO)
    return telemetry.span(
        f"{task.kind} {phase}", attributes, trace if isinstance(trace, str) else None
    )
