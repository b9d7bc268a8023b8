"""The actor HTTP API end to end: a real uvicorn server on loopback, driven with httpx."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.docops import apply_ops
from core.harness import CompactionSettings, HarnessSettings
from core.times import iso_time
from runtimes.actor.api import ApiConfig
from runtimes.actor.api.app import build_route_state, create_app
from runtimes.local.host import ActorHost
from tests.local.support import (
    TOKEN,
    Running,
    host_config,
    outcomes,
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


def test_a_request_id_dedupes_and_a_reused_id_of_other_content_or_type_conflicts(
    running: Running, client: httpx.Client
) -> None:
    first = submit(client, "once", request_id="job-1")
    assert poll(client, first["id"])["status"] == "done"
    before = snapshot(db_of(running))
    again = submit(client, "once", request_id="job-1")  # a retry: the original answers
    assert again["id"] == first["id"] and again["status"] == "done"
    other = client.post(
        f"/v1/actors/{ACTOR}/submissions",
        json={"type": "input", "content": "once, again", "request_id": "job-1"},
    )
    assert other.status_code == 422, other.text
    assert other.json()["error"]["code"] == "request_id_conflict"
    assert "different content" in other.json()["error"]["message"]
    r = client.post(
        f"/v1/actors/{ACTOR}/submissions",
        json={"type": "write", "content": {"kind": "note"}, "request_id": "job-1"},
    )
    assert r.status_code == 422 and r.json()["error"]["code"] == "request_id_conflict"
    assert snapshot(db_of(running)) == before
    retried = submit(client, "once", request_id="job-1")  # still the original
    assert retried["id"] == first["id"] and retried["status"] == "done"


def settled_snapshot(db: Path, quiet_s: float = 0.2) -> Any:
    """The actor's rows once they stopped changing for ``quiet_s`` (a 202 returns as
    soon as the admission commits; the run it started commits its own start after)."""
    last = snapshot(db)
    while True:
        time.sleep(quiet_s)
        now = snapshot(db)
        if now == last:
            return now
        last = now


def test_reject_when_busy_is_409_and_writes_nothing(running: Running, client: httpx.Client) -> None:
    gate = running.data_dir.parent / "gate"
    busy = submit(client, f"gate:{gate}")
    before = settled_snapshot(db_of(running))  # the run's own start-up commits are done
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
    created = submit(client, "create the actor")
    # Its run must be over before the snapshot below, or its answer lands in between.
    assert poll(client, created["id"])["status"] == "done"
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
    reminders = f"/v1/actors/{ACTOR}/conversations/1/reminders"
    reminder = client.post(reminders, json={"message": "x", "after": 600}).json()["task"]
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
            ("GET", f"/v1/actors/{ACTOR}/conversations/1/view", None),
            ("GET", f"/v1/actors/{ACTOR}/conversations/1/watch", None),
            ("POST", f"/v1/actors/{ACTOR}/conversations/1/abort", {"background": True}),
            ("POST", f"/v1/actors/{ACTOR}/conversations/1/fork", {"at_entry": 2}),
            ("POST", f"/v1/actors/{ACTOR}/conversations/1/compact", {}),
            ("POST", f"/v1/actors/{ACTOR}/conversations/1/reset", {"handoff": "x"}),
            ("POST", "/v1/actors/newcomer/conversations/1/reset", None),
            ("POST", f"/v1/actors/{ACTOR}/conversations/1/reminders", {"message": "x", "after": 1}),
            ("GET", f"/v1/actors/{ACTOR}/timers", None),
            ("DELETE", f"/v1/actors/{ACTOR}/timers/{reminder}", None),
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


def test_the_bare_address_leads_a_person_to_the_inspector(running: Running) -> None:
    # No token: the page carries no data (the inspector asks for the token itself).
    r = httpx.get(f"{running.url}/")
    assert r.status_code == 307 and r.headers["location"] == "ui", (r.status_code, r.text)
    page = httpx.get(f"{running.url}/", follow_redirects=True)
    assert page.status_code == 200 and str(page.url) == f"{running.url}/ui"
    assert "API token" in page.text


def test_openapi_describes_the_routes_and_the_bearer_scheme(running: Running) -> None:
    spec = httpx.get(f"{running.url}/openapi.json").json()
    assert {
        "/v1/actors/{actor}/submissions",
        "/v1/actors/{actor}/submissions/{submission_id}",
        "/v1/actors/{actor}/conversations/{conversation_id}/agent",
        "/v1/actors/{actor}/conversations/{conversation_id}/view",
        "/v1/actors/{actor}/conversations/{conversation_id}/watch",
        "/v1/actors/{actor}/conversations/{conversation_id}/abort",
        "/v1/actors/{actor}/conversations/{conversation_id}/fork",
        "/v1/actors/{actor}/conversations/{conversation_id}/compact",
        "/v1/actors/{actor}/conversations/{conversation_id}/reset",
        "/v1/actors/{actor}/conversations/{conversation_id}/reminders",
        "/v1/actors/{actor}/tasks",
        "/v1/actors/{actor}/timers",
        "/v1/actors/{actor}/timers/{task_id}",
    } <= set(spec["paths"])
    assert spec["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    # Every authenticated operation names the scheme, and only those do.
    for path, operations in spec["paths"].items():
        for operation in operations.values():
            expected = [{"HTTPBearer": []}] if path.startswith("/v1/") else None
            assert operation.get("security") == expected, path
    post = spec["paths"]["/v1/actors/{actor}/submissions"]["post"]
    assert "202" in post["responses"] and "409" in post["responses"]
    watch = spec["paths"]["/v1/actors/{actor}/conversations/{conversation_id}/watch"]["get"]
    assert "text/event-stream" in watch["responses"]["200"]["content"]
    # The schema says what the server does: errors are JSON, also on the stream route...
    assert set(watch["responses"]["404"]["content"]) == {"application/json"}
    schemas = spec["components"]["schemas"]
    # ...a reminder takes exactly one of at/after, agents name installed tools only.
    assert len(schemas["ReminderBody"]["oneOf"]) == 2
    tools = schemas["AgentChange"]["properties"]["tools"]["anyOf"][0]
    assert tools["items"]["enum"] == ["echo"]
    fork = spec["paths"]["/v1/actors/{actor}/conversations/{conversation_id}/fork"]["post"]
    assert "201" in fork["responses"]
    # Every error answer is the one JSON error body, whose schema the document carries.
    error = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorResponse"}}}
    for operations in spec["paths"].values():
        for operation in operations.values():
            for status, response in operation["responses"].items():
                assert status[0] not in "45" or response["content"] == error, (status, response)
    assert schemas["ErrorResponse"]["properties"]["error"] == {
        "$ref": "#/components/schemas/ErrorDetail"
    }
    assert schemas["ErrorDetail"]["required"] == ["code", "message"]


def test_no_route_builds_a_response_field_for_its_error_answers() -> None:
    """FastAPI builds a pydantic field for every response model of a route, again in
    every app on its first request; the error answers are only documented (by
    ``complete_openapi``), so they declare none: most of a Durable Object's first
    request in Pyodide was building them (issue 36)."""
    from fastapi.routing import APIRoute

    from runtimes.actor.api import approvals, deltas, history, routes, schedules, token_route

    checked = 0
    for module in (routes, history, schedules, deltas, token_route, approvals):
        for route in module.router.routes:
            if isinstance(route, APIRoute):
                checked += 1
                errors = [code for code in route.response_fields if str(code)[0] in "45"]
                assert not errors, (route.path, errors)
    assert checked >= 25


async def test_walking_the_routes_before_serving_answers_404_and_opens_nothing(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    host = ActorHost(host_config(data))
    app = create_app(host, ApiConfig(TOKEN))
    assert await build_route_state(app, TOKEN) == 404
    assert await build_route_state(app, "not-the-token-at-all") == 401
    assert not host.active and (not data.exists() or not list(data.iterdir()))
    await host.close()


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


def test_twenty_refused_32_mib_bodies_in_a_row_all_receive_the_json_error(
    running: Running,
) -> None:
    """A refused body is drained before the answer, so the connection is closed with
    nothing unread and no reset can eat the 413 (each POST on a fresh connection)."""
    body = b"x" * (32 * 1024 * 1024)
    for _ in range(20):
        with running.client() as fresh:
            r = fresh.post(
                f"/v1/actors/{ACTOR}/submissions",
                content=body,
                headers={"content-type": "application/json"},
            )
        assert r.status_code == 413, r.status_code
        assert r.json()["error"]["code"] == "body_too_large"
    assert snapshot(db_of(running)) is None


def test_an_idle_actor_is_evicted_and_the_next_request_reopens_it(tmp_path: Path) -> None:
    config = host_config(tmp_path / "data", idle_evict_s=0.2)
    with serve_in_thread(config) as running, running.client() as client:
        accepted = submit(client, "hello")
        assert poll(client, accepted["id"])["status"] == "done"
        assert running.host.active == {ACTOR}
        wait_until(lambda: not running.host.active)
        assert poll(client, accepted["id"], wait=0)["answer"]["text"] == "echo: hello"
        assert running.host.active == {ACTOR}


# --------------------------------------------------------------------------- conversations


def entries_of(client: httpx.Client, cid: int = 1, actor: str = ACTOR) -> list[dict[str, Any]]:
    r = client.get(f"/v1/actors/{actor}/conversations/{cid}/view")
    assert r.status_code == 200, r.text
    entries: list[dict[str, Any]] = r.json()["entries"]
    return entries


def texts(entries: list[dict[str, Any]]) -> list[str]:
    """``kind: text`` per entry with a message."""
    out = []
    for entry in entries:
        message = entry.get("message") or {}
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(b.get("text", "") for b in content if b.get("type") == "text")
        out.append(f"{entry['kind']}: {content}")
    return out


def test_view_is_the_committed_view_of_active_entries_and_documents(
    running: Running, client: httpx.Client
) -> None:
    poll(client, submit(client, "hello")["id"])
    view = client.get(f"/v1/actors/{ACTOR}/conversations/1/view").json()
    assert view["conversation"] == {"id": 1}
    assert texts(view["entries"]) == ["user: hello", "assistant: echo: hello"]
    assert view["docs"]["agent"] == {"model": "faux/faux-1", "tools": ["echo"]}
    assert view["docs"]["live"] == {} and view["docs"]["inbox"] == {"items": []}
    assert view["docs"]["usage"]["total"]["output"] > 0


def test_the_views_usage_is_the_sum_of_the_responses_across_a_restart(tmp_path: Path) -> None:
    """The usage ledger, kept in ``live`` (issue 36), is the view's ``usage`` document in
    its old shape; the actor's file holds no ``usage`` document."""
    config = host_config(tmp_path / "data")
    with serve_in_thread(config) as running, running.client() as client:
        for content in ("tools:2", "hello", "tools:1"):
            assert poll(client, submit(client, content)["id"])["status"] == "done"
        view = client.get(f"/v1/actors/{ACTOR}/conversations/1/view").json()
    keys = ("input", "output", "cache_read", "cache_write", "cost")
    responses = [e["message"]["usage"] for e in view["entries"] if e["kind"] == "assistant"]
    assert len(responses) == 6
    total = {k: sum(u[k] for u in responses) for k in keys}
    assert total["output"] > 0 and view["docs"]["usage"]["total"] == total
    assert view["docs"]["usage"]["models"] == {"faux/faux-1": total}
    assert view["docs"]["usage"]["tools"] == {} and "usage" not in view["docs"]["live"]
    db = sqlite3.connect(db_of(running))
    kinds = {json.loads(k) for (k,) in db.execute("SELECT kind FROM documents")}
    db.close()
    assert kinds == {"agent", "live"}
    with serve_in_thread(config) as running, running.client() as client:
        again = client.get(f"/v1/actors/{ACTOR}/conversations/1/view").json()
    assert again["docs"]["usage"] == view["docs"]["usage"]


