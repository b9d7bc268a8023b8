"""OpenTelemetry from the standard ``OTEL_*`` variables; off unless they ask for it.

Tracing is on when ``OTEL_TRACES_EXPORTER`` names an exporter (``otlp``, ``console``)
or, without it, when an OTLP endpoint is set (``OTEL_EXPORTER_OTLP_ENDPOINT`` or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``); ``OTEL_SDK_DISABLED=true`` or
``OTEL_TRACES_EXPORTER=none`` turn it off. The exporter itself reads its own variables
(endpoint, headers, protocol timeouts), the batch processor ``OTEL_BSP_*``, and the
resource ``OTEL_SERVICE_NAME`` / ``OTEL_RESOURCE_ATTRIBUTES``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

__all__ = ["TracingUnavailable", "tracer_provider_from_env"]


class TracingUnavailable(Exception):
    """The variables ask for an exporter that is not installed or not known."""


def _exporter(name: str) -> SpanExporter:
    if name == "console":
        return ConsoleSpanExporter()
    if name == "otlp":
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError:
            raise TracingUnavailable(
                "OTEL_TRACES_EXPORTER=otlp needs the OTLP exporter: pip install 'perdure[otel]'"
            ) from None
        return OTLPSpanExporter()
    raise TracingUnavailable(f"OTEL_TRACES_EXPORTER={name} is not supported: use otlp or console")


def tracer_provider_from_env(
    service_name: str, environ: Mapping[str, str] | None = None, *, install: bool = True
) -> TracerProvider | None:
    """A provider exporting as ``OTEL_*`` says, or ``None`` when tracing is off.
    ``install``: also make it the process's global provider (what ``RemoteEnv`` and the
    sandbox server use when given none)."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    names = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if not names:
        endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get(
            "OTEL_EXPORTER_OTLP_ENDPOINT"
        )
        names = "otlp" if endpoint else "none"
    exporters = [n.strip() for n in names.split(",") if n.strip() and n.strip() != "none"]
    if not exporters:
        return None
    attributes = {} if env.get("OTEL_SERVICE_NAME") else {"service.name": service_name}
    provider = TracerProvider(resource=Resource.create(attributes))
    for name in exporters:
        provider.add_span_processor(BatchSpanProcessor(_exporter(name)))
    if install:
        trace.set_tracer_provider(provider)
    return provider
