"""The Worker's front door: what it forwards, what it refuses, and that it refuses
exactly as the local API does (same status, same error code) — without constructing a
Durable Object."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.testing import VirtualClock
from runtimes.actor.api.app import ApiConfig, create_app
from runtimes.actor.api.route_table import actor_routes
from runtimes.actor.inspector_files import inspector_answer
from runtimes.actor.testing import kit_config
from runtimes.cloudflare.front_door import (
    Forward,
    FrontDoor,
    Refusal,
    RouteTable,
    admit_request,
)
from runtimes.local.host import ActorHost
from tests.cloudflare.kit_target import DurableNamespace
from tests.local.support import host_config

TOKEN = "t" * 32
DUPLICATE = b'{"type": "write", "type": "input", "content": "x"}'
AUTH = {"authorization": f"Bearer {TOKEN}"}
JSON = {**AUTH, "content-type": "application/json"}
ROUTES = RouteTable.from_routes(actor_routes())
DOOR = FrontDoor(TOKEN, ROUTES, max_body_bytes=1000)


def _sample(template: str) -> str:
    return (
        template.replace("{actor}", "alice")
        .replace("{conversation_id}", "1")
        .replace("{submission_id}", "5")
        .replace("{task_id}", "9")
    )


def test_every_route_of_the_actor_api_is_forwarded_to_its_actor() -> None:
    checked = 0
    for method, template, _needs_body in actor_routes():
        if template == "/v1/actors":
            continue  # no actor to route to: the Worker keeps no index of actors
        path = _sample(template)
        assert DOOR.admit(method, path, AUTH, b"{}") == Forward("alice"), path
        checked += 1
    assert checked >= 17
    # The listings and the long poll are the actor's routes too.
    for rest in ("conversations", "conversations/1/entries", "conversations/1/deltas"):
        assert DOOR.admit("GET", f"/v1/actors/alice/{rest}", AUTH) == Forward("alice"), rest
    # A route whose body is optional takes an empty one.
    abort = "/v1/actors/alice/conversations/1/abort"
    assert DOOR.admit("POST", abort, JSON, b"") == Forward("alice")
    # Percent-encoding is undone before the id check: this is the name idFromName gets.
    assert DOOR.admit("GET", "/v1/actors/%41-b_c/tasks", AUTH) == Forward("A-b_c")
    assert DOOR.admit("HEAD", "/v1/actors/alice/tasks", AUTH) == Forward("alice")
    assert DOOR.admit("POST", "/v1/actors/alice/submissions", AUTH, None) == Forward("alice")
    # Not sent as JSON: the app refuses it (422), as the local API does.
    assert DOOR.admit("POST", "/v1/actors/alice/submissions", AUTH, b"{x") == Forward("alice")


@pytest.mark.parametrize(
    ("method", "path", "headers", "body", "status", "code"),
    [
        ("GET", "/", {}, None, 404, "no_route"),
        ("GET", "/ui", AUTH, None, 404, "no_route"),
        ("GET", "/v1/actors/alice/tasks", {}, None, 401, "unauthorized"),
        ("GET", "/v1/actors/alice/tasks", {"authorization": "Bearer nope"}, None, 401, None),
        ("GET", "/v1/actors/alice/tasks", {"authorization": TOKEN}, None, 401, None),
        ("GET", "/v1/actors/al.ce/tasks", {}, None, 401, "unauthorized"),  # auth first
        ("GET", "/v1/actors/al.ce/tasks", AUTH, None, 400, "invalid_actor"),
        ("GET", f"/v1/actors/{'a' * 65}/tasks", AUTH, None, 400, "invalid_actor"),
        ("GET", "/v1/actors/a%2Fb/tasks", AUTH, None, 400, "invalid_actor"),
        ("GET", "/v1/actors//tasks", AUTH, None, 400, "invalid_actor"),
        ("GET", "/v1/actors", AUTH, None, 404, "no_route"),
        ("GET", "/v1/actors/", AUTH, None, 404, "no_route"),
        ("GET", "/v1/actors/alice", AUTH, None, 404, "no_route"),
        ("GET", "/v1/actors/alice/nothing", AUTH, None, 404, "no_route"),
        ("GET", "/v1/actors/alice/conversations/1/view/extra", AUTH, None, 404, "no_route"),
        ("DELETE", "/v1/actors/alice/submissions", AUTH, None, 405, "method_not_allowed"),
        ("POST", "/v1/actors/alice/tasks", AUTH, None, 405, "method_not_allowed"),
        ("POST", "/v1/actors/alice/submissions", JSON, b"{not json", 400, "malformed_json"),
        ("POST", "/v1/actors/alice/submissions", JSON, b"\xff\xfe", 400, "malformed_json"),
        ("POST", "/v1/actors/alice/submissions", JSON, b"", 422, "invalid"),
        ("POST", "/v1/actors/alice/submissions", AUTH, b"", 422, "invalid"),
        ("POST", "/v1/actors/alice/conversations/1/reminders", JSON, b"", 422, "invalid"),
        ("POST", "/v1/actors/alice/submissions", JSON, DUPLICATE, 422, "invalid"),
        (
            "PATCH",
            "/v1/actors/alice/conversations/1/agent",
            {**AUTH, "content-type": "application/merge-patch+json; charset=utf-8"},
            b"{",
            400,
            "malformed_json",
        ),
        ("POST", "/v1/actors/alice/submissions", AUTH, b"x" * 1001, 413, "body_too_large"),
        (
            "POST",
            "/v1/actors/alice/submissions",
            {**AUTH, "content-length": "5000"},
            None,
            413,
            "body_too_large",
        ),
        (
            "POST",
            "/v1/actors/alice/submissions",
            {**AUTH, "content-length": "-1"},
            None,
            413,
            "body_too_large",
        ),
    ],
)
def test_bad_requests_are_refused_at_the_worker(
    method: str,
    path: str,
    headers: dict[str, str],
    body: bytes | None,
    status: int,
    code: str | None,
) -> None:
    decision = DOOR.admit(method, path, headers, body)
    assert isinstance(decision, Refusal), decision
    assert decision.status == status
    assert decision.code == (code or decision.code)
    assert decision.body() == {"error": {"code": decision.code, "message": decision.message}}
    if status == 401:
        assert ("www-authenticate", "Bearer") in decision.headers
    if status == 405:
        assert dict(decision.headers)["allow"]


def test_the_token_must_be_a_real_secret() -> None:
    with pytest.raises(ValueError, match="16 characters"):
        FrontDoor("short", ROUTES)


# Requests both the front door and the local app refuse before touching any actor.
SAME_AS_LOCAL: list[tuple[str, str, dict[str, str], bytes | None]] = [
    ("GET", "/v1/actors/alice/tasks", {}, None),
    ("GET", "/v1/actors/alice/tasks", {"authorization": "Bearer wrong-token"}, None),
    ("GET", "/v1/actors/al.ce/tasks", AUTH, None),
    ("GET", f"/v1/actors/{'a' * 65}/timers", AUTH, None),
    ("GET", "/v1/actors/alice/nothing", AUTH, None),
    ("DELETE", "/v1/actors/alice/submissions", AUTH, None),
    ("POST", "/v1/actors/alice/submissions", JSON, b"{not json"),
    ("POST", "/v1/actors/alice/submissions", AUTH, b"x" * 1001),
    ("POST", "/v1/actors/alice/submissions", JSON, b""),
    ("POST", "/v1/actors/alice/submissions", JSON, DUPLICATE),
    ("PATCH", "/v1/actors/alice/conversations/1/agent", JSON, b'{"model": "a", "model": "b"}'),
]


def _files(directory: Path) -> list[Path]:
    return list(directory.iterdir())


async def test_the_front_door_refuses_as_the_local_api_does(tmp_path: Path) -> None:
    app = create_app(ActorHost(host_config(tmp_path)), ApiConfig(token=TOKEN, max_body_bytes=1000))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://local") as client:
        for method, path, headers, body in SAME_AS_LOCAL:
            decision = DOOR.admit(method, path, headers, body)
            assert isinstance(decision, Refusal), (method, path)
            response = await client.request(method, path, headers=headers, content=body)
            local: Any = response.json()
            assert (response.status_code, local["error"]["code"]) == (
                decision.status,
                decision.code,
            ), (method, path, local)
    assert _files(tmp_path) == []  # the local app did not create an actor either


async def test_a_refusal_at_the_worker_constructs_no_durable_object(tmp_path: Path) -> None:
    """The Worker's decision (:func:`admit_request`, what ``Default.fetch`` runs) in front
    of the namespace stand-in: only a forwarded request constructs its actor's object
    (its SQLite file appears); an empty or duplicate-key JSON body constructs none."""
    namespace = DurableNamespace(tmp_path)
    host = namespace.host(kit_config(), VirtualClock())
    path = "/v1/actors/alice/submissions"

    async def fetch(headers: dict[str, str], body: bytes) -> Forward | Refusal:
        async def read_body() -> bytes:
            return body

        decision = await admit_request(DOOR, "POST", path, headers, read_body)
        if isinstance(decision, Forward):
            async with host.use(decision.actor, create=True):  # the object, constructed
                pass
        return decision

    try:
        for headers, body in ((JSON, b""), (AUTH, b""), (JSON, DUPLICATE)):
            decision = await fetch(headers, body)
            assert isinstance(decision, Refusal) and decision.status == 422, decision
            assert decision.code == "invalid", decision
        assert "type" in (await fetch(JSON, DUPLICATE)).message  # type: ignore[union-attr]
        assert not namespace.exists("alice") and _files(tmp_path) == []
        assert await fetch(JSON, b'{"type": "input", "content": "hi"}') == Forward("alice")
        assert namespace.exists("alice")
    finally:
        await host.close()


def test_the_worker_answers_the_inspector_s_files_itself() -> None:
    """What ``Default.fetch`` answers before any setting is read or any object addressed:
    the page, its files (the same bytes and CSP as the app's), ``/`` sent to it."""
    page = inspector_answer("GET", "/ui")
    assert page is not None and page.status == 200
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert b'<script type="module" src="/ui/app.js">' in page.body
    assert inspector_answer("GET", "/ui/") == page
    script = inspector_answer("GET", "/ui/app.js")
    assert script is not None and script.status == 200
    assert script.headers["content-type"].startswith("text/javascript")
    head = inspector_answer("HEAD", "/ui/inspector.css")
    assert head is not None and head.status == 200 and head.body == b""
    home = inspector_answer("GET", "/")
    assert home is not None and (home.status, home.headers["location"]) == (307, "ui")
    for bad in ("/ui/nope.js", "/ui/../pyproject.toml", "/ui/app.py", "/ui/.hidden.js"):
        refused = inspector_answer("GET", bad)
        assert refused is not None and refused.status == 404, bad
        assert json.loads(refused.body)["error"]["code"] == "no_route"
    # Everything else is the front door's (the API, other methods on the page).
    assert inspector_answer("GET", "/v1/actors/alice/tasks") is None
    assert inspector_answer("POST", "/ui") is None
    assert inspector_answer("GET", "/uix") is None
