"""An httpx transport that calls an ASGI app in-process and *streams* its answer.

``httpx.ASGITransport`` returns a response only once the app has finished it, so an
endless one — the watch's event stream — never returns. This transport hands the
response back as soon as the app starts it and yields the body as the app sends it;
closing the response tells the app the client went away (``http.disconnect``), as a
real server would, and waits for the app to finish.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import httpx

__all__ = ["StreamingASGITransport"]

_Message = MutableMapping[str, Any]
_App = Callable[
    [_Message, Callable[[], Awaitable[_Message]], Callable[[_Message], Awaitable[None]]],
    Awaitable[None],
]
_DONE: _Message = {"type": "perdure.done"}  # the app returned (or raised: see _run)


class StreamingASGITransport(httpx.AsyncBaseTransport):
    """Requests to ``app`` in this event loop; an exception the app raises before it
    answers is raised to the caller (as ``httpx.ASGITransport`` does by default). Like
    httpx's, it sends no lifespan events: start the app's host first (``await
    host.start()``, or ``async with app.router.lifespan_context(app)``)."""

    def __init__(self, app: Any, *, client: tuple[str, int] = ("127.0.0.1", 123)) -> None:
        self.app: _App = app
        self.client = client

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = await request.aread()
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": request.method,
            "headers": [(k.lower(), v) for k, v in request.headers.raw],
            "scheme": request.url.scheme,
            "path": request.url.path,
            "raw_path": request.url.raw_path.split(b"?")[0],
            "query_string": request.url.query,
            "server": (request.url.host, request.url.port),
            "client": self.client,
            "root_path": "",
        }
        sent: asyncio.Queue[_Message] = asyncio.Queue()
        gone = asyncio.Event()
        read = False

        async def receive() -> _Message:
            nonlocal read
            if not read:
                read = True
                return {"type": "http.request", "body": body, "more_body": False}
            await gone.wait()
            return {"type": "http.disconnect"}

        task = asyncio.ensure_future(_run(self.app, scope, receive, sent.put))
        start = await sent.get()
        if start is _DONE:
            await task  # raises what the app raised
            raise RuntimeError("the ASGI app returned without answering")
        stream = _Body(sent, task, gone)
        headers = [(bytes(k), bytes(v)) for k, v in start.get("headers", [])]
        return httpx.Response(int(start["status"]), headers=headers, stream=stream)


async def _run(
    app: _App,
    scope: _Message,
    receive: Callable[[], Awaitable[_Message]],
    send: Callable[[_Message], Awaitable[None]],
) -> None:
    try:
        await app(scope, receive, send)
    finally:
        await send(_DONE)


class _Body(httpx.AsyncByteStream):
    def __init__(
        self, sent: asyncio.Queue[_Message], task: asyncio.Future[None], gone: asyncio.Event
    ) -> None:
        self._sent = sent
        self._task = task
        self._gone = gone
        self._ended = False

    # An iterator, not an async generator: one left unfinished (the client closed the
    # stream) would be finalized by the garbage collector, which Pyodide reports.
    def __aiter__(self) -> _Body:
        return self

    async def __anext__(self) -> bytes:
        while not self._ended:
            message = await self._sent.get()
            if message is _DONE:
                self._ended = True
                await self._task  # raises what the app raised mid-body
                break
            self._ended = not message.get("more_body", False)
            chunk = bytes(message.get("body", b""))
            if chunk:
                return chunk
        raise StopAsyncIteration

    async def aclose(self) -> None:
        self._gone.set()
        # The client is gone: how the app ends is its own business. One that ignores the
        # disconnect is cancelled (wait_for does that).
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._task, 5.0)
