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
httpx's timeouts keep their meaning: until the response headers arrive, ``connect``
plus ``read`` bound the wait (then the fetch is aborted: :class:`httpx.ConnectTimeout`);
each read of the body is bounded by ``read`` (:class:`httpx.ReadTimeout`). A long stream
that keeps sending is never cut.
Imports ``js``/``pyodide`` only when a request is sent: importable on CPython.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx

__all__ = ["FetchTransport"]

# Hop-by-hop or computed by fetch itself; sending them is refused or ignored.
_SKIP_HEADERS = frozenset({"host", "content-length", "connection", "transfer-encoding"})


class _FetchBody(httpx.AsyncByteStream):
    """A fetch ``Response.body`` read chunk by chunk, each read within ``read_s``."""

    def __init__(self, body: Any, request: httpx.Request, read_s: float | None) -> None:
        self._body = body
        self._request = request
        self._read_s = read_s
        self._reader: Any = None

    async def __aiter__(self) -> AsyncIterator[bytes]:
        from pyodide.ffi import JsException  # type: ignore[import-not-found]

        if self._body is None:
            return
        self._reader = self._body.getReader()
        while True:
            try:
                chunk = await asyncio.wait_for(_awaited(self._reader.read()), self._read_s)
            except TimeoutError as error:
                await self.aclose()
                raise httpx.ReadTimeout(
                    "no data within the read timeout", request=self._request
                ) from error
            except JsException as error:  # the connection broke mid-body
                raise httpx.ReadError(
                    f"fetch body failed: {error}", request=self._request
                ) from error
            if chunk.done:
                return
            yield bytes(chunk.value.to_bytes())

    async def aclose(self) -> None:
        if self._reader is not None:
            reader, self._reader = self._reader, None
            with contextlib.suppress(Exception):  # a finished stream has nothing to cancel
                await reader.cancel()


async def _awaited(promise: Any) -> Any:
    # A JS promise is awaitable but not a coroutine; wait_for wants one.
    return await promise


def _timeouts(request: httpx.Request) -> tuple[float | None, float | None]:
    """(until the headers, per body read) in seconds, from httpx's timeout parts."""
    parts = request.extensions.get("timeout") or {}
    connect, read = parts.get("connect"), parts.get("read")
    head = None if connect is None or read is None else float(connect) + float(read)
    return head, None if read is None else float(read)


class FetchTransport(httpx.AsyncBaseTransport):
    """An httpx transport over JavaScript ``fetch`` (see the module docstring).

    ``fetch``: the function to call (default: the global ``fetch``), e.g. a service
    binding's ``fetch``.
    """

    def __init__(self, fetch: Any = None) -> None:
        self._fetch = fetch

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        from js import AbortController, Object  # type: ignore[import-not-found]
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
        head_s, read_s = _timeouts(request)
        controller = AbortController.new()
        init["signal"] = controller.signal
        fetch = self._fetch or global_fetch
        try:
            response = await asyncio.wait_for(
                _awaited(fetch(str(request.url), to_js(init, dict_converter=Object.fromEntries))),
                head_s,
            )
        except TimeoutError as error:
            controller.abort()
            raise httpx.ConnectTimeout("no response within the timeout", request=request) from error
        except JsException as error:
            raise httpx.ConnectError(f"fetch failed: {error}", request=request) from error
        headers = [(str(pair[0]), str(pair[1])) for pair in response.headers.entries()]
        return httpx.Response(
            status_code=int(response.status),
            headers=headers,
            stream=_FetchBody(response.body, request, read_s),
            request=request,
        )
