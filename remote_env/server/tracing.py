"""Tracing on the sandbox server: each request continues the caller's trace.

The actor host's ``RemoteEnv`` sends a W3C ``traceparent`` header; this ASGI middleware
extracts it and runs the request inside a server span that is its child, so a trace
shows a tool call on the actor host and the sandbox op it caused as one tree. Ops run
detached from their request (``asyncio`` tasks copy the context), so spans an op starts
hang below the request that submitted it. Without a configured tracer provider every
span is a no-op.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from opentelemetry import context, propagate, trace

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["TraceRequests"]

_OP_PATH = re.compile(r"/v1/ops/[^/]+")


class TraceRequests:
    """ASGI middleware: one ``SERVER`` span per HTTP request, parented by ``traceparent``."""

    def __init__(self, app: ASGIApp, tracer_provider: TracerProvider | None = None) -> None:
        self.app = app
        self.tracer = trace.get_tracer("perdure.sandbox", tracer_provider=tracer_provider)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        carrier = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers", [])}
        parent = propagate.extract(carrier)
        path = _OP_PATH.sub("/v1/ops/{id}", str(scope.get("path", "")))
        name = f"sandbox {scope.get('method', 'GET')} {path}"
        token = context.attach(parent)
        try:
            with self.tracer.start_as_current_span(name, kind=trace.SpanKind.SERVER) as span:

                async def traced_send(message: Message) -> None:
                    if message["type"] == "http.response.start":
                        status: Any = message.get("status", 0)
                        span.set_attribute("http.response.status_code", int(status))
                    await send(message)

                await self.app(scope, receive, traced_send)
        finally:
            context.detach(token)
