"""``RequestLog``: one ``request`` log line per HTTP request the actor API answers."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from runtimes.observe.logs import log_line

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["RequestLog"]


class RequestLog:
    """ASGI middleware: ``METHOD PATH STATUS N ms`` once the response has ended (a watch
    stream is logged when it closes, with its whole duration). Requests ``unlogged``
    says no client sent (the app's own start-up walk) are passed through unlogged."""

    def __init__(self, app: ASGIApp, unlogged: Callable[[Scope], bool] | None = None) -> None:
        self.app = app
        self.unlogged = unlogged

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (self.unlogged is not None and self.unlogged(scope)):
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status: list[int] = [0]

        async def watched(message: Message) -> None:
            if message["type"] == "http.response.start":
                code: Any = message.get("status", 0)
                status[0] = int(code)
            await send(message)

        try:
            await self.app(scope, receive, watched)
        finally:
            ms = int((time.perf_counter() - started) * 1000)
            method, path = scope.get("method", ""), scope.get("path", "")
            log_line(
                "request",
                f"{method} {path} {status[0] or '-'} {ms} ms",
                {"method": method, "path": path, "status": status[0], "duration_ms": ms},
            )
