"""The actor HTTP API end to end: a real uvicorn server on loopback, driven with httpx."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.local.support import (
    TOKEN,
    Running,
    host_config,
    serve_in_thread,
    snapshot,
    wait_until,
)

ACTOR = "alice"


@pytest.fixture
def running(tmp_path: Path) -> Iterator[Running]:
    with serve_in_thread(host_config(tmp_path / "data")) as r:
        yield r


@pytest.fixture
def client(running: Running) -> Iterator[httpx.Client]:
    with running.client() as c:
        yield c


def submit(client: httpx.Client, content: str, actor: str = ACTOR, **fields: Any) -> Any:
    r = client.post(
        f"/v1/actors/{actor}/submissions", json={"type": "input", "content": content, **fields}
    )
    assert r.status_code == 202, r.text
    return r.json()


def poll(client: httpx.Client, sid: int, actor: str = ACTOR, wait: float = 20) -> Any:
    r = client.get(f"/v1/actors/{actor}/submissions/{sid}", params={"wait": wait})
    assert r.status_code == 200, r.text
    return r.json()


def db_of(running: Running, actor: str = ACTOR) -> Path:
    return running.data_dir / f"{actor}.sqlite"


def test_submit_then_long_poll_answers_with_text_and_entry(
    running: Running, client: httpx.Client
) -> None:
    accepted = submit(client, "hello")
    assert accepted["status"] == "placed" and accepted["conversation_id"] == 1
    state = poll(client, accepted["id"])
    assert state["status"] == "done"
    assert state["answer"]["text"] == "echo: hello"
    entry = state["answer"]["entry"]
    assert entry["kind"] == "assistant" and entry["message"]["role"] == "assistant"
    assert isinstance(state["entry_id"], int)
    # A later read without waiting gives the same settled answer.
    assert poll(client, accepted["id"], wait=0) == state


def test_a_tool_run_answers_after_its_tool_rounds(client: httpx.Client) -> None:
    accepted = submit(client, "tools:3")
    assert poll(client, accepted["id"])["answer"]["text"] == "tools done"


def test_long_poll_returns_the_current_status_when_time_is_up(
    running: Running, client: httpx.Client
) -> None:
    gate = running.data_dir.parent / "gate"
    accepted = submit(client, f"gate:{gate}")
    state = poll(client, accepted["id"], wait=0.3)
    assert state["status"] == "placed" and state["answer"] is None
    gate.touch()
    assert poll(client, accepted["id"])["answer"]["text"] == "opened"


def test_a_request_id_dedupes_and_a_reused_id_of_the_other_type_conflicts(
    running: Running, client: httpx.Client
) -> None:
    first = submit(client, "once", request_id="job-1")
    assert poll(client, first["id"])["status"] == "done"
    before = snapshot(db_of(running))
    again = submit(client, "once, again", request_id="job-1")
    assert again["id"] == first["id"]
    r = client.post(
        f"/v1/actors/{ACTOR}/submissions",
        json={"type": "write", "content": {"kind": "note"}, "request_id": "job-1"},
    )
    assert r.status_code == 409 and r.json()["error"]["code"] == "request_id_conflict"
    assert snapshot(db_of(running)) == before


def test_reject_when_busy_is_409_and_writes_nothing(running: Running, client: httpx.Client) -> None:
    gate = running.data_dir.parent / "gate"
    busy = submit(client, f"gate:{gate}")
    before = snapshot(db_of(running))
    r = client.post(
        f"/v1/actors/{ACTOR}/submissions",
        json={"type": "input", "content": "now?", "when_busy": "reject"},
    )
    assert r.status_code == 409
    assert r.json()["error"]["code"] == "conversation_busy" and r.json()["error"]["message"]
    assert snapshot(db_of(running)) == before
    queued = submit(client, "later", when_busy="follow_up")
    assert queued["status"] == "queued"
    gate.touch()
    assert poll(client, busy["id"])["answer"]["text"] == "opened"
    assert poll(client, queued["id"])["answer"]["text"] == "echo: later"


def test_a_write_is_placed_at_once_when_idle(client: httpx.Client) -> None:
    r = client.post(
        f"/v1/actors/{ACTOR}/submissions",
        json={"type": "write", "content": {"kind": "note", "data": {"n": 1}, "message": None}},
    )
    assert r.status_code == 202 and r.json()["status"] == "done"
    state = poll(client, r.json()["id"], wait=0)
    assert state["type"] == "write" and state["answer"] is None


def test_configure_changes_and_clears_agent_fields(running: Running, client: httpx.Client) -> None:
    submit(client, "create the actor")
    path = f"/v1/actors/{ACTOR}/conversations/1/agent"
    r = client.patch(path, json={"instructions": "be brief", "thinking": "low"})
    assert r.status_code == 200, r.text
    assert r.json() == {
        "conversation_id": 1,
        "agent": {
            "model": "faux/faux-1",
            "tools": ["echo"],
            "instructions": "be brief",
            "thinking": "low",
        },
    }
    r = client.patch(path, json={"thinking": None, "tools": None})
    assert r.json()["agent"] == {"model": "faux/faux-1", "instructions": "be brief"}
    before = snapshot(db_of(running))
    for bad in ({"tools": ["no-such-tool"]}, {"colour": "blue"}, {"thinking": "max"}, {"model": 7}):
        r = client.patch(path, json=bad)
        assert r.status_code == 422, (bad, r.text)
        assert r.json()["error"]["message"]
    assert client.patch(path, json={}).json()["agent"]["instructions"] == "be brief"
    assert snapshot(db_of(running)) == before


def test_configuring_a_new_actor_creates_its_root_with_the_change(
    running: Running, client: httpx.Client
) -> None:
    r = client.patch(
        "/v1/actors/bob/conversations/1/agent", json={"instructions": "hi", "tools": None}
    )
    assert r.status_code == 200
    assert r.json()["agent"] == {"model": "faux/faux-1", "instructions": "hi"}
    # A refused change on a new actor leaves no actor behind.
    r = client.patch("/v1/actors/carol/conversations/1/agent", json={"tools": ["nope"]})
    assert r.status_code == 422 and r.json()["error"]["code"] == "unknown_tool"
    assert snapshot(db_of(running, "carol")) is None
    assert not (running.data_dir / "carol.lock").exists()


def test_tasks_lists_the_live_task_graph(running: Running, client: httpx.Client) -> None:
    gate = running.data_dir.parent / "gate"
    accepted = submit(client, f"gate:{gate}")
    graph = client.get(f"/v1/actors/{ACTOR}/tasks").json()
    assert graph["scheduling"] == "running"
    [task] = graph["tasks"]
    assert task["kind"] == "perdure.generation" and task["conversation_id"] == 1
    assert task["state"] == "running" and task["status"] == "running"
    assert task["owner"] is None and task["background"] is False
    assert task["abort_requested"] is False
    gate.touch()
    poll(client, accepted["id"])
    assert client.get(f"/v1/actors/{ACTOR}/tasks").json()["tasks"] == []


@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer wrong-token-0123456789", "Bearer", f"Basic {TOKEN}", TOKEN, f"Bearer {TOKEN}x"],
)
def test_missing_or_wrong_tokens_get_401_and_write_nothing(
    running: Running, client: httpx.Client, authorization: str | None
) -> None:
    poll(client, submit(client, "exists")["id"])
    before = snapshot(db_of(running))
    headers = {"authorization": authorization} if authorization is not None else {}
    with httpx.Client(base_url=running.url, headers=headers) as anonymous:
        requests = [
            ("POST", f"/v1/actors/{ACTOR}/submissions", {"type": "input", "content": "x"}),
            ("POST", "/v1/actors/newcomer/submissions", {"type": "input", "content": "x"}),
            ("POST", f"/v1/actors/{ACTOR}/submissions", "{not json"),
            ("GET", f"/v1/actors/{ACTOR}/submissions/1", None),
            ("PATCH", f"/v1/actors/{ACTOR}/conversations/1/agent", {"instructions": "x"}),
            ("GET", f"/v1/actors/{ACTOR}/tasks", None),
            ("GET", "/v1/actors/bad%20id/tasks", None),
        ]
        for method, path, body in requests:
            kwargs: dict[str, Any] = {}
            if isinstance(body, str):
                kwargs = {"content": body, "headers": {"content-type": "application/json"}}
            elif body is not None:
                kwargs = {"json": body}
            r = anonymous.request(method, path, **kwargs)
            assert r.status_code == 401, (method, path, r.text)
            assert r.json()["error"]["code"] == "unauthorized"
            assert r.headers["www-authenticate"] == "Bearer"
    assert snapshot(db_of(running)) == before
    assert snapshot(db_of(running, "newcomer")) is None


def test_openapi_describes_the_routes_and_the_bearer_scheme(running: Running) -> None:
    spec = httpx.get(f"{running.url}/openapi.json").json()
    assert {
        "/v1/actors/{actor}/submissions",
        "/v1/actors/{actor}/submissions/{submission_id}",
        "/v1/actors/{actor}/conversations/{conversation_id}/agent",
        "/v1/actors/{actor}/tasks",
    } <= set(spec["paths"])
    assert spec["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    post = spec["paths"]["/v1/actors/{actor}/submissions"]["post"]
    assert "202" in post["responses"] and "409" in post["responses"]


def test_oversized_bodies_get_413_and_write_nothing(running: Running, client: httpx.Client) -> None:
    poll(client, submit(client, "exists")["id"])
    before = snapshot(db_of(running))
    big = "x" * (70 * 1024)
    r = client.post(f"/v1/actors/{ACTOR}/submissions", json={"type": "input", "content": big})
    assert r.status_code == 413 and r.json()["error"]["code"] == "body_too_large"

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit counts what arrives
        yield b'{"type": "input", "content": "'
        for _ in range(80):
            yield b"y" * 1024
        yield b'"}'

    r = client.post(
        f"/v1/actors/{ACTOR}/submissions",
        content=chunks(),
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 413
    r = client.post("/v1/actors/nobody/submissions", json={"type": "input", "content": big})
    assert r.status_code == 413
    assert snapshot(db_of(running)) == before
    assert snapshot(db_of(running, "nobody")) is None


def test_an_idle_actor_is_evicted_and_the_next_request_reopens_it(tmp_path: Path) -> None:
    config = host_config(tmp_path / "data", idle_evict_s=0.2)
    with serve_in_thread(config) as running, running.client() as client:
        accepted = submit(client, "hello")
        assert poll(client, accepted["id"])["status"] == "done"
        assert running.host.active == {ACTOR}
        wait_until(lambda: not running.host.active)
        assert poll(client, accepted["id"], wait=0)["answer"]["text"] == "echo: hello"
        assert running.host.active == {ACTOR}
