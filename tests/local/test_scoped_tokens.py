"""Scoped tokens on the local host, over real HTTP: what a token for one actor may do,
what it is refused (before any actor file exists), minting them, and the CORS allow-list."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from runtimes.actor.tokens import SigningKeys
from tests.hosts.scope_sweep import bad_tokens, openapi_routes, sweep_read_token
from tests.local.support import TOKEN, Running, files, host_config, serve_in_thread

KEYS = SigningKeys.for_host(TOKEN)  # no keys configured: derived from the host token
APP = "https://app.example.com"


@pytest.fixture
def running(tmp_path: Path) -> Iterator[Running]:
    with serve_in_thread(host_config(tmp_path / "data"), cors_origins=(APP,)) as r:
        yield r


def _bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def _submit(running: Running, actor: str, token: str, **fields: object) -> httpx.Response:
    body = {"type": "input", "content": "hi", **fields}
    with running.client(token) as c:
        return c.post(f"/v1/actors/{actor}/submissions", json=body)


def test_a_read_token_reads_its_actor_and_is_refused_everything_else(running: Running) -> None:
    assert _submit(running, "alice", TOKEN).status_code == 202  # alice exists
    with running.client() as c:
        document = c.get("/openapi.json").json()

    async def send(method: str, path: str, headers: dict[str, str], body: bytes | None) -> int:
        async with (
            httpx.AsyncClient(base_url=running.url, timeout=30) as client,
            # Streamed: the watch's answer is an endless event stream; its status is enough.
            client.stream(method, path, headers=headers, content=body) as r,
        ):
            return r.status_code

    problems, sent = asyncio.run(
        sweep_read_token(send, openapi_routes(document), KEYS, actor="alice", other="bob")
    )
    assert problems == []
    assert sent >= 36
    assert sorted(p.name for p in running.data_dir.glob("*.sqlite")) == ["alice.sqlite"]
    with running.client(KEYS.mint("alice", "read", 60)) as c:
        view = c.get("/v1/actors/alice/conversations/1/view")
        assert view.status_code == 200, view.text
        refused = c.post("/v1/actors/alice/submissions", json={"type": "input", "content": "x"})
    assert refused.status_code == 403
    assert refused.json()["error"] == {
        "code": "forbidden",
        "message": "this token grants read; POST /v1/actors/{actor}/submissions needs submit",
    }


@pytest.mark.parametrize("kind", ["expired", "tampered", "other key", "other actor", "truncated"])
def test_a_bad_token_is_refused_before_the_actor_is_created(running: Running, kind: str) -> None:
    token = bad_tokens(KEYS, "carol", "bob")[kind]
    r = _submit(running, "carol", token)
    assert r.status_code == (403 if kind == "other actor" else 401), r.text
    with running.client(token) as c:
        patched = c.patch("/v1/actors/carol/conversations/1/agent", json={"thinking": "low"})
    assert patched.status_code == r.status_code
    if r.status_code == 401:
        assert r.headers["www-authenticate"] == "Bearer"
        message = "the token has expired" if kind == "expired" else "invalid bearer token"
        assert r.json()["error"] == {"code": "unauthorized", "message": message}
    assert files(running.data_dir) == []  # no actor file, not even a lock


def test_a_submit_token_submits_and_polls_and_is_refused_admin_routes(running: Running) -> None:
    token = KEYS.mint("alice", "submit", 60)
    accepted = _submit(running, "alice", token)
    assert accepted.status_code == 202, accepted.text
    with running.client(token) as c:
        state = c.get(f"/v1/actors/alice/submissions/{accepted.json()['id']}", params={"wait": 20})
        assert state.json()["answer"]["text"] == "echo: hi"
        reminder = c.post(
            "/v1/actors/alice/conversations/1/reminders", json={"message": "x", "after": 600}
        )
        assert reminder.status_code == 201, reminder.text
        cancelled = c.delete(f"/v1/actors/alice/timers/{reminder.json()['task']}")
        assert cancelled.status_code == 200, cancelled.text
        assert c.post("/v1/actors/alice/conversations/1/compact").status_code == 403
        assert c.patch("/v1/actors/alice/conversations/1/agent", json={}).status_code == 403
        assert c.get("/v1/actors").status_code == 403  # the host-wide listing
    with running.client(KEYS.mint("alice", "admin", 60)) as c:
        assert c.patch("/v1/actors/alice/conversations/1/agent", json={}).status_code == 200
        assert c.get("/v1/actors").status_code == 403  # admin of one actor, not the host
        mint = c.post("/v1/tokens", json={"actor": "alice", "rights": "admin", "ttl_s": 9})
        assert mint.status_code == 403  # nor can it mint tokens


def test_a_conversation_token_reaches_that_conversation_only(running: Running) -> None:
    first = _submit(running, "alice", TOKEN).json()
    with running.client() as c:
        done = c.get(f"/v1/actors/alice/submissions/{first['id']}", params={"wait": 20}).json()
        at = done["entry_id"]
        forked = c.post("/v1/actors/alice/conversations/1/fork", json={"at_entry": at})
    assert forked.status_code == 201, forked.text
    child = forked.json()["conversation_id"]
    token = KEYS.mint("alice", "submit", 60, conversation=child)
    assert _submit(running, "alice", token, conversation_id=child).status_code == 202
    assert _submit(running, "alice", token).status_code == 403  # the root, by default
    assert _submit(running, "alice", token, conversation_id=1).status_code == 403
    with running.client(token) as c:
        assert c.get(f"/v1/actors/alice/conversations/{child}/view").status_code == 200
        assert c.get("/v1/actors/alice/conversations/1/view").status_code == 403
        assert c.get("/v1/actors/alice/tasks").status_code == 403  # every conversation's
        # Parsers differ on which duplicate key wins: such a body is refused.
        raw = f'{{"type":"input","content":"x","conversation_id":{child},"conversation_id":1}}'
        dup = c.post(
            "/v1/actors/alice/submissions",
            content=raw,
            headers={"content-type": "application/json"},
        )
        assert dup.status_code == 403


def test_the_host_token_mints_tokens_over_http(running: Running) -> None:
    with running.client() as c:
        r = c.post(
            "/v1/tokens",
            json={"actor": "alice", "conversation_id": 1, "rights": "read", "ttl_s": 600},
        )
        assert r.status_code == 201, r.text
        minted = r.json()
        bad = c.post("/v1/tokens", json={"actor": "a.b", "rights": "read", "ttl_s": 600})
        assert bad.status_code == 422
        forever = c.post("/v1/tokens", json={"actor": "a", "rights": "read", "ttl_s": 10**9})
        assert forever.status_code == 422
    scope = KEYS.verify(minted["token"])
    assert (scope.actor, scope.rights, scope.conversation) == ("alice", "read", 1)
    assert minted["expires_at"] == scope.expires_at
    assert files(running.data_dir) == []  # minting opens no actor


def test_cors_lets_an_allowed_origin_call_with_a_token(running: Running) -> None:
    token = KEYS.mint("alice", "submit", 60)
    with httpx.Client(base_url=running.url) as c:
        preflight = c.options(
            "/v1/actors/alice/submissions",
            headers={
                "origin": APP,
                "access-control-request-method": "POST",
                "access-control-request-headers": "authorization, content-type",
            },
        )
        assert preflight.status_code == 200, preflight.text
        assert preflight.headers["access-control-allow-origin"] == APP
        assert "POST" in preflight.headers["access-control-allow-methods"]
        r = c.post(
            "/v1/actors/alice/submissions",
            headers={**_bearer(token), "origin": APP},
            json={"type": "input", "content": "hi"},
        )
        assert r.status_code == 202 and r.headers["access-control-allow-origin"] == APP
        refused = c.get("/v1/actors/bob/tasks", headers={**_bearer(token), "origin": APP})
        assert refused.status_code == 403  # the page can read the refusal too
        assert refused.headers["access-control-allow-origin"] == APP
        other = c.options(
            "/v1/actors/alice/submissions",
            headers={"origin": "https://evil.example", "access-control-request-method": "POST"},
        )
        assert "access-control-allow-origin" not in other.headers
        plain = c.get(
            "/v1/actors/alice/tasks", headers={**_bearer(token), "origin": "https://evil.example"}
        )
        assert "access-control-allow-origin" not in plain.headers
    assert json.loads(r.text)["status"] in ("placed", "queued", "done")


def test_the_openapi_document_says_the_right_each_operation_needs(running: Running) -> None:
    with running.client() as c:
        document = c.get("/openapi.json").json()
    rights = {
        (method.upper(), path): operation.get("x-perdure-right")
        for path, operations in document["paths"].items()
        if path.startswith("/v1/")
        for method, operation in operations.items()
    }
    assert None not in rights.values()
    assert rights[("GET", "/v1/actors/{actor}/conversations/{conversation_id}/view")] == "read"
    assert rights[("POST", "/v1/actors/{actor}/submissions")] == "submit"
    assert rights[("POST", "/v1/actors/{actor}/conversations/{conversation_id}/fork")] == "admin"
    assert rights[("POST", "/v1/tokens")] == "operator"


def test_a_conversation_token_s_oversized_body_gets_the_body_limit(running: Running) -> None:
    token = KEYS.mint("alice", "submit", 60, conversation=1)
    big = {"type": "input", "content": "x" * (80 * 1024), "conversation_id": 1}
    r = _submit(running, "alice", token, **{k: v for k, v in big.items() if k != "type"})
    assert r.status_code == 413, r.text  # read up to the limit for the check, then refused
    assert r.json()["error"]["code"] == "body_too_large"
    assert files(running.data_dir) == []


def test_the_scope_is_decided_before_the_body_is_parsed(running: Running) -> None:
    token = KEYS.mint("bob", "submit", 60)
    headers = {"content-type": "application/json", **_bearer(token)}
    with httpx.Client(base_url=running.url) as c:
        r = c.post("/v1/actors/alice/submissions", content=b"{broken", headers=headers)
    assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden"  # as the Worker