class Sse:
    """Reads a ``text/event-stream`` response event by event (comments as ``ping``)."""

    def __init__(self, response: httpx.Response) -> None:
        self._lines = response.iter_lines()

    def next(self) -> tuple[str, dict[str, Any] | None, str | None]:
        event, data, ident = "message", None, None
        for line in self._lines:
            if line.startswith(":"):
                return "ping", None, None
            if line == "":
                if data is not None:
                    return event, data, ident
                continue
            field, _, value = line.partition(": ")
            if field == "event":
                event = value
            elif field == "data":
                data = json.loads(value)
            elif field == "id":
                ident = value
        raise EOFError("the stream ended")

    def until(self, predicate: Any) -> list[tuple[str, dict[str, Any] | None, str | None]]:
        seen = []
        while True:
            seen.append(self.next())
            if predicate(*seen[-1]):
                return seen


def test_watch_streams_the_view_then_deltas_and_unmounts_on_disconnect(
    running: Running, client: httpx.Client
) -> None:
    poll(client, submit(client, "first")["id"])
    harness = running.host._actors[ACTOR].harness
    with client.stream("GET", f"/v1/actors/{ACTOR}/conversations/1/watch") as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        stream = Sse(response)
        event, frame, ident = stream.next()
        assert event == "view" and ident is None and frame is not None
        view = frame["value"]
        assert texts(view["entries"]) == ["user: first", "assistant: echo: first"]
        assert harness._mounts  # the watch is mounted while the client listens
        poll(client, submit(client, "tools:1")["id"])
        # Applying the deltas to the view reproduces the committed view.
        seqs: list[int] = []

        def answered(event: str, frame: dict[str, Any] | None, ident: str | None) -> bool:
            nonlocal view
            assert event == "delta" and frame is not None and ident == str(frame["seq"])
            seqs.append(frame["seq"])
            view = apply_ops(view, frame["ops"])
            return "assistant: tools done" in texts(view["entries"])

        stream.until(answered)
        committed = client.get(f"/v1/actors/{ACTOR}/conversations/1/view").json()
        if view != committed:  # commits after the answer: their deltas are on the way
            stream.until(lambda *event: answered(*event) and view == committed)
        assert view == committed
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
        kinds = [e["kind"] for e in view["entries"]]
        assert kinds[2:] == ["user", "assistant", "tool_result", "assistant"]
    # The client went away: the server stops the watch and drops the mount.
    wait_until(lambda: not harness._mounts)
    assert running.host.active == {ACTOR}


