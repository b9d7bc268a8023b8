"""The hibernatable WebSocket watch on CPython: snapshot then deltas, a late joiner, and
sockets that outlive their isolate (hibernation / eviction) getting the current view
first. ``Sockets`` stands in for the WebSocket half of ``ctx``: like workerd it keeps
accepted sockets (with their attachments) across isolates of the same object."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from core.testing import VirtualClock
from runtimes.actor.testing import kit_config
from runtimes.cloudflare.actor import DurableActor
from runtimes.cloudflare.watch import SYNC, WatchHub
from tests.cloudflare.standin import DurableObjectHome


class Socket:
    """A server-side WebSocket: what it was sent, its attachment, whether it closed."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.attachment: Any = None
        self.closed: tuple[int, str] | None = None

    def send(self, message: str) -> None:
        assert self.closed is None, "sent on a closed socket"
        self.sent.append(json.loads(message))

    def close(self, code: int = 1000, reason: str = "") -> None:
        self.closed = (code, reason)

    def serializeAttachment(self, value: Any) -> None:
        self.attachment = json.loads(json.dumps(value))  # structured clone: a copy

    def deserializeAttachment(self) -> Any:
        return self.attachment

    def kinds(self) -> list[str]:
        return [f["type"] for f in self.sent]


class Sockets:
    """``ctx.acceptWebSocket`` / ``ctx.getWebSockets``, kept across isolates."""

    def __init__(self) -> None:
        self.accepted: list[tuple[Socket, list[str]]] = []

    def acceptWebSocket(self, ws: Socket, tags: list[str] = []) -> None:  # noqa: B006
        self.accepted.append((ws, list(tags)))

    def getWebSockets(self, tag: str | None = None) -> list[Socket]:
        return [
            ws for ws, tags in self.accepted if ws.closed is None and (tag is None or tag in tags)
        ]


@pytest.fixture
def home(tmp_path: Path) -> Iterator[DurableObjectHome]:
    home = DurableObjectHome(tmp_path / "do.sqlite")
    yield home
    home.close()


async def until(predicate: Callable[[], bool], turns: int = 5000) -> None:
    for _ in range(turns):
        if predicate():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition not reached")


def _isolate(home: DurableObjectHome) -> DurableActor:
    return DurableActor(
        home.open(), kit_config(), clock=VirtualClock(), alarm_report=print, actor="w-1"
    )


def _texts(view_frame: dict[str, Any]) -> list[str]:
    return [json.dumps(e) for e in view_frame["value"]["entries"]]


async def test_snapshot_then_deltas_and_a_late_joiner_gets_the_current_view(
    home: DurableObjectHome,
) -> None:
    host = _isolate(home)
    sockets = Sockets()
    hub = WatchHub(host, sockets)
    async with host.serving() as harness:
        root = await harness.root(agent=kit_config().default_agent)
    first = Socket()
    await hub.accept(first, "w-1", root.id)
    await until(lambda: first.kinds() == ["view"])
    assert first.sent[0]["value"]["entries"] == []
    async with host.serving() as harness:
        sub = await (await harness.root()).submit("hello")
    await sub.wait()
    await until(lambda: "delta" in first.kinds())
    assert first.kinds()[0] == "view" and set(first.kinds()[1:]) == {"delta"}
    late = Socket()
    await hub.accept(late, "w-1", root.id)
    await until(lambda: late.kinds()[:1] == ["view"])
    kinds = [e["kind"] for e in late.sent[0]["value"]["entries"]]
    assert kinds == ["user", "assistant"], kinds  # everything so far, as one view
    await hub.closed(first, 1000, "bye")
    assert first.closed == (1000, "bye") and hub.pumping == 1
    await hub.stop_all()
    await host.close()


async def test_sockets_that_outlive_the_isolate_get_the_current_view_first(
    home: DurableObjectHome,
) -> None:
    sockets = Sockets()
    host = _isolate(home)
    hub = WatchHub(host, sockets)
    async with host.serving() as harness:
        root = await harness.root(agent=kit_config().default_agent)
    ws = Socket()
    await hub.accept(ws, "w-1", root.id)
    await until(lambda: ws.kinds() == ["view"])
    await hub.stop_all()  # the isolate hibernates / is evicted: no pump survives it
    await host.close()

    host = _isolate(home)  # a new isolate; the socket is still connected
    async with host.serving() as harness:
        sub = await (await harness.root()).submit("while you slept")
    await sub.wait()
    assert ws.kinds() == ["view"]  # nothing was pumping: that commit was never sent
    hub = WatchHub(host, sockets)
    await hub.message(ws, "anything")  # the client's message wakes the object
    await until(lambda: len(ws.kinds()) == 2)
    assert ws.kinds() == ["view", "view"]
    kinds = [e["kind"] for e in ws.sent[1]["value"]["entries"]]
    assert kinds == ["user", "assistant"], kinds  # it converges on the current view
    assert hub.revive() == 0  # already pumping: no second pump
    await hub.message(ws, SYNC)  # an explicit resync: a fresh view again
    await until(lambda: len(ws.kinds()) == 3)
    assert ws.kinds()[2] == "view"
    await hub.stop_all()
    await host.close()


async def test_a_watch_on_an_unknown_conversation_is_refused_before_accepting(
    home: DurableObjectHome,
) -> None:
    host = _isolate(home)
    sockets = Sockets()
    async with host.serving() as harness:
        await harness.root(agent=kit_config().default_agent)
    with pytest.raises(Exception, match="99"):  # the API's own 404 error
        await WatchHub(host, sockets).accept(Socket(), "w-1", 99)
    assert sockets.accepted == []
    await host.close()
