"""Pure ASGI middleware that refuses a request before routing: bearer auth, with the
scope of a scoped token (the body limit is :class:`remote_env.limits.BodyLimit`, shared
with the sandbox server).

Both run before FastAPI reads the body, so an unauthenticated or oversized request is
refused without parsing anything (FastAPI parses a JSON body before it resolves route
dependencies, so auth cannot be a dependency if a bad body must still get a 401).
"""

from __future__ import annotations

import hmac
import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from remote_env.limits import BodyLimit
from runtimes.actor.scopes import RouteRights
from runtimes.actor.tokens import SigningKeys, TokenRefused, looks_scoped

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
    """``401 unauthorized`` unless ``Authorization: Bearer <token>`` carries ``token`` (the
    host's API token: every route) or a scoped token signed by ``keys`` that allows the
    request (:class:`~runtimes.actor.scopes.RouteRights`; ``403 forbidden`` when it does
    not). Expired, forged and malformed scoped tokens get ``401``.

    Applies to paths under ``prefix``; the rest (``/openapi.json``) is public. The host
    token is compared in constant time, a scoped token's signature too. A scoped token's
    submission to one conversation is decided on its body, read here (at most
    ``max_body_bytes``: a longer one is refused ``413`` as the body limit refuses it) and
    replayed.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        token: str,
        prefix: str = "/v1/",
        keys: SigningKeys | None = None,
        max_body_bytes: int = 1024 * 1024,
    ) -> None:
        if not token:
            raise ValueError("the API token must not be empty")
        self.app = app
        self._token = token.encode()
        self._prefix = prefix
        self._keys = keys
        self._rights = RouteRights()
        self._max_body_bytes = max_body_bytes

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
        scheme, _, given = header.partition(b" ")
        given = given.strip()
        bearer = scheme.lower() == b"bearer"
        text = given.decode("ascii", "replace")
        if bearer and self._keys is not None and looks_scoped(text):
            await self._scoped(text, scope, receive, send)
            return
        if bearer and hmac.compare_digest(given, self._token):
            await self.app(scope, receive, send)
            return
        message = "missing bearer token" if not header else "invalid bearer token"
        await _deny(scope, send, 401, "unauthorized", message)

    async def _scoped(self, given: str, scope: Scope, receive: Receive, send: Send) -> None:
        assert self._keys is not None
        try:
            granted = self._keys.verify(given)
        except TokenRefused as refused:
            await _deny(scope, send, 401, "unauthorized", _REFUSED[refused.reason])
            return
        method = str(scope.get("method", "GET"))  # a WebSocket handshake is a GET
        path = str(scope["path"])  # ASGI paths are percent-decoded already
        body: bytes | None = None
        if scope["type"] == "http" and self._rights.needs_body(granted, method, path):
            body, over, receive = await _buffer(receive, self._max_body_bytes)
            if over:
                # Refused as every oversized body is (drained, 413), whatever its scope.
                await BodyLimit(self.app, max_bytes=self._max_body_bytes)(scope, receive, send)
                return
            if body is None:
                return  # the client left mid-body: nobody to answer
        denied = self._rights.check(granted, method, path, body)
        if denied is not None:
            await _deny(scope, send, denied.status, denied.code, denied.message)
            return
        await self.app(scope, receive, send)


_REFUSED = {
    "expired": "the token has expired",
    "bad_signature": "invalid bearer token",
    "malformed": "invalid bearer token",
}


async def _deny(scope: Scope, send: Send, status: int, code: str, message: str) -> None:
    if scope["type"] == "websocket":
        # Closing before accepting makes the server answer the handshake with 403.
        await send({"type": "websocket.close", "code": 1008})
        return
    headers = [(b"www-authenticate", b"Bearer")] if status == 401 else []
    await _refuse(send, status, code, message, headers)


async def _buffer(receive: Receive, limit: int) -> tuple[bytes | None, bool, Receive]:
    """Read the body, up to ``limit`` bytes: ``(body, over, replay)``. ``body`` is
    ``None`` when it is over ``limit`` (``over``) or the client left; ``replay`` gives
    what was read again, then reads on."""
    read: list[Message] = []
    size = 0
    while True:
        message = await receive()
        read.append(message)
        if message["type"] != "http.request":
            break
        size += len(message.get("body", b""))
        if size > limit or not message.get("more_body", False):
            break
    pending = list(read)

    async def replay() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    last = read[-1]
    complete = last["type"] == "http.request" and not last.get("more_body", False)
    over = size > limit
    whole = b"".join(m.get("body", b"") for m in read) if complete and not over else None
    return whole, over, replay