def test_watch_sends_heartbeats_and_holds_the_actor_open(tmp_path: Path) -> None:
    config = host_config(tmp_path / "data", idle_evict_s=0.2)
    with serve_in_thread(config, heartbeat_s=0.1) as running, running.client() as client:
        poll(client, submit(client, "hi")["id"])
        before = outcomes(db_of(running))
        with client.stream("GET", f"/v1/actors/{ACTOR}/conversations/1/watch") as response:
            stream = Sse(response)
            assert stream.next()[0] == "view"
            pings = 0
            started = time.monotonic()
            while time.monotonic() - started < 1.0:  # five idle periods
                event, _, _ = stream.next()
                pings += event == "ping"
            assert pings >= 3
            assert running.host.active == {ACTOR}  # watched: never evicted
        wait_until(lambda: not running.host.active)  # unwatched: evicted when idle
        assert outcomes(db_of(running)) == before  # watching wrote nothing


def test_watch_ends_with_an_end_event_when_the_host_shuts_down(tmp_path: Path) -> None:
    with serve_in_thread(host_config(tmp_path / "data")) as running, running.client() as client:
        poll(client, submit(client, "hi")["id"])
        with client.stream("GET", f"/v1/actors/{ACTOR}/conversations/1/watch") as response:
            stream = Sse(response)
            assert stream.next()[0] == "view"
            asked = time.monotonic()
            running.server.should_exit = True
            event, frame, _ = stream.next()
            assert (event, frame) == ("end", {"type": "end", "reason": "shutting_down"})
            with pytest.raises(EOFError):
                stream.next()
            assert time.monotonic() - asked < 5


