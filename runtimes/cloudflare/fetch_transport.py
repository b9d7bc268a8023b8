"""httpx over the runtime's ``fetch``: outbound HTTP from Python in a Worker.

Pyodide has no sockets, so httpx's own transports cannot connect. :class:`FetchTransport`
sends each request through the JavaScript ``fetch`` (a global in workerd and in Node
>= 18) and streams the response body back chunk by chunk from its ``ReadableStream``,
so server-sent events (a model's stream, a sandbox op's output) arrive as they are
sent. The OpenAI-compatible model adapter
(:class:`runtimes.models.openai_http.OpenAICompatibleModels`) and the ``remote_env``
client both take it as their ``transport``, unchanged.

A rejected ``fetch`` (refused connection, DNS, abort) becomes
:class:`httpx.ConnectError`, which both clients already map to their transport errors.
The request's httpx timeout (the largest of its parts) becomes an ``AbortSignal``.
Imports ``js``/``pyodide`` only when a request is sent: importable on CPython.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx

__all__ = ["FetchTransport"]

# Hop-by-hop or computed by fetch itself; sending them is refused or ignored.
_SKIP_HEADERS = frozenset({"host", "content-length", "connection", "transfer-encoding"})


class _FetchBody(httpx.AsyncByteStream):
    """A fetch ``Response.body`` read chunk by chunk."""

    def __init__(self, body: Any) -> None:
        self._body = body
        self._reader: Any = None

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._body is None:
            return
        from pyodide.ffi import JsException  # type: ignore[import-not-found]

        self._reader = self._body.getReader()
        while True:
            try:
                chunk = await self._reader.read()
            except JsException as error:  # the connection broke mid-body
                raise httpx.ReadError(f"fetch body failed: {error}") from error
            if chunk.done:
                return
            yield bytes(chunk.value.to_bytes())

    async def aclose(self) -> None:
        if self._reader is not None:
            with contextlib.suppress(Exception):  # a finished stream has nothing to cancel
                await self._reader.cancel()
            self._reader = None


def _timeout_ms(request: httpx.Request) -> int | None:
    parts = request.extensions.get("timeout") or {}
    values = [v for v in parts.values() if isinstance(v, int | float)]
    return int(max(values) * 1000) if values else None


class FetchTransport(httpx.AsyncBaseTransport):
    """An httpx transport over JavaScript ``fetch`` (see the module docstring).

    ``fetch``: the function to call (default: the global ``fetch``), e.g. a service
    binding's ``fetch``.
    """

    def __init__(self, fetch: Any = None) -> None:
        self._fetch = fetch

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        from js import AbortSignal, Object  # type: ignore[import-not-found]
        from js import fetch as global_fetch
        from pyodide.ffi import JsException, to_js

        body = await request.aread()
        init: dict[str, Any] = {
            "method": request.method,
            "headers": [
                [name, value]
                for name, value in request.headers.multi_items()
                if name.lower() not in _SKIP_HEADERS
            ],
        }
        if body:
            init["body"] = to_js(body)  # a Uint8Array copy
        timeout = _timeout_ms(request)
        if timeout is not None:
            init["signal"] = AbortSignal.timeout(timeout)
        fetch = self._fetch or global_fetch
        try:
            response = await fetch(str(request.url), to_js(init, dict_converter=Object.fromEntries))
        except JsException as error:
            raise httpx.ConnectError(f"fetch failed: {error}", request=request) from error
        headers = [(str(pair[0]), str(pair[1])) for pair in response.headers.entries()]
        return httpx.Response(
            status_code=int(response.status),
            headers=headers,
            stream=_FetchBody(response.body),
            request=request,
        )
