"""OpenTelemetry from the standard ``OTEL_*`` variables: the sandbox package's
configuration (:mod:`remote_env.otel`), shared so both servers read the variables alike."""

from remote_env.otel import TracingUnavailable, tracer_provider_from_env

__all__ = ["TracingUnavailable", "tracer_provider_from_env"]