def test_abort_stops_the_run_and_answers_how_many_tasks_it_marked(
    running: Running, client: httpx.Client
) -> None:
    gate = running.data_dir.parent / "gate"
    busy = submit(client, f"gate:{gate}")
    queued = submit(client, "queued")
    wait_until(lambda: running_tasks(client) == ["perdure.generation"])
    # A live task that is not a reminder is no timer to cancel.
    [generation] = client.get(f"/v1/actors/{ACTOR}/tasks").json()["tasks"]
    before = snapshot(db_of(running))
    r = client.delete(f"/v1/actors/{ACTOR}/timers/{generation['id']}")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    assert snapshot(db_of(running)) == before
    r = client.post(f"/v1/actors/{ACTOR}/conversations/1/abort", json={})
    assert r.status_code == 200 and r.json() == {"aborted": 1}
    assert poll(client, busy["id"])["reason"] == "aborted"
    assert poll(client, queued["id"])["status"] == "unanswered"
    assert client.get(f"/v1/actors/{ACTOR}/tasks").json()["tasks"] == []
    # Idle: nothing to abort (an empty body is fine too). Background tasks (a reminder)
    # survive a plain abort and go with background=true.
    r = client.post(f"/v1/actors/{ACTOR}/conversations/1/abort")
    assert r.status_code == 200 and r.json() == {"aborted": 0}
    path = f"/v1/actors/{ACTOR}/conversations/1/reminders"
    assert client.post(path, json={"message": "later", "after": 600}).status_code == 201
    abort_path = f"/v1/actors/{ACTOR}/conversations/1/abort"
    assert client.post(abort_path, json={"background": False}).json() == {"aborted": 0}
    assert len(client.get(f"/v1/actors/{ACTOR}/timers").json()["timers"]) == 1
    assert client.post(abort_path, json={"background": True}).json() == {"aborted": 1}
    assert client.get(f"/v1/actors/{ACTOR}/timers").json()["timers"] == []


