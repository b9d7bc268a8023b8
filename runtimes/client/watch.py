"""A conversation's watch, read over Server-Sent Events or the long poll.

Both carry the same frames (:class:`~runtimes.client.models.Frame`): the committed view
first, then one ``delta`` per commit that changed it. :class:`Watch` also keeps the view
those frames build (:attr:`Watch.view`), so a caller can read the conversation as of the
last frame without applying ops itself.

``via``: ``"sse"`` (``GET .../watch``), ``"poll"`` (``GET .../deltas``, for hosts and
proxies that cannot hold a stream open: Lambda) or ``"auto"``: the stream where the host
serves one, else the long poll. Under ``auto`` an answer to the stream request that says
the host serves no stream there (a ``200`` that is not an event stream, ``405``,
``406``, ``501``, or a front door's ``500``/``502``/``504``) switches the watch to the
long poll, and the client remembers that for its later watches; any other error (a bad
token, an unknown actor, ``423``) is raised, as the long poll would meet it too.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, cast

import httpx

from runtimes.client.errors import AGAIN, ApiError, ClientError
from runtimes.client.models import Frame

if TYPE_CHECKING:
    from runtimes.client.client import ActorClient

__all__ = ["Via", "Watch"]

Via: TypeAlias = Literal["auto", "sse", "poll"]

# Answers that say the stream is not served here: the method or the media type refused,
# the route not supported (AWS Lambda: 501), a front door that fails on a stream or cannot
# pass one on (500, 502, 504). Any other error — a refusal (bad token, unknown actor),
# 423 (held elsewhere), 503 (shutting down) — is one the long poll would meet as well:
# it is raised, not fallen back on.
_NOT_STREAMED = frozenset({405, 406, 500, 501, 502, 504})


class Watch:
    """``async with client.watch(actor) as watch: async for frame in watch: ...``

    Iterating yields frames until the host ends the stream (an ``end`` frame, which is
    yielded last) or the caller stops; the long poll never ends by itself. A lost
    stream is not reopened: open a new watch, which starts with the current view."""

    def __init__(self, client: ActorClient, actor: str, conversation_id: int, via: Via) -> None:
        self._client = client
        self._path = f"/v1/actors/{actor}/conversations/{conversation_id}"
        self._via: Via = via
        self._frames: AsyncGenerator[Frame, None] | None = None
        self.view: dict[str, Any] | None = None
        """The conversation's view as of the last frame (``None`` before the first)."""
        self.seq: int | None = None
        """The commit seq of the last frame that carried one."""

    @property
    def via(self) -> Via:
        """How the frames arrive: ``sse`` or ``poll`` once the watch started."""
        return self._via

    async def __aenter__(self) -> Watch:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop watching (closes the stream: the host unmounts the watch)."""
        frames, self._frames = self._frames, None
        if frames is not None:
            await frames.aclose()

    def __aiter__(self) -> Watch:
        return self

    async def __anext__(self) -> Frame:
        if self._frames is None:
            self._frames = self._run()
        frame = await anext(self._frames)
        self._absorb(frame)
        return frame

    def _absorb(self, frame: Frame) -> None:
        if frame.type in ("view", "replace") and frame.value is not None:
            self.view = frame.value
        elif frame.type == "delta" and self.view is not None:
            from core.docops import apply_ops  # the view's own op semantics (one definition)

            view = apply_ops(self.view, frame.ops or [])
            self.view = view if isinstance(view, dict) else None
        if frame.seq is not None:
            self.seq = frame.seq

    async def _run(self) -> AsyncGenerator[Frame, None]:
        # Inner generators are closed here, not left to the garbage collector (which
        # would run their cleanup — closing the stream — at some later time).
        if self._via != "poll":
            async with aclosing(self._stream()) as frames:  # under auto: none, if it fell back
                async for frame in frames:
                    yield frame
        if self._via == "poll":
            async with aclosing(self._poll()) as frames:
                async for frame in frames:
                    yield frame

    async def _stream(self) -> AsyncGenerator[Frame, None]:
        """Frames over SSE; returns without a frame when ``auto`` falls back."""
        from remote_env.client.sse import SseEvent, parse_sse  # the project's one SSE parser

        http = self._client.http
        timeout = httpx.Timeout(self._client.timeout, read=self._client.stream_read_s)
        async with (
            self._client.guard(),
            http.stream("GET", f"{self._path}/watch", timeout=timeout) as response,
        ):
            kind = response.headers.get("content-type", "")
            if response.status_code != 200 or not kind.startswith("text/event-stream"):
                await response.aread()
                served = response.status_code not in _NOT_STREAMED and not response.is_success
                if self._via == "sse" or served:
                    if response.is_success:
                        raise ClientError(f"the host answered the watch with {kind!r}, not SSE")
                    raise self._client.error_of(response)
                # ``auto``: this host serves no stream (Lambda answers whole responses).
                self._client.streams = False
                self._via = "poll"
                return
            self._client.streams = True
            self._via = "sse"
            # parse_sse is an async generator (typed as the iterator it returns).
            events = cast(AsyncGenerator[SseEvent, None], parse_sse(response.aiter_lines()))
            async with aclosing(events):
                async for event in events:
                    frame = Frame.model_validate(json.loads(event.data))
                    yield frame
                    if frame.type == "end":
                        return

    async def _poll(self) -> AsyncGenerator[Frame, None]:
        self._via = "poll"
        after: int | None = None
        while True:
            params: dict[str, Any] = {"wait": self._client.poll_wait_s}
            if after is not None:
                params["after"] = after
            try:
                page = await self._client.get_json(
                    f"{self._path}/deltas", params, wait=self._client.poll_wait_s
                )
            except ApiError as error:
                if error.status not in AGAIN:  # e.g. held elsewhere: ask again once free
                    raise
                await self._client.pause(error)
                continue
            for item in page.get("frames", []):
                yield Frame.model_validate(item)
            after = page.get("next")
