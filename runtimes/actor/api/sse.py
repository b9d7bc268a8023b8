"""``GET .../conversations/{cid}/watch``: a conversation's watch as Server-Sent Events.

The stream is a plain ASGI response that owns everything it uses, from opening the
actor to stopping the watch, in one ``try``/``finally`` in one coroutine: nothing can be
left mounted whatever ends it (the client going away, the actor closing, the host
shutting down, a cancelled server task).

Wire format (``text/event-stream``), one event per watch frame::

    event: view                      the committed view: {"type": "view", "value": ...}
    data: {...}

    event: delta                     one commit: {"type": "delta", "seq": n, "ops": [...]}
    id: 17
    data: {...}

    : ping                           a heartbeat comment while nothing happens

    event: end                       the server ended the stream: {"reason": ...}
    data: {"reason": "shutting_down"}

A ``replace`` frame (a consumer that fell 100 frames behind) arrives as ``event:
replace`` with the newest view. ``end`` reasons: ``shutting_down`` (the host is
stopping), ``closed`` (the actor was closed under the stream), ``retired``. A client
that loses the stream reconnects and gets the *current view* again, then deltas from
there: a watch converges, it does not replay (``Last-Event-ID`` is ignored).
"""

from __future__ import annotations

import asyncio
import json
from contextlib import AsyncExitStack
from typing import Any

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from core.harness import Frame, Watch
from runtimes.actor.host import Host

__all__ = ["WatchStream", "encode_frame"]

_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),  # reverse proxies: do not buffer the stream
]
PING = b": ping\n\n"


def encode_frame(frame: Frame) -> bytes:
    """One SSE event: the frame type as event name, its seq (if any) as id, JSON data
    (``json.dumps`` escapes newlines, so the data is always one line)."""
    event = str(frame.get("type", "message"))
    seq = frame.get("seq")
    head = f"event: {event}\n" + (f"id: {seq}\n" if isinstance(seq, int) else "")
    data = json.dumps(frame, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return f"{head}data: {data}\n\n".encode()


class WatchStream(Response):
    """Streams the watch of conversation ``conversation_id`` of ``actor``.

    Until the response starts, errors propagate (the API's handlers turn them into the
    structured 4xx/5xx: unknown actor or conversation, host shutting down). The actor is
    held open (``host.use``) for as long as the stream lasts: a watched actor is in use,
    so it is not evicted; its timers keep firing in this process.
    """

    media_type = "text/event-stream"

    def __init__(self, host: Host, actor: str, conversation_id: int, *, heartbeat_s: float) -> None:
        super().__init__(status_code=200, media_type=self.media_type)
        self.host = host
        self.actor = actor
        self.conversation_id = conversation_id
        self.heartbeat_s = heartbeat_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async with AsyncExitStack() as stack:
            harness = await stack.enter_async_context(self.host.use(self.actor))
            conversation = await harness.conversation(self.conversation_id)
            watch = await conversation.watch()
            stack.callback(watch.stop)  # detaches it: the mount goes with its last watch
            await send({"type": "http.response.start", "status": 200, "headers": _HEADERS})
            finished, reason = await self.host.until_shutdown(
                _pump(watch, receive, send, self.heartbeat_s)
            )
            if not finished:
                reason = "shutting_down"
            if reason is not None:  # None: the client went away, nobody to tell
                end = encode_frame({"type": "end", "reason": reason})
                await send({"type": "http.response.body", "body": end, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _pump(watch: Watch, receive: Receive, send: Send, heartbeat_s: float) -> str | None:
    """Send frames as they come and a ping after ``heartbeat_s`` of silence. Returns the
    watch's end reason, or ``None`` once the client disconnected."""
    gone: asyncio.Future[Any] = asyncio.ensure_future(_disconnected(receive))
    frames: asyncio.Future[Any] | None = None
    try:
        while True:
            if frames is None:
                frames = asyncio.ensure_future(_next_frames(watch))
            done, _ = await asyncio.wait(
                {frames, gone}, timeout=heartbeat_s, return_when=asyncio.FIRST_COMPLETED
            )
            if gone in done:
                return None
            if frames not in done:
                await send({"type": "http.response.body", "body": PING, "more_body": True})
                continue
            batch: list[Frame] | None = frames.result()
            frames = None
            if batch is None:
                return watch.reason or "closed"
            body = b"".join(encode_frame(frame) for frame in batch)
            await send({"type": "http.response.body", "body": body, "more_body": True})
    finally:
        await _cancel(gone, frames)


async def _next_frames(watch: Watch) -> list[Frame] | None:
    """The next frame and every frame already queued behind it; ``None`` once it ended."""
    try:
        batch = [await anext(watch)]
        while watch.pending:  # queued frames come back without suspending
            batch.append(await anext(watch))
    except StopAsyncIteration:
        return None
    return batch


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _cancel(*futures: asyncio.Future[Any] | None) -> None:
    pending = [f for f in futures if f is not None and not f.done()]
    for future in pending:
        future.cancel()
    if pending:
        await asyncio.wait(pending)  # raises only if *this* task is cancelled meanwhile