def running_tasks(client: httpx.Client) -> list[str]:
    tasks = client.get(f"/v1/actors/{ACTOR}/tasks").json()["tasks"]
    return [t["kind"] for t in tasks if t["state"] == "running"]


def test_fork_sees_the_history_up_to_its_entry_and_takes_an_agent_change(
    running: Running, client: httpx.Client
) -> None:
    poll(client, submit(client, "one")["id"])
    poll(client, submit(client, "two")["id"])
    first_answer = entries_of(client)[1]
    r = client.post(
        f"/v1/actors/{ACTOR}/conversations/1/fork",
        json={"at_entry": first_answer["id"], "agent": {"instructions": "be brief"}},
    )
    assert r.status_code == 201, r.text
    child = r.json()["conversation_id"]
    assert child > 1
    assert texts(entries_of(client, child)) == ["user: one", "assistant: echo: one"]
    agent = client.get(f"/v1/actors/{ACTOR}/conversations/{child}/view").json()["docs"]["agent"]
    assert agent == {"model": "faux/faux-1", "tools": ["echo"], "instructions": "be brief"}
    state = poll(client, submit(client, "three", conversation_id=child)["id"])
    assert state["answer"]["text"] == "echo: three" and state["conversation_id"] == child
    assert texts(entries_of(client, child)) == [
        "user: one",
        "assistant: echo: one",
        "user: three",
        "system: be brief",  # the changed instructions, recorded when the request is prepared
        "assistant: echo: three",
    ]
    assert len(entries_of(client)) == 4  # the parent is untouched
    # An entry the conversation cannot see is refused, and nothing is written.
    before = snapshot(db_of(running))
    child_entry = entries_of(client, child)[-1]["id"]
    r = client.post(f"/v1/actors/{ACTOR}/conversations/1/fork", json={"at_entry": child_entry})
    assert r.status_code == 404 and r.json()["error"]["code"] == "invalid_entry"
    assert snapshot(db_of(running)) == before


def test_compact_summarizes_older_context_by_hand(tmp_path: Path) -> None:
    settings = HarnessSettings(compaction=CompactionSettings(keep_recent_tokens=1))
    config = host_config(tmp_path / "data", settings=settings)
    with serve_in_thread(config) as running, running.client() as client:
        for text in ("one", "two", "three"):
            poll(client, submit(client, text)["id"])
        r = client.post(
            f"/v1/actors/{ACTOR}/conversations/1/compact", json={"instructions": "the numbers"}
        )
        assert r.status_code == 202, r.text
        assert isinstance(r.json()["task"], int)
        wait_until(lambda: not client.get(f"/v1/actors/{ACTOR}/tasks").json()["tasks"])
        # The view keeps what the cut kept (the newest answer: keep_recent_tokens=1) and
        # the summary marker; the five older messages were summarized with the focus.
        kept, summary = entries_of(client)
        assert texts([kept]) == ["assistant: echo: three"]
        assert summary["kind"] == "compaction" and summary["head"] == kept["id"]
        assert summary["data"] == {"reason": "manual"}
        assert "summary of 5 lines; focus: the numbers" in summary["message"]["content"]
        # The conversation goes on from the summary.
        assert poll(client, submit(client, "four")["id"])["answer"]["text"] == "echo: four"


def test_reset_starts_a_new_context_range_with_the_handoff(
    running: Running, client: httpx.Client
) -> None:
    poll(client, submit(client, "old")["id"])
    r = client.post(f"/v1/actors/{ACTOR}/conversations/1/reset", json={"handoff": "fresh start"})
    assert r.status_code == 202, r.text
    assert r.json()["type"] == "write" and r.json()["status"] == "done"
    assert texts(entries_of(client)) == ["reset: fresh start"]
    poll(client, submit(client, "new")["id"])
    assert texts(entries_of(client)) == ["reset: fresh start", "user: new", "assistant: echo: new"]
    # Without a body: a bare reset; with a request id: deduped.
    r = client.post(f"/v1/actors/{ACTOR}/conversations/1/reset")
    assert r.status_code == 202 and [e["kind"] for e in entries_of(client)] == ["reset"]
    again = client.post(f"/v1/actors/{ACTOR}/conversations/1/reset", json={"request_id": "r-1"})
    twice = client.post(f"/v1/actors/{ACTOR}/conversations/1/reset", json={"request_id": "r-1"})
    assert again.json()["id"] == twice.json()["id"]


