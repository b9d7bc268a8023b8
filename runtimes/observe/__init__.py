"""Operator-facing observability for CPython hosts: log lines and OpenTelemetry spans.

* :mod:`.logs` — the ``perdure`` logger, readable text or JSON lines;
* :mod:`.telemetry` — :class:`HostTelemetry`, the core's Telemetry port: task phases and
  tool calls as spans, harness events (recovery, retries, compaction, aborts) as log lines;
* :mod:`.models` — :class:`ObservedModels`, a Models wrapper: a span and a log line per
  model request (model, tokens, latency);
* :mod:`.http` — :class:`RequestLog`, an ASGI middleware: one line per HTTP request;
* :mod:`.otel` — a tracer provider from the standard ``OTEL_*`` variables (off by default).
"""

from runtimes.observe.http import RequestLog
from runtimes.observe.logs import LOGGER, configure_logging, describe_event, log_line
from runtimes.observe.models import ObservedModels
from runtimes.observe.otel import tracer_provider_from_env
from runtimes.observe.telemetry import HostTelemetry

__all__ = [
    "LOGGER",
    "HostTelemetry",
    "ObservedModels",
    "RequestLog",
    "configure_logging",
    "describe_event",
    "log_line",
    "tracer_provider_from_env",
]
