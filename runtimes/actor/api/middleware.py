"""Pure ASGI middleware that refuses a request before routing: bearer auth, body size.

Both run before FastAPI reads the body, so an unauthenticated or oversized request is
refused without parsing anything (FastAPI parses a JSON body before it resolves route
dependencies, so auth cannot be a dependency if a bad body must still get a 401).
"""

from __future__ import annotations

import hmac
import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["BearerAuth", "BodyLimit"]


async def _refuse(
    send: Send, status: int, code: str, message: str, headers: list[tuple[bytes, bytes]]
) -> None:
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class BearerAuth:
    """``401 unauthorized`` unless ``Authorization: Bearer <token>`` carries ``token``.

    Applies to paths under ``prefix``; the rest (``/openapi.json``) is public. The token
    is compared in constant time.
    """

    def __init__(self, app: ASGIApp, *, token: str, prefix: str = "/v1/") -> None:
        if not token:
            raise ValueError("the API token must not be empty")
        self.app = app
        self._token = token.encode()
        self._prefix = prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not str(scope.get("path", "")).startswith(self._prefix):
            await self.app(scope, receive, send)
            return
        header = b""
        for name, value in scope.get("headers", []):
            if name == b"authorization":
                header = value
                break
        scheme, _, token = header.partition(b" ")
        if scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), self._token):
            await self.app(scope, receive, send)
            return
        message = "missing bearer token" if not header else "invalid bearer token"
        await _refuse(send, 401, "unauthorized", message, [(b"www-authenticate", b"Bearer")])


class BodyLimit:
    """``413 body_too_large`` for bodies above ``max_bytes``.

    A declared ``Content-Length`` above the limit is refused without reading; otherwise
    the body is read (never more than ``max_bytes``) and replayed to the app, so a
    chunked upload cannot slip past the limit.
    """

    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError("max_bytes must be >= 0")
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                declared = int(value) if value.isdigit() else -1
                if declared < 0 or declared > self.max_bytes:
                    await self._too_large(send)
                    return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body = message.get("body", b"")
            size += len(body)
            if size > self.max_bytes:
                await self._too_large(send)
                return
            chunks.append(body)
            if not message.get("more_body", False):
                break
        whole = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": whole, "more_body": False}
            return await receive()  # later calls wait for the disconnect, as usual

        await self.app(scope, replay, send)

    async def _too_large(self, send: Send) -> None:
        message = f"the request body exceeds {self.max_bytes} bytes"
        await _refuse(send, 413, "body_too_large", message, [(b"connection", b"close")])
