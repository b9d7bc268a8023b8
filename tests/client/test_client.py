"""The typed client (``runtimes.client``) against a real local server over TCP — the
server ``perdure dev`` runs (uvicorn, ``make_server``) with the kit's agent — and
in-process through :class:`~runtimes.client.StreamingASGITransport`."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from core.testing import VirtualClock
from runtimes.actor import InvalidActorId
from runtimes.actor.api import ApiConfig, create_app
from runtimes.actor.memory import MemoryHost
from runtimes.actor.testing import KIT_TOKEN, KitTools, client_script, kit_config
from runtimes.client import (
    ActorClient,
    ApiError,
    ClientError,
    HostUnreachable,
    RequestRefused,
    ServerError,
    StreamingASGITransport,
)
from runtimes.local.host import HostConfig
from tests.local.support import TOKEN, Running, serve_in_thread

LIMIT_S = 30


@pytest.fixture
def tools() -> KitTools:
    return KitTools()


@pytest.fixture
def running(tmp_path: Path, tools: KitTools) -> Iterator[Running]:
    config = HostConfig(data_dir=tmp_path / "data", actor=kit_config(tools), idle_evict_s=30)
    with serve_in_thread(config) as r:
        yield r


async def test_the_kits_client_script_passes_against_a_real_server(running: Running) -> None:
    async with ActorClient(running.url, TOKEN) as client:
        via = await asyncio.wait_for(client_script(client, "alice", "alice-1"), LIMIT_S)
    assert via == "sse"


@pytest.mark.parametrize("via", ["sse", "poll"])
async def test_a_watch_builds_the_committed_view_from_its_frames(
    running: Running, via: str
) -> None:
    """Frames arrive as the run commits (the view first, then deltas), and the view they
    build is the committed view, over the stream and over the long poll alike."""
    async with ActorClient(running.url, TOKEN, poll_wait_s=5) as client:
        await client.ask("bob", "hello", timeout=LIMIT_S)
        async with client.watch("bob", via=via) as watch:  # type: ignore[arg-type]
            frames = aiter(watch)
            first = await asyncio.wait_for(anext(frames), LIMIT_S)
            assert first.type == "view" and watch.view is not None
            accepted = await client.submit("bob", "tools")
            kinds = []
            while True:
                frame = await asyncio.wait_for(anext(frames), LIMIT_S)
                kinds.append(frame.type)
                state = await client.submission("bob", accepted.id or 0)
                if state.settled and watch.view == (await client.view("bob")).model_dump():
                    break
            assert watch.via == via and "delta" in kinds, kinds
            assert state.answer is not None and state.answer.entry in watch.view["entries"]


async def test_a_locked_actor_is_not_taken_for_a_host_without_streams() -> None:
    """``423``: the host streams, the actor is held elsewhere; the watch says so rather
    than switching to the long poll for good."""
    host = MemoryHost(kit_config(), clock=VirtualClock())
    await host.start()
    door = NoStream(StreamingASGITransport(create_app(host, ApiConfig(KIT_TOKEN))), 423)
    try:
        async with ActorClient("http://kit", KIT_TOKEN, transport=door) as client:
            with pytest.raises(RequestRefused) as refused:
                async with client.watch("ivy") as watch:
                    await anext(aiter(watch))
            assert refused.value.status == 423 and client.streams is None
    finally:
        await host.close()


async def test_errors_carry_the_hosts_code_and_message(running: Running) -> None:
    async with ActorClient(running.url, "not-the-token-0123456789") as stranger:
        with pytest.raises(RequestRefused) as refused:
            await stranger.view("alice")
        assert refused.value.status == 401 and refused.value.message
    async with ActorClient(running.url, TOKEN) as client:
        with pytest.raises(RequestRefused) as refused:
            await client.view("nobody")
        assert (refused.value.status, refused.value.code) == (404, "unknown_actor")
        with pytest.raises(RequestRefused) as refused:
            await client.submit("alice", " ")
        assert (refused.value.status, refused.value.code) == (422, "invalid")
        assert "content" in refused.value.message
        with pytest.raises(RequestRefused) as refused:  # the stream is not retried as a poll
            async with client.watch("nobody") as watch:
                await anext(aiter(watch))
        assert refused.value.code == "unknown_actor" and client.streams is None
        assert not (running.data_dir / "nobody.sqlite").exists()
    async with ActorClient("http://127.0.0.1:9", TOKEN, timeout=5) as nowhere:
        with pytest.raises(HostUnreachable, match=r"127\.0\.0\.1:9"):
            await nowhere.view("alice")
        with pytest.raises(InvalidActorId):  # refused before any request is sent
            await nowhere.submit("../tokens", "hello")


async def test_wait_polls_until_settled_and_gives_up_at_its_timeout(
    running: Running, tools: KitTools
) -> None:
    gate = asyncio.Event()  # opened from this loop, polled from the server's

    async def closed() -> None:
        while not gate.is_set():  # noqa: ASYNC110 - the event belongs to another loop
            await asyncio.sleep(0.01)

    tools.gate = closed
    async with ActorClient(running.url, TOKEN, poll_wait_s=0.2) as client:
        accepted = await client.submit("carol", "tools", request_id="c-1")
        with pytest.raises(TimeoutError):
            await client.wait("carol", accepted, timeout=0.5)
        steered = await client.steer("carol", "and hurry")  # joins the run after its tools
        with pytest.raises(RequestRefused) as refused:
            await client.submit("carol", "later", when_busy="reject")
        assert (refused.value.status, refused.value.code) == (409, "conversation_busy")
        gate.set()
        state = await client.wait("carol", accepted, timeout=LIMIT_S)
        assert state.status == "done" and state.answer is not None
        by_request = await client.submission_by_request("carol", "c-1")
        assert by_request == state
        assert (await client.wait("carol", steered, timeout=LIMIT_S)).status == "done"
        users = [
            e["message"]["content"]
            for e in (await client.view("carol")).entries
            if e["kind"] == "user"
        ]
        assert users == ["tools", "and hurry"], users


async def test_listings_page_through_everything(running: Running) -> None:
    async with ActorClient(running.url, TOKEN, page_size=2) as client:
        for actor in ("d1", "d2", "d3", "d4", "d5"):
            await client.write(actor, "note", data={"actor": actor})
        assert [a async for a in client.actors()] == ["d1", "d2", "d3", "d4", "d5"]
        for text in ("one", "two", "three"):
            await client.ask("d1", text, timeout=LIMIT_S)
        submissions = [s async for s in client.submissions("d1")]
        assert [s.type for s in submissions] == ["write", "input", "input", "input"]
        assert [s.id for s in submissions] == sorted(s.id for s in submissions)
        done = [s async for s in client.submissions("d1", status="done", order="desc")]
        assert len(done) == 4 and done[0].id == submissions[-1].id
        entries = [e async for e in client.entries("d1")]
        assert entries == (await client.view("d1")).entries
        newest = [e async for e in client.entries("d1", order="desc")]
        assert newest == entries[::-1]
        forked = await client.fork("d1", entries[1]["id"])
        listed = [c async for c in client.conversations("d1")]
        assert [c.id for c in listed] == [1, forked.conversation_id]
        assert listed[1].parent == {"conversation_id": 1, "at_entry": entries[1]["id"]}


async def test_reminders_timers_abort_and_agent(running: Running) -> None:
    async with ActorClient(running.url, TOKEN) as client:
        await client.ask("erin", "hello", timeout=LIMIT_S)
        reminder = await client.remind("erin", "later", after=3600)
        timers = await client.timers("erin")
        assert [(t.task, t.message) for t in timers.timers] == [(reminder.task, "later")]
        assert timers.next_wake == reminder.at
        assert (await client.cancel_reminder("erin", reminder.task)).cancelled
        assert (await client.timers("erin")).timers == []
        assert (await client.abort("erin")).aborted == 0  # idle: nothing to mark
        agent = await client.configure("erin", instructions="be brief")
        assert agent.agent["instructions"] == "be brief"
        assert (await client.tasks("erin"))["tasks"] == []


async def test_a_minted_token_reads_its_actor_only(running: Running) -> None:
    async with ActorClient(running.url, TOKEN) as operator:
        await operator.ask("frank", "hello", timeout=LIMIT_S)
        await operator.ask("gina", "hello", timeout=LIMIT_S)
        minted = await operator.mint_token("frank", "read", 600)
        assert minted.actor == "frank" and minted.rights == "read"
    async with ActorClient(running.url, minted.token) as reader:
        assert (await reader.view("frank")).entries
        with pytest.raises(RequestRefused) as refused:
            await reader.submit("frank", "hello")
        assert refused.value.status == 403
        with pytest.raises(RequestRefused) as refused:
            await reader.view("gina")
        assert refused.value.status in (403, 404)
        with pytest.raises(RequestRefused):  # only the host's token mints
            await reader.mint_token("frank", "admin", 600)


class NoStream(httpx.AsyncBaseTransport):
    """A front door that cannot stream: the watch route answers ``status`` (JSON)."""

    def __init__(self, inner: httpx.AsyncBaseTransport, status: int) -> None:
        self.inner = inner
        self.status = status
        self.watches = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/watch"):
            self.watches += 1
            body = {"error": {"code": "not_supported", "message": "no streams here"}}
            return httpx.Response(self.status, json=body)
        return await self.inner.handle_async_request(request)


@pytest.mark.parametrize("status", [501, 500, 200])
async def test_auto_falls_back_to_the_long_poll_once_and_remembers(status: int) -> None:
    host = MemoryHost(kit_config(), clock=VirtualClock())
    await host.start()
    door = NoStream(StreamingASGITransport(create_app(host, ApiConfig(KIT_TOKEN))), status)
    try:
        async with ActorClient("http://kit", KIT_TOKEN, transport=door) as client:
            await client.ask("hana", "hello", timeout=LIMIT_S)
            for _ in range(2):
                async with client.watch("hana") as watch:
                    frame = await asyncio.wait_for(anext(aiter(watch)), LIMIT_S)
                assert frame.type == "view" and watch.via == "poll"
            assert client.streams is False and door.watches == 1
            with pytest.raises(ClientError) as failed:  # asked for a stream: no fallback
                async with client.watch("hana", via="sse") as watch:
                    await anext(aiter(watch))
            if status != 200:
                assert isinstance(failed.value, ServerError) and failed.value.status == status
                assert failed.value.message == "no streams here"
    finally:
        await host.close()


class Flaky(httpx.AsyncBaseTransport):
    """A front door whose first ``times`` polls are answered ``status`` (with
    ``Retry-After``), as a restarting host behind a proxy answers."""

    def __init__(self, inner: httpx.AsyncBaseTransport, status: int, times: int) -> None:
        self.inner = inner
        self.status = status
        self.left = times

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "GET" and self.left > 0:
            self.left -= 1
            body = {"error": {"code": "busy", "message": "come back"}}
            return httpx.Response(self.status, json=body, headers={"retry-after": "0.01"})
        return await self.inner.handle_async_request(request)


@pytest.mark.parametrize("status", [423, 502, 503, 504])
async def test_polls_ask_again_when_the_host_says_come_back(status: int) -> None:
    host = MemoryHost(kit_config(), clock=VirtualClock())
    await host.start()
    door = Flaky(StreamingASGITransport(create_app(host, ApiConfig(KIT_TOKEN))), status, 0)
    try:
        async with ActorClient("http://kit", KIT_TOKEN, transport=door) as client:
            accepted = await client.submit("jo", "hello")
            door.left = 3
            state = await client.wait("jo", accepted, timeout=LIMIT_S)
            assert state.status == "done" and door.left == 0
            door.left = 2
            async with client.watch("jo", via="poll") as watch:
                frame = await asyncio.wait_for(anext(aiter(watch)), LIMIT_S)
            assert frame.type == "view" and door.left == 0
            door.left = 1  # a plain read is not retried: the caller sees the answer
            with pytest.raises(ApiError) as failed:
                await client.view("jo")
            assert failed.value.status == status and failed.value.retry_after == 0.01
    finally:
        await host.close()
