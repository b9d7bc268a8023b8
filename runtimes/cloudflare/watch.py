"""A conversation's watch over hibernatable WebSockets (``ctx.acceptWebSocket``).

The SSE watch of the actor API holds the request open, so the Durable Object cannot
hibernate under it; the SDK's ASGI WebSocket bridge calls ``server.accept()``, which is
not hibernatable either. This watch is written against the Durable Object API instead:

* :meth:`WatchHub.accept` (the upgrade request) checks the conversation exists, accepts
  the server socket with ``ctx.acceptWebSocket(ws, [tag])`` and stores the conversation
  id in the socket's attachment (a JSON string; it survives hibernation), then starts the socket's
  pump: the conversation's watch, whose first frame is the committed view and every
  later frame a delta, each sent as one JSON text message (the SSE ``data`` payload);
* while the isolate lives, each socket has its own pump, so a late joiner gets the
  current view first, then the deltas after it;
* after hibernation or an eviction the sockets are still connected but no pump runs
  (deltas committed meanwhile were never sent). Any event that wakes the object —
  ``webSocketMessage``, a request, an alarm — calls :meth:`WatchHub.revive`, which
  starts a pump for every socket ``ctx.getWebSockets()`` returns without one: that
  socket gets the current view first, and converges (a watch does not replay);
* a client message ``"sync"`` restarts its socket's pump (a fresh view);
  :meth:`WatchHub.closed` (``webSocketClose``) stops it.

A pump does not hold the actor in use (unlike the SSE stream): holding it would keep
the request heartbeat armed for as long as a client watches, and the object could never
hibernate. The open actor stays open in the isolate anyway; a Durable Object host parks
only when told to.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
from collections.abc import Sequence
from typing import Any, Protocol

from runtimes.cloudflare.actor import DurableActor

__all__ = ["SYNC", "SocketHost", "WatchHub", "WatchSocket"]

SYNC = "sync"
_TAG = "watch:"


class WatchSocket(Protocol):
    """The server end of a hibernatable WebSocket (workerd's ``WebSocket``)."""

    def send(self, message: str, /) -> Any: ...

    def close(self, code: int = 1000, reason: str = "", /) -> Any: ...

    def serializeAttachment(self, value: Any, /) -> Any: ...

    def deserializeAttachment(self) -> Any: ...


class SocketHost(Protocol):
    """The WebSocket half of ``ctx`` (``DurableObjectState``)."""

    def acceptWebSocket(self, ws: Any, tags: Sequence[str] = (), /) -> Any: ...

    def getWebSockets(self, tag: str | None = None, /) -> Any: ...


def _attachment(ws: Any) -> dict[str, Any] | None:
    value = ws.deserializeAttachment()
    if not isinstance(value, str):
        return None  # not one of our sockets
    meta = json.loads(value)
    return meta if isinstance(meta, dict) else None


class WatchHub:
    """The watches of one Durable Object's actor over hibernatable sockets."""

    def __init__(self, host: DurableActor, ctx: SocketHost) -> None:
        self._host = host
        self._ctx = ctx
        self._pumps: dict[str, asyncio.Task[None]] = {}

    async def accept(self, ws: WatchSocket, actor: str, conversation_id: int) -> None:
        """Accept the upgrade's server socket for ``conversation_id`` of ``actor``.
        Raises (before accepting) what the API raises for an unknown actor or
        conversation, so the caller answers the upgrade with that error."""
        async with self._host.use(actor) as harness:
            await harness.conversation(conversation_id)
        key = secrets.token_hex(8)
        # A JSON string: a Python dict would cross to JavaScript as a proxy, which the
        # structured clone behind serializeAttachment refuses.
        ws.serializeAttachment(json.dumps({"key": key, "conversation_id": conversation_id}))
        self._ctx.acceptWebSocket(ws, [f"{_TAG}{conversation_id}"])
        self._start(key, ws, conversation_id)

    async def message(self, ws: WatchSocket, message: Any) -> None:
        """``webSocketMessage``: ``"sync"`` sends the current view again."""
        meta = _attachment(ws)
        if meta is None:
            return
        if message == SYNC:
            await self._stop(meta["key"])
            self._start(meta["key"], ws, int(meta["conversation_id"]))
        self.revive()

    async def closed(self, ws: WatchSocket, code: int, reason: str) -> None:
        """``webSocketClose``: stop the socket's pump and complete the close."""
        meta = _attachment(ws)
        if meta is not None:
            await self._stop(meta["key"])
        # 1005/1006 are reported, never sent; a socket the peer already closed may throw.
        with contextlib.suppress(Exception):
            ws.close(code if 1000 <= code < 5000 and code not in (1005, 1006) else 1000, reason)

    def revive(self) -> int:
        """Start a pump for every connected socket without one (after hibernation or
        an eviction); returns how many were started."""
        started = 0
        for ws in self._ctx.getWebSockets():
            meta = _attachment(ws)
            if meta is None or meta["key"] in self._pumps:
                continue
            self._start(meta["key"], ws, int(meta["conversation_id"]))
            started += 1
        return started

    @property
    def pumping(self) -> int:
        return len(self._pumps)

    async def stop_all(self) -> None:
        for key in list(self._pumps):
            await self._stop(key)

    def _start(self, key: str, ws: WatchSocket, conversation_id: int) -> None:
        task = asyncio.ensure_future(self._pump(ws, conversation_id))
        self._pumps[key] = task
        task.add_done_callback(
            lambda t: self._pumps.pop(key, None) if self._pumps.get(key) is t else None
        )

    async def _stop(self, key: str) -> None:
        task = self._pumps.pop(key, None)
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _pump(self, ws: WatchSocket, conversation_id: int) -> None:
        actor = self._host.actor_name
        if actor is None:
            return
        async with self._host.use(actor) as harness:  # opens the actor; not held (above)
            conversation = await harness.conversation(conversation_id)
            watch = await conversation.watch()
        try:
            async for frame in watch:
                ws.send(json.dumps(frame, ensure_ascii=False, separators=(",", ":")))
            ws.send(json.dumps({"type": "end", "reason": watch.reason or "closed"}))
        finally:
            watch.stop()
