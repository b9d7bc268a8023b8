"""``GET .../conversations/{cid}/deltas?after=SEQ&wait=S``: a conversation's watch as a
long poll, for hosts and proxies that cannot hold a stream open (Lambda answers whole
responses only).

The frames are the watch's own (:mod:`core.harness.watch`, the frames SSE sends), so
there is one delta path. What a long poll adds is a cursor: every answer carries
``next``, the commit seq its frames bring the client up to, and the client passes it
back as ``after``. The answer to ``after``:

* absent — one ``view`` frame, the committed view as of ``next``; at once;
* covered — every ``delta`` frame committed after it, at once if there is one, else the
  first ones to come within ``wait`` seconds (capped by the host's ``max_wait_s``); an
  empty ``frames`` list when the time ran out (``next`` is ``after`` again);
* not covered (the client is too far behind, or its cursor is from elsewhere) — one
  ``replace`` frame with the current view, as a lagging watch gets: a watch converges,
  it does not replay.

To answer consecutive polls with deltas rather than whole views, each app keeps a
*feed* per watched conversation: a watch left mounted between polls plus its last
:data:`RETAINED_FRAMES` frames and the view they apply to. A feed is dropped after
:data:`FEED_LINGER_MS` without a poll (or with its actor: a closed harness ends its
watches), so an abandoned cursor costs a bounded amount of memory; a poll after that
gets a ``replace``. On Lambda the app lives for one invocation, so every invocation
starts a fresh feed at the replica's seq: a cursor equal to it is still covered.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from typing import Annotated, Any, Literal, TypeAlias, cast

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, Field

from core import JsonObject, JsonValue, json_copy
from core.docops import apply_ops
from core.harness import Frame, Watch
from remote_env.json_body import UniqueKeysRoute
from runtimes.actor.api.routes import (
    _ERRORS,
    ActorId,
    ConversationId,
    HostDep,
    SettingsDep,
)
from runtimes.actor.host import Host

__all__ = ["FEED_LINGER_MS", "RETAINED_FRAMES", "DeltaFeeds", "DeltaPage", "router"]

RETAINED_FRAMES = 100
"""Frames a feed keeps for clients that poll behind its newest one (as many as a
lagging watch queues before it folds them into a ``replace``)."""
FEED_LINGER_MS = 60_000
"""A feed nobody polled for this long is unmounted."""
MAX_FEEDS = 256
"""Feeds per app; the least recently polled goes first."""


class ViewFrame(BaseModel):
    """The whole view: ``view`` (no cursor given) or ``replace`` (the cursor was not
    covered). Apply nothing: it *is* the conversation as of ``seq``."""

    type: Literal["view", "replace"]
    seq: int | None = Field(description="the commit seq the view is current as of")
    value: dict[str, Any] = Field(description="the view (as GET .../view returns it)")


class DeltaFrame(BaseModel):
    """One commit's change to the view: JSON ops to apply in order."""

    type: Literal["delta"]
    seq: int = Field(description="the commit seq")
    ops: list[Any]


class DeltaPage(BaseModel):
    """A long poll's answer: apply ``frames`` in order, then poll with ``after=next``."""

    frames: list[ViewFrame | DeltaFrame]
    next: int | None = Field(
        description="the seq to pass as ``after`` next (null: the host's storage does not "
        "report seqs; poll without ``after``)"
    )


_Answer: TypeAlias = tuple[list[Frame], int | None]
"""Frames and the ``next`` cursor they bring a client to."""


class _Feed:
    """A watch kept mounted between polls, the view as of its newest frame and the last
    frames. Every delta committed after ``floor`` is in ``history``."""

    def __init__(self, watch: Watch, first: Frame, now: int) -> None:
        self.watch = watch
        self.value = _view_of(first)
        self.seq = watch.seq
        self.floor = self.seq
        self.history: deque[Frame] = deque()
        self.used = now
        self.polls = 0  # polls in flight: a feed in use is never swept
        self.waiting = asyncio.Lock()  # one poll at a time waits on the watch

    @property
    def alive(self) -> bool:
        return self.watch.reason is None

    async def absorb_queued(self) -> None:
        # Queued frames come back from the watch without suspending.
        while self.watch.pending:
            self._absorb(await anext(self.watch))
        self.seq = self.watch.seq

    async def absorb_next(self) -> bool:
        """Wait for the next frame (and take those queued behind it); ``False``: the
        watch ended."""
        try:
            self._absorb(await anext(self.watch))
        except StopAsyncIteration:
            return False
        await self.absorb_queued()
        return True

    def _absorb(self, frame: Frame) -> None:
        if frame.get("type") == "delta":
            ops = cast(list[JsonValue], json_copy(frame.get("ops")))
            self.value = _as_object(apply_ops(self.value, ops))
            self.history.append(frame)
            if len(self.history) > RETAINED_FRAMES:
                self.floor = _seq(self.history.popleft())
        else:  # a replace: the watch's own backlog overflowed
            self.value = _view_of(frame)
            self.history.clear()
            self.floor = _seq(frame)

    def answer(self, after: int) -> _Answer:
        """The frames a client at ``after`` is missing — the deltas since, or one
        ``replace`` when they are not all here; none: it is up to date — and the cursor
        they bring it to (taken together: another poll may absorb more right after)."""
        if self.floor is None or self.seq is None or not self.floor <= after <= self.seq:
            return self.view("replace")
        return [f for f in self.history if _seq(f) > after], self.seq

    def view(self, kind: Literal["view", "replace"]) -> _Answer:
        return [{"type": kind, "seq": self.seq, "value": json_copy(self.value)}], self.seq