def test_reminders_are_listed_cancelled_and_fire_once_when_due(
    running: Running, client: httpx.Client
) -> None:
    poll(client, submit(client, "hi")["id"])
    path = f"/v1/actors/{ACTOR}/conversations/1/reminders"
    before = int(time.time() * 1000)
    r = client.post(path, json={"message": "water the plants", "after": 3600})
    assert r.status_code == 201, r.text
    later = r.json()
    assert before + 3_600_000 <= later["at"] <= int(time.time() * 1000) + 3_600_000
    at = before + 7_200_000
    r = client.post(path, json={"message": "at a time", "at": at})
    assert r.status_code == 201 and r.json()["at"] == at
    assert r.json()["at_iso"] == iso_time(at) and iso_time(at).endswith("Z")
    timers = client.get(f"/v1/actors/{ACTOR}/timers").json()
    assert timers["next_wake"] == later["at"]
    assert timers["timers"] == [
        {
            "task": later["task"],
            "kind": "perdure.reminder",
            "conversation_id": 1,
            "at": later["at"],
            "at_iso": iso_time(later["at"]),
            "message": "water the plants",
        },
        {
            "task": r.json()["task"],
            "kind": "perdure.reminder",
            "conversation_id": 1,
            "at": at,
            "at_iso": iso_time(at),
            "message": "at a time",
        },
    ]
    # Cancelled: gone from the list, and a second cancel is a 404.
    r = client.delete(f"/v1/actors/{ACTOR}/timers/{later['task']}")
    assert r.status_code == 200 and r.json() == {"task": later["task"], "cancelled": True}
    assert [t["message"] for t in client.get(f"/v1/actors/{ACTOR}/timers").json()["timers"]] == [
        "at a time"
    ]
    r = client.delete(f"/v1/actors/{ACTOR}/timers/{later['task']}")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    # One that fires: submitted to the conversation, answered like any input.
    r = client.post(path, json={"message": "stretch", "after": 0.3})
    assert r.status_code == 201
    wait_until(lambda: "assistant: echo: stretch" in texts(entries_of(client)))
    user = next(e for e in entries_of(client) if texts([e]) == ["user: stretch"])
    sub = client.get(f"/v1/actors/{ACTOR}/submissions/{user['data']['submission']}").json()
    assert sub["request_id"] == f"reminder:{r.json()['task']}"
    assert [t["message"] for t in client.get(f"/v1/actors/{ACTOR}/timers").json()["timers"]] == [
        "at a time"
    ]


def test_a_reminder_wakes_its_evicted_actor(tmp_path: Path) -> None:
    config = host_config(tmp_path / "data", idle_evict_s=0.2)
    with serve_in_thread(config) as running, running.client() as client:
        poll(client, submit(client, "hi")["id"])
        path = f"/v1/actors/{ACTOR}/conversations/1/reminders"
        reminder = client.post(path, json={"message": "wake up", "after": 1.5}).json()
        wait_until(lambda: not running.host.active)
        assert running.host.wakes == {ACTOR: reminder["at"]}
        wait_until(lambda: running.host.active == {ACTOR}, timeout=20)
        wait_until(lambda: "assistant: echo: wake up" in texts(entries_of(client)))


def test_whole_number_floats_are_integers_as_json_schema_says(
    running: Running, client: httpx.Client
) -> None:
    poll(client, submit(client, "one")["id"])
    entry = entries_of(client)[0]["id"]
    r = client.post(f"/v1/actors/{ACTOR}/conversations/1/fork", json={"at_entry": float(entry)})
    assert r.status_code == 201, r.text
    r = client.post(
        f"/v1/actors/{ACTOR}/submissions",
        json={"type": "input", "content": "two", "conversation_id": 1.0},
    )
    assert r.status_code == 202 and r.json()["conversation_id"] == 1, r.text
    r = client.post(f"/v1/actors/{ACTOR}/conversations/1/fork", json={"at_entry": entry + 0.5})
    assert r.status_code == 422


def test_minted_api_tokens_are_valid_and_never_read_as_an_option() -> None:
    # A token starting with "-" broke `--token TOKEN` on command lines (argparse took it
    # for an option) about once in 64 runs of the demo.
    from runtimes.actor.api import ApiConfig, new_api_token

    tokens = {new_api_token() for _ in range(2000)}
    assert len(tokens) == 2000
    for token in tokens:
        assert not token.startswith("-")
        ApiConfig(token)
