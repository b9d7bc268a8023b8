"""The local host's admission journal: a new actor's first input accepted before its file
is open, answered ``mailed`` and moved into the actor once, under its request id."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from runtimes.actor.api import ApiConfig, create_app
from runtimes.client import ActorClient
from runtimes.local.host import ActorHost, ActorLock, actor_paths
from runtimes.local.host.journal import JOURNAL_NAME
from tests.local.support import TOKEN, host_config

ROOT_SUBMISSIONS = "/v1/actors/{actor}/conversations/1/submissions"


@asynccontextmanager
async def api(data: Path, **overrides: Any) -> AsyncIterator[tuple[ActorHost, httpx.AsyncClient]]:
    """The host (started) and a client of its app, in this process."""
    host = ActorHost(host_config(data, **overrides))
    app = create_app(host, ApiConfig(TOKEN))
    await host.start()
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app),
            base_url="http://host",
            headers={"authorization": f"Bearer {TOKEN}"},
            timeout=30,
        ) as client:
            yield host, client
    finally:
        await host.close()


def journal_rows(data: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(data / JOURNAL_NAME) as conn:
        return conn.execute("SELECT actor, request_id FROM journaled ORDER BY seq").fetchall()


async def settled(client: httpx.AsyncClient, actor: str, request_id: str) -> dict[str, Any]:
    r = await client.get(
        ROOT_SUBMISSIONS.format(actor=actor) + "/by-request",
        params={"request_id": request_id, "wait": 20},
    )
    assert r.status_code == 200, r.text
    state: dict[str, Any] = r.json()
    return state


async def submissions(client: httpx.AsyncClient, actor: str) -> list[dict[str, Any]]:
    r = await client.get(ROOT_SUBMISSIONS.format(actor=actor))
    assert r.status_code == 200, r.text
    found: list[dict[str, Any]] = r.json()["submissions"]
    return found


def submit(actor: str) -> str:
    return f"/v1/actors/{actor}/submissions"


async def test_a_new_actors_first_input_is_journaled_answered_mailed_and_moved_in_once(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    async with api(data, journal_when_opening=0) as (_, client):
        body = {"type": "input", "content": "hello", "request_id": "first"}
        r = await client.post(submit("ann"), json=body)
        assert r.status_code == 202, r.text
        assert r.json() == {
            "id": None,
            "conversation_id": 1,
            "type": "input",
            "status": "mailed",
            "request_id": "first",
        }
        state = await settled(client, "ann", "first")
        assert state["status"] == "done" and state["answer"]["text"] == "echo: hello", state
        # A retry meets the moved input: the original, with its id, nothing new.
        again = await client.post(submit("ann"), json=body)
        assert again.status_code == 202 and again.json()["id"] == state["id"], again.text
        assert [s["request_id"] for s in await submissions(client, "ann")] == ["first"]
        # The actor's next input is admitted as on any open actor.
        second = await client.post(submit("ann"), json={"type": "input", "content": "more"})
        assert second.status_code == 202 and second.json()["id"] is not None, second.text
        listed = await client.get("/v1/actors")
        assert listed.json()["actors"] == [{"id": "ann"}]
    assert journal_rows(data) == []


async def test_without_a_request_id_the_host_chooses_one_to_poll_by(tmp_path: Path) -> None:
    async with api(tmp_path / "data", journal_when_opening=0) as (_, client):
        r = await client.post(submit("bo"), json={"type": "input", "content": "hi"})
        assert r.status_code == 202 and r.json()["status"] == "mailed", r.text
        chosen = r.json()["request_id"]
        assert isinstance(chosen, str) and chosen.startswith("journal-")
        state = await settled(client, "bo", chosen)
        assert state["status"] == "done" and state["answer"]["text"] == "echo: hi", state


async def test_the_typed_client_waits_a_journaled_input_out_by_its_request_id(
    tmp_path: Path,
) -> None:
    host = ActorHost(host_config(tmp_path / "data", journal_when_opening=0))
    app = create_app(host, ApiConfig(TOKEN))
    await host.start()
    try:
        async with ActorClient(
            "http://host", TOKEN, transport=httpx.ASGITransport(app=app)
        ) as client:
            accepted = await client.submit("flo", "hi there")
            assert accepted.id is None and accepted.status == "mailed", accepted
            state = await client.wait("flo", accepted, timeout=20)
            assert state.status == "done" and state.answer is not None, state
            assert state.answer.text == "echo: hi there"
    finally:
        await host.close()


async def test_below_the_threshold_a_new_actors_input_is_admitted_as_before(
    tmp_path: Path,
) -> None:
    """The default journals only while other opens are under way: one new actor on a
    quiet host gets its submission's id at once."""
    data = tmp_path / "data"
    async with api(data) as (_, client):
        r = await client.post(submit("cy"), json={"type": "input", "content": "hi"})
        assert r.status_code == 202 and r.json()["status"] == "placed", r.text
        assert isinstance(r.json()["id"], int)
    assert journal_rows(data) == []