class DeltaFeeds:
    """The feeds of one app, keyed by actor and conversation."""

    def __init__(self) -> None:
        self._feeds: OrderedDict[tuple[str, int], _Feed] = OrderedDict()

    async def poll(
        self, host: Host, actor: str, conversation_id: int, after: int | None, wait_s: float
    ) -> DeltaPage:
        async with host.use(actor) as harness:
            conversation = await harness.conversation(conversation_id)  # 404 if unknown
            now = host.clock.now()
            self._sweep(now)
            key = (actor, conversation_id)
            feed = self._feeds.get(key)
            if feed is None or not feed.alive:
                watch = await conversation.watch()
                feed = _Feed(watch, await anext(watch), now)
                self._feeds[key] = feed
            self._feeds.move_to_end(key)
            feed.used = now
            feed.polls += 1
            try:
                frames, next_seq = await self._frames(host, feed, after, wait_s)
            finally:
                feed.polls -= 1
                feed.used = host.clock.now()
            if not feed.alive:
                self._drop(key, feed)
        return DeltaPage.model_validate({"frames": frames, "next": next_seq})

    async def _frames(self, host: Host, feed: _Feed, after: int | None, wait_s: float) -> _Answer:
        await feed.absorb_queued()
        if after is None:
            return feed.view("view")
        found = feed.answer(after)
        if found[0] or wait_s <= 0:
            return found

        async def wait() -> _Answer:
            async with feed.waiting:
                # Another poll may have taken frames while this one queued for the lock.
                while not (found := feed.answer(after))[0]:
                    if not await feed.absorb_next():
                        break
                return found

        try:
            # Ends early when the host shuts down, so a long poll never holds up an exit.
            finished, answer = await host.until_shutdown(asyncio.wait_for(wait(), wait_s))
        except TimeoutError:
            finished, answer = False, None
        if not finished or answer is None or not answer[0]:
            # Up to date (past commits that did not change this view, if any).
            return [], max(after, feed.seq or after)
        return answer

    def _sweep(self, now: int) -> None:
        stale = [
            (key, feed)
            for key, feed in self._feeds.items()
            if feed.polls == 0 and (now - feed.used > FEED_LINGER_MS or not feed.alive)
        ]
        idle = [(k, f) for k, f in self._feeds.items() if f.polls == 0 and (k, f) not in stale]
        excess = len(self._feeds) - len(stale) - MAX_FEEDS + 1
        stale += idle[: max(0, excess)]  # oldest polled first (the dict keeps that order)
        for key, feed in stale:
            self._drop(key, feed)

    def _drop(self, key: tuple[str, int], feed: _Feed) -> None:
        if self._feeds.get(key) is feed:
            del self._feeds[key]
        feed.watch.stop()  # unmounts the view once its last watch goes


def _view_of(frame: Frame) -> JsonObject:
    return _as_object(json_copy(frame.get("value")))


def _as_object(value: JsonValue) -> JsonObject:
    assert isinstance(value, dict)
    return value


def _seq(frame: Frame) -> int:
    seq = frame.get("seq")
    return seq if isinstance(seq, int) else -1


async def _feeds(request: Request) -> DeltaFeeds:
    feeds: DeltaFeeds = request.app.state.delta_feeds
    return feeds


# auth and the JSON gate: see routes.router
router = APIRouter(prefix="/v1/actors/{actor}", responses=_ERRORS, route_class=UniqueKeysRoute)


@router.get("/conversations/{conversation_id}/deltas", response_model=DeltaPage)
async def deltas(
    actor: ActorId,
    conversation_id: ConversationId,
    host: HostDep,
    settings: SettingsDep,
    feeds: Annotated[DeltaFeeds, Depends(_feeds)],
    after: Annotated[
        int | None,
        Query(ge=0, le=2**63 - 1, description="the ``next`` of the previous answer"),
    ] = None,
    wait: Annotated[
        float,
        Query(ge=0, allow_inf_nan=False, description="long-poll up to this many seconds"),
    ] = 0,
) -> DeltaPage:
    """The watch as a long poll: without ``after``, the view (a ``view`` frame) and the
    cursor ``next``; with ``after``, the ``delta`` frames committed since it — waiting
    up to ``wait`` seconds (capped by the host) for the first one — or one ``replace``
    frame with the current view when the client is too far behind. Poll again with
    ``after=next``."""
    return await feeds.poll(host, actor, conversation_id, after, min(wait, settings.max_wait_s))
