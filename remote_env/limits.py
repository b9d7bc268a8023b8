"""The request body limit both HTTP servers enforce: the sandbox server and the actor API.

One pure ASGI middleware (it needs only starlette's types, so it also runs where the
actor API runs in a Durable Object), kept outside ``remote_env.server`` so the hosts may
import it: security code exists once.
"""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["DRAIN_BYTES", "BodyLimit"]

DRAIN_BYTES = 64 * 1024 * 1024
"""How much of a refused body is read and thrown away so the client receives the 413."""


class BodyLimit:
    """``413 {"error": {"code": "body_too_large", ...}}`` for bodies above ``max_bytes``,
    before routing and parsing.

    A declared ``Content-Length`` above the limit is refused without keeping anything;
    otherwise the body is read (at most ``max_bytes`` kept) and replayed to the app, so a
    chunked upload cannot slip past the limit either.

    A refused body is *drained* first (read and discarded, up to ``drain_bytes``) and the
    answer closes the connection: a server that closes with unread data in the socket
    makes the kernel reset the connection, and the client may then lose the answer
    (RFC 9112 §9.6). A body beyond ``drain_bytes`` is not read further: that client
    gets the answer only if it reads while it sends.
    """

    def __init__(self, app: ASGIApp, *, max_bytes: int, drain_bytes: int = DRAIN_BYTES) -> None:
        if max_bytes < 0 or drain_bytes < 0:
            raise ValueError("max_bytes and drain_bytes must be >= 0")
        self.app = app
        self.max_bytes = max_bytes
        self.drain_bytes = drain_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                declared = int(value) if value.isdigit() else -1
                if declared < 0 or declared > self.max_bytes:
                    # Drained when it can be; nobody to answer if the client left meanwhile.
                    if declared < 0 or declared > self.drain_bytes or await self._drain(receive, 0):
                        await self._refuse(send)
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
                if not message.get("more_body", False) or await self._drain(receive, size):
                    await self._refuse(send)
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

    async def _drain(self, receive: Receive, read: int) -> bool:
        """Read and drop the rest of the body (up to ``drain_bytes`` in all). True once
        it ended, so the answer can be sent; false when the client went away (nobody
        to answer) — a body longer than the drain is answered without reading on."""
        while read <= self.drain_bytes:
            message = await receive()
            if message["type"] == "http.disconnect":
                return False
            read += len(message.get("body", b""))
            if not message.get("more_body", False):
                return True
        return True

    async def _refuse(self, send: Send) -> None:
        message = f"the request body exceeds {self.max_bytes} bytes"
        body = json.dumps({"error": {"code": "body_too_large", "message": message}}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
