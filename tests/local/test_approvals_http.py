"""Tool approvals over the actor API on the local host: the pending call is listed with
its tool, arguments, conversation and times; an approval runs it once and the run
answers; a repeated decision is idempotent, another one is 409 with nothing written;
bad input is a clear 422."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.times import iso_time
from runtimes.client import ActorClient, ApiError
from tests.local.support import (
    APPROVAL_AGENT,
    TOKEN,
    Running,
    approval_extension,
    echo_extension,
    host_config,
    serve_in_thread,
    snapshot,
    wait_until,
)

ACTOR = "ann"
A = f"/v1/actors/{ACTOR}"


@pytest.fixture
def running(tmp_path: Path) -> Iterator[Running]:
    config = host_config(
        tmp_path / "data",
        extensions=[echo_extension(), approval_extension()],
        default_agent=dict(APPROVAL_AGENT),
    )
    with serve_in_thread(config) as r:
        yield r


@pytest.fixture
def client(running: Running) -> Iterator[httpx.Client]:
    with running.client() as c:
        yield c


def pending(client: httpx.Client) -> list[Any]:
    r = client.get(f"{A}/approvals")
    assert r.status_code == 200, r.text
    approvals: list[Any] = r.json()["approvals"]
    return approvals


def ask(client: httpx.Client, content: str) -> tuple[int, dict[str, Any]]:
    r = client.post(f"{A}/submissions", json={"type": "input", "content": content})
    assert r.status_code == 202, r.text
    wait_until(lambda: bool(pending(client)))
    (one,) = pending(client)
    return r.json()["id"], one


def test_an_approval_over_http_runs_the_tool_once_and_a_second_decision_is_refused(
    running: Running, client: httpx.Client, tmp_path: Path
) -> None:
    effects = tmp_path / "effects.txt"
    sid, one = ask(client, f"guard:{effects}")
    assert one["tool"] == "guarded" and one["arguments"] == {"path": str(effects)}
    assert one["conversation_id"] == 1 and one["asked_at_iso"] == iso_time(one["asked_at"])
    assert one["expires_at"] is None and one["expires_at_iso"] is None
    assert not effects.exists()

    r = client.post(f"{A}/approvals/{one['id']}", json={"decision": "approve", "request_id": "k"})
    assert r.status_code == 200, r.text
    decided = r.json()
    assert decided["decision"] == "approve" and decided["by"] == "person"
    state = client.get(f"{A}/submissions/{sid}", params={"wait": 20}).json()
    assert state["status"] == "done"
    assert state["answer"]["text"].startswith("guarded finished: guarded wrote")
    assert effects.read_text() == "ran\n"
    assert pending(client) == []

    db = running.data_dir / f"{ACTOR}.sqlite"
    before = snapshot(db)
    again = client.post(f"{A}/approvals/{one['id']}", json={"decision": "approve"})
    assert again.status_code == 200 and again.json()["decided_at"] == decided["decided_at"]
    other = client.post(f"{A}/approvals/{one['id']}", json={"decision": "deny", "note": "no"})
    assert other.status_code == 409, other.text
    assert other.json()["error"]["code"] == "approval_decided"
    reused = client.post(f"{A}/approvals/{one['id']}", json={"decision": "deny", "request_id": "k"})
    assert reused.status_code == 422 and reused.json()["error"]["code"] == "request_id_conflict"
    assert snapshot(db) == before
    assert effects.read_text() == "ran\n"


def test_a_denial_over_http_tells_the_model_the_note(client: httpx.Client, tmp_path: Path) -> None:
    effects = tmp_path / "effects.txt"
    sid, one = ask(client, f"guard:{effects}")
    r = client.post(f"{A}/approvals/{one['id']}", json={"decision": "deny", "note": "ask Bob"})
    assert r.status_code == 200, r.text
    state = client.get(f"{A}/submissions/{sid}", params={"wait": 20}).json()
    assert "denied" in state["answer"]["text"] and "ask Bob" in state["answer"]["text"]
    assert not effects.exists()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"decision": "maybe"}, "decision"),
        ({}, "decision"),
        ({"decision": "approve", "extra": 1}, "extra"),
        ({"decision": "deny", "note": "x" * 5000}, "note"),
        ({"decision": "approve", "request_id": ""}, "request_id"),
        ({"decision": True}, "decision"),
    ],
)
def test_bad_decisions_are_a_clear_422_and_write_nothing(
    running: Running, client: httpx.Client, tmp_path: Path, body: Any, field: str
) -> None:
    _sid, one = ask(client, f"guard:{tmp_path / 'e'}")
    db = running.data_dir / f"{ACTOR}.sqlite"
    before = snapshot(db)
    r = client.post(f"{A}/approvals/{one['id']}", json=body)
    assert r.status_code == 422, r.text
    assert field in r.json()["error"]["message"]
    assert snapshot(db) == before and len(pending(client)) == 1


def test_an_unknown_approval_is_404(client: httpx.Client, tmp_path: Path) -> None:
    _sid, one = ask(client, f"guard:{tmp_path / 'e'}")
    r = client.post(f"{A}/approvals/{one['id'] + 500}", json={"decision": "approve"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    r = client.get("/v1/actors/nobody/approvals")
    assert r.status_code == 404


async def test_the_typed_client_lists_and_decides(running: Running, tmp_path: Path) -> None:
    effects = tmp_path / "effects.txt"
    async with ActorClient(running.url, TOKEN) as client:
        accepted = await client.submit(ACTOR, f"guard:{effects}")
        while not (pending := await client.approvals(ACTOR)):  # noqa: ASYNC110 - polls a host
            await asyncio.sleep(0.02)
        (one,) = pending
        assert (one.tool, one.arguments, one.expires_at) == (
            "guarded",
            {"path": str(effects)},
            None,
        )
        decided = await client.decide(ACTOR, one.id, "approve", request_id="k")
        assert (decided.decision, decided.by, decided.id) == ("approve", "person", one.id)
        assert accepted.id is not None
        state = await client.wait(ACTOR, accepted.id)
        assert state.status == "done" and effects.read_text() == "ran\n"
        with pytest.raises(ApiError) as refused:
            await client.decide(ACTOR, one.id, "deny", note="too late")
        assert (refused.value.status, refused.value.code) == (409, "approval_decided")
        assert await client.approvals(ACTOR) == []
