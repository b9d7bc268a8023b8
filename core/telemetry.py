"""The Telemetry port: how the core tells its host what it did, for logs and traces.

The core never writes a log line or exports a span itself (no streams, no exporters,
no wall clock in ``core``). It calls this port, injected by the host; the default,
:data:`NO_TELEMETRY`, does nothing. A host implements it on top of its logging and
OpenTelemetry (see ``runtimes/observe``).
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Protocol

from core.jsonvalue import JsonObject

__all__ = ["NO_TELEMETRY", "NoTelemetry", "SpanAttributes", "Telemetry"]

SpanAttributes = Mapping[str, str | int | float | bool]


class Telemetry(Protocol):
    """What the core reports. Contract:

    * ``span(name, attributes)`` brackets one unit of work (a task phase, a tool's
      execution). The core enters it on the event loop around the awaited work and
      exits it when the work ends — normally, by an exception (which the manager must
      let through: it may record it, never swallow or replace it) or by cancellation.
      Spans nest by the asyncio task's context: an implementation may keep the current
      span in a ``contextvars`` variable, so work awaited inside (a model request, a
      sandbox call) becomes a child. Entering and exiting must not block or raise.
    * ``event(conversation_id, event)`` reports one harness event (see
      :mod:`core.harness.events`) *after* the commit that recorded it is durable, on the
      mutation line: it must be cheap, must not raise, and must not call back into the
      harness. ``event`` is a JSON object the callee may keep but must not mutate.
    """

    def span(self, name: str, attributes: SpanAttributes) -> AbstractContextManager[object]: ...

    def event(self, conversation_id: int, event: JsonObject) -> None: ...


class NoTelemetry:
    """Reports nothing."""

    def span(self, name: str, attributes: SpanAttributes) -> AbstractContextManager[object]:
        return nullcontext()

    def event(self, conversation_id: int, event: JsonObject) -> None:
        return None


NO_TELEMETRY: Telemetry = NoTelemetry()
