"""Pure ASGI middleware that refuses a request before routing: bearer auth (the body
limit is :class:`remote_env.limits.BodyLimit`, shared with the sandbox server).

Both run before FastAPI reads the body, so an unauthenticated or oversized request is
refused without parsing anything (FastAPI parses a JSON body before it resolves route
dependencies, so auth cannot be a dependency if a bad body must still get a 401).
"""

from __future__ import annotations

import hmac
import json

from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["BearerAuth"]


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
        kind = scope["type"]
        # WebSocket handshakes too: a route added later must not be reachable unauthenticated.
        if kind not in ("http", "websocket") or not str(scope.get("path", "")).startswith(
            self._prefix
        ):
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
        if kind == "websocket":
            # Closing before accepting makes the server answer the handshake with 403.
            await send({"type": "websocket.close", "code": 1008})
            return
        message = "missing bearer token" if not header else "invalid bearer token"
        await _refuse(send, 401, "unauthorized", message, [(b"www-authenticate", b"Bearer")])
