"""Tracing is configured by the standard OTEL_* variables and is off by default."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import TracerProvider

from runtimes.observe.otel import TracingUnavailable, tracer_provider_from_env


def test_off_unless_an_exporter_or_endpoint_is_named() -> None:
    assert tracer_provider_from_env("svc", {}, install=False) is None
    assert tracer_provider_from_env("svc", {"OTEL_TRACES_EXPORTER": "none"}, install=False) is None
    disabled = {"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "console"}
    assert tracer_provider_from_env("svc", disabled, install=False) is None


def test_console_and_otlp_exporters_with_the_service_name() -> None:
    provider = tracer_provider_from_env("svc", {"OTEL_TRACES_EXPORTER": "console"}, install=False)
    assert isinstance(provider, TracerProvider)
    assert provider.resource.attributes["service.name"] == "svc"
    provider.shutdown()
    endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}
    try:
        otlp = tracer_provider_from_env("svc", endpoint, install=False)
    except TracingUnavailable as error:  # the otel extra is not installed
        assert "perdure[otel]" in str(error)
    else:
        assert isinstance(otlp, TracerProvider)
        otlp.shutdown()
    with pytest.raises(TracingUnavailable, match="not supported"):
        tracer_provider_from_env("svc", {"OTEL_TRACES_EXPORTER": "zipkin"}, install=False)