@pytest.mark.parametrize("threshold", [None, 4])
async def test_a_burst_of_new_actors_is_journaled_past_the_threshold_and_all_answered(
    tmp_path: Path, threshold: int | None
) -> None:
    """On by default: past the first new actor (whose file is being opened), every new
    actor's first input of a burst is journaled."""
    overrides = {} if threshold is None else {"journal_when_opening": threshold}
    waiting = 1 if threshold is None else threshold  # the default threshold is 1
    async with api(tmp_path / "data", **overrides) as (host, client):
        assert host.config.journal_when_opening == waiting
        names = [f"burst-{n}" for n in range(30)]
        accepted = await asyncio.gather(
            *(
                client.post(submit(n), json={"type": "input", "content": n, "request_id": "r"})
                for n in names
            )
        )
        assert all(r.status_code == 202 for r in accepted), [r.text for r in accepted]
        mailed = [r.json()["status"] == "mailed" for r in accepted]
        # The first ones wait for their own files; the rest arrive while those open.
        assert mailed[:waiting] == [False] * waiting and all(mailed[waiting:]), mailed
        states = await asyncio.gather(*(settled(client, n, "r") for n in names))
        assert [s["answer"]["text"] for s in states] == [f"echo: {n}" for n in names]
        for n in names:
            assert len(await submissions(client, n)) == 1


async def test_two_first_inputs_of_one_new_actor_at_once_are_both_admitted_once(
    tmp_path: Path,
) -> None:
    """At the default threshold the second of two concurrent first inputs to one new actor
    meets the first one's open under way and is journaled: the first's activation moves
    it in, then admits the first. Each is answered once, under its own request id."""
    async with api(tmp_path / "data") as (_, client):
        accepted = await asyncio.gather(
            *(
                client.post(submit("gus"), json={"type": "input", "content": r, "request_id": r})
                for r in ("one", "two", "three")
            )
        )
        assert all(r.status_code == 202 for r in accepted), [r.text for r in accepted]
        # The second is journaled; the third finds the journaled input and waits its turn.
        assert [r.json()["status"] == "mailed" for r in accepted] == [False, True, False]
        states = [await settled(client, "gus", r) for r in ("one", "two", "three")]
        assert [s["answer"]["text"] for s in states] == ["echo: one", "echo: two", "echo: three"]
        stored = await submissions(client, "gus")
        assert sorted(s["request_id"] for s in stored) == ["one", "three", "two"]
        assert len({s["id"] for s in stored}) == 3


async def test_an_input_its_admission_would_refuse_is_refused_and_nothing_journaled(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    async with api(data, journal_when_opening=0) as (_, client):
        lone_surrogate = '{"type": "input", "content": "a\\ud800b"}'
        r = await client.post(
            submit("dee"), content=lone_surrogate, headers={"content-type": "application/json"}
        )
        assert r.status_code == 422, r.text
        listed = await client.get("/v1/actors")
        assert listed.json()["actors"] == []
        assert journal_rows(data) == []
        assert not actor_paths(data, "dee")[0].exists()


async def test_an_actor_held_by_another_process_keeps_its_input_journaled_until_free(
    tmp_path: Path,
) -> None:
    """The move is retried (every second) while another process holds the actor: the
    input stays listed, polls answer ``mailed`` or ``423``, and it is answered once the
    actor is free."""
    data = tmp_path / "data"
    data.mkdir()
    held = ActorLock.acquire(actor_paths(data, "eve")[1])  # another "process": its own open
    try:
        async with api(data, journal_when_opening=0) as (host, client):
            r = await client.post(
                submit("eve"), json={"type": "input", "content": "x", "request_id": "q"}
            )
            assert r.status_code == 202 and r.json()["status"] == "mailed", r.text
            await asyncio.sleep(0.2)
            assert journal_rows(data) == [("eve", "q")]
            assert (await client.get("/v1/actors")).json()["actors"] == [{"id": "eve"}]
            poll = await client.get(
                ROOT_SUBMISSIONS.format(actor="eve") + "/by-request", params={"request_id": "q"}
            )
            assert poll.status_code == 423, poll.text
            held.release()
            state = await settled(client, "eve", "q")
            assert state["status"] == "done" and state["answer"]["text"] == "echo: x", state
            assert journal_rows(data) == []
            assert "eve" in host.active
    finally:
        held.release()


def test_a_bad_threshold_is_refused(tmp_path: Path) -> None:
    for bad in (-1, 1.5, "4"):
        with pytest.raises(ValueError, match="journal_when_opening"):
            host_config(tmp_path, journal_when_opening=bad)
