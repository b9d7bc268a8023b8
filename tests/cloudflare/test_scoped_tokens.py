"""Scoped tokens at the Cloudflare Worker: the front door decides on the token's scope
before it addresses a Durable Object, so a refused request constructs none. The Worker's
path (``Default.fetch``: admit without the body, then with it, then forward) is played
here on CPython, the objects being the ``ctx.storage`` stand-in's
(:class:`~tests.cloudflare.kit_target.DurableNamespaceHost`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from core.testing import VirtualClock
from runtimes.actor.api.app import ApiConfig, create_app
from runtimes.actor.api.route_table import actor_routes
from runtimes.actor.cors import CorsPolicy
from runtimes.actor.testing import kit_config
from runtimes.actor.tokens import SigningKeys
from runtimes.cloudflare import names
from runtimes.cloudflare.front_door import BODY_METHODS, Forward, FrontDoor, Refusal, RouteTable
from runtimes.cloudflare.minting import TOKENS_PATH, mint_at_door
from runtimes.cloudflare.settings import MisconfiguredWorker, WorkerSettings
from tests.cloudflare.kit_target import DurableNamespace, DurableNamespaceHost
from tests.hosts.scope_sweep import bad_tokens, openapi_routes, sweep_read_token

TOKEN = "worker-token-0123456789"
KEYS = SigningKeys.for_host(TOKEN)
ROUTES = RouteTable.from_routes(actor_routes())  # what worker.api_routes() builds


class Worker:
    """The Worker's fetch over a stand-in namespace; ``addressed``: the objects it sent
    requests to (``ACTORS.getByName``)."""

    def __init__(self, host: DurableNamespaceHost) -> None:
        self.door = FrontDoor(TOKEN, ROUTES, keys=KEYS)
        self.app = create_app(host, ApiConfig(TOKEN))  # what each object serves
        self.addressed: list[str] = []

    async def send(
        self, method: str, path: str, headers: dict[str, str], body: bytes | None
    ) -> int:
        if path == TOKENS_PATH:  # answered by the Worker itself (Default._mint)
            minted = mint_at_door(TOKEN, KEYS, method, headers, body or b"", 1024 * 1024)
            assert minted is not None
            return minted.status if isinstance(minted, Refusal) else minted[0]
        decision = self.door.admit(method, path, headers)
        if not isinstance(decision, Refusal) and method in BODY_METHODS:
            decision = self.door.admit(method, path, headers, body or b"")
        if isinstance(decision, Refusal):
            return decision.status
        self.addressed.append(decision.actor)
        return await _status(self.app, method, path, headers, body or b"")


async def _status(app: Any, method: str, path: str, headers: dict[str, str], body: bytes) -> int:
    """The status the app answers (the watch's stream is left once it has started)."""
    started: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    sent_body = False

    async def receive() -> dict[str, Any]:
        nonlocal sent_body
        if not sent_body:
            sent_body = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.shield(started)
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start" and not started.done():
            started.set_result(int(message["status"]))

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "https",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(k.encode(), v.encode()) for k, v in headers.items()],
        "client": None,
        "server": None,
    }
    serving = asyncio.ensure_future(app(scope, receive, send))
    try:
        return await asyncio.wait_for(asyncio.shield(started), 30)
    finally:
        await asyncio.wait_for(serving, 30)


@asynccontextmanager
async def serving(tmp_path: Path) -> AsyncIterator[tuple[Worker, DurableNamespace]]:
    namespace = DurableNamespace(tmp_path)
    host = namespace.host(kit_config(), VirtualClock())
    await host.start()
    try:
        yield Worker(host), namespace
    finally:
        await host.close()
        namespace.close()


async def test_a_read_token_reaches_its_actor_only_and_no_other_object(tmp_path: Path) -> None:
    async with serving(tmp_path) as (door, namespace):
        await _sweep(door, namespace)


async def _sweep(door: Worker, namespace: DurableNamespace) -> None:
    body = b'{"type": "input", "content": "hi"}'
    host_auth = {"authorization": f"Bearer {TOKEN}", "content-type": "application/json"}
    assert await door.send("POST", "/v1/actors/alice/submissions", host_auth, body) == 202
    document = door.app.openapi()
    door.addressed.clear()
    problems, sent = await sweep_read_token(
        door.send, openapi_routes(document), KEYS, actor="alice", other="bob"
    )
    assert problems == []
    assert sent >= 36
    assert set(door.addressed) == {"alice"}  # bob's object was never addressed
    reads = [t for m, t in openapi_routes(document) if m == "GET" and "{actor}" in t]
    assert len(door.addressed) == len(reads)  # every read of alice's reached her object
    assert set(namespace.homes) == {"alice"}  # ... nor constructed
    # Every write of alice was refused at the door: what alice's object got were reads.
    read = KEYS.mint("alice", "read", 60)
    refused = door.door.admit(
        "POST",
        "/v1/actors/alice/conversations/1/abort",
        {"authorization": f"Bearer {read}"},
        b"{}",
    )
    assert refused == Refusal(
        403,
        "forbidden",
        "this token grants read; POST /v1/actors/{actor}/conversations/{conversation_id}/abort"
        " needs submit",
    )


@pytest.mark.parametrize("kind", ["expired", "tampered", "other key", "other actor", "truncated"])
async def test_a_bad_token_is_refused_before_any_object_is_addressed(
    tmp_path: Path, kind: str
) -> None:
    token = bad_tokens(KEYS, "carol", "bob")[kind]
    headers = {"authorization": f"Bearer {token}", "content-type": "application/json"}
    body = b'{"type": "input", "content": "hi"}'
    async with serving(tmp_path) as (door, namespace):
        status = await door.send("POST", "/v1/actors/carol/submissions", headers, body)
        assert status == (403 if kind == "other actor" else 401)
        assert door.addressed == [] and namespace.homes == {}


async def test_a_conversation_token_is_decided_on_the_body_before_forwarding(
    tmp_path: Path,
) -> None:
    token = KEYS.mint("alice", "submit", 60, conversation=2)
    headers = {"authorization": f"Bearer {token}", "content-type": "application/json"}
    path = "/v1/actors/alice/submissions"
    root = b'{"type": "input", "content": "hi"}'
    async with serving(tmp_path) as (door, namespace):
        # Without the body the door cannot decide yet: the Worker reads it and asks again.
        assert not isinstance(door.door.admit("POST", path, headers), Refusal)
        # ... but what does not depend on the body is refused before it is read.
        for other in (
            KEYS.mint("bob", "submit", 60, conversation=2),
            KEYS.mint("alice", "read", 60, conversation=2),
        ):
            early = door.door.admit("POST", path, {"authorization": f"Bearer {other}"})
            assert isinstance(early, Refusal) and early.status == 403
        assert await door.send("POST", path, headers, root) == 403
        second = b'{"type": "input", "content": "hi", "conversation_id": 2}'
        assert door.door.admit("POST", path, headers, second) == Forward("alice")
        assert door.addressed == [] and namespace.homes == {}


def test_a_door_without_keys_takes_the_api_token_only() -> None:
    plain = FrontDoor(TOKEN, ROUTES)
    token = KEYS.mint("alice", "admin", 60)
    refusal = plain.admit("GET", "/v1/actors/alice/tasks", {"authorization": f"Bearer {token}"})
    assert isinstance(refusal, Refusal) and refusal.status == 401


def test_the_worker_reads_its_signing_keys_and_cors_origins() -> None:
    env = SimpleNamespace(
        **{
            names.API_TOKEN_SECRET: TOKEN,
            names.MODEL_VAR: "gpt-test",
            names.MODEL_BASE_URL_VAR: "https://models.example/v1",
            names.MODEL_API_KEY_SECRET: "sk-model-key",
            names.TOKEN_KEYS_SECRET: "newest-key-0123456789,older-key-0123456789",
            names.CORS_ORIGINS_VAR: "https://app.example.com http://localhost:5173",
        }
    )
    settings = WorkerSettings.from_env(env)
    assert settings.token_keys == ("newest-key-0123456789", "older-key-0123456789")
    assert settings.cors_origins == ("https://app.example.com", "http://localhost:5173")
    assert "newest-key" not in repr(settings)
    old = SigningKeys(["older-key-0123456789"]).mint("alice", "read", 60)
    door = FrontDoor(TOKEN, ROUTES, keys=SigningKeys.for_host(TOKEN, settings.token_keys))
    # A token signed by the older key still verifies while the key is listed (rotation).
    assert door.admit("GET", "/v1/actors/alice/tasks", {"authorization": f"Bearer {old}"}) == (
        Forward("alice")
    )
    setattr(env, names.TOKEN_KEYS_SECRET, "short")
    setattr(env, names.CORS_ORIGINS_VAR, "https://app.example.com/path")
    with pytest.raises(MisconfiguredWorker) as refused:
        WorkerSettings.from_env(env)
    assert [p.split(":")[0] for p in refused.value.problems] == [
        f"secret {names.TOKEN_KEYS_SECRET}",
        f"var {names.CORS_ORIGINS_VAR}",
    ]
    assert "short" not in str(refused.value).replace("shorter", "")


def test_the_cors_policy_answers_preflights_for_allowed_origins_only() -> None:
    policy = CorsPolicy(("https://app.example.com",))
    asked = {
        "origin": "https://app.example.com",
        "access-control-request-method": "POST",
        "access-control-request-headers": "authorization, content-type",
    }
    assert policy.is_preflight("OPTIONS", asked)
    status, headers = policy.preflight(asked)
    allowed = dict(headers)
    assert status == 200 and allowed["access-control-allow-origin"] == "https://app.example.com"
    assert "authorization" in allowed["access-control-allow-headers"]
    assert policy.preflight({**asked, "origin": "https://evil.example"})[0] == 400
    assert policy.preflight({**asked, "access-control-request-method": "PUT"})[0] == 400
    assert dict(policy.response_headers(asked))["access-control-allow-origin"] == (
        "https://app.example.com"
    )
    assert policy.response_headers({"origin": "https://evil.example"}) == ()
    with pytest.raises(ValueError, match="not an origin"):
        CorsPolicy(("*",))


def test_the_worker_mints_tokens_for_the_api_token_only() -> None:
    host = {"authorization": f"Bearer {TOKEN}", "content-type": "application/json"}
    body = b'{"actor": "alice", "rights": "submit", "ttl_s": 600.0, "conversation_id": 2}'
    assert mint_at_door(TOKEN, KEYS, "POST", host, None, 100) is None  # read the body next
    answer = mint_at_door(TOKEN, KEYS, "POST", host, body, 1000)
    assert not isinstance(answer, Refusal) and answer is not None
    status, minted = answer
    scope = KEYS.verify(minted["token"])
    assert status == 201 and (scope.actor, scope.rights, scope.conversation) == (
        "alice",
        "submit",
        2,
    )
    assert minted["expires_at"] == scope.expires_at and minted["conversation_id"] == 2
    scoped = {"authorization": f"Bearer {KEYS.mint('alice', 'admin', 60)}"}
    cases = [
        ("POST", scoped, body, 403, "forbidden"),
        ("POST", {}, body, 401, "unauthorized"),
        ("POST", {"authorization": "Bearer nope"}, body, 401, "unauthorized"),
        ("GET", host, b"", 405, "method_not_allowed"),
        ("POST", host, b"{", 400, "malformed_json"),
        ("POST", host, b"[]", 422, "invalid"),
        ("POST", host, b'{"actor": "a.b", "rights": "read", "ttl_s": 5}', 422, "invalid"),
        ("POST", host, b'{"actor": "a", "rights": "root", "ttl_s": 5}', 422, "invalid"),
        ("POST", host, b'{"actor": "a", "rights": "read", "ttl_s": 5.5}', 422, "invalid"),
        ("POST", host, b'{"actor": "a", "rights": "read", "ttl_s": true}', 422, "invalid"),
        ("POST", host, b'{"actor": "a", "rights": "read"}', 422, "invalid"),
        ("POST", host, b'{"actor": "a", "rights": "read", "ttl_s": 5, "x": 1}', 422, "invalid"),
        ("POST", host, b"x" * 2000, 413, "body_too_large"),
    ]
    for method, headers, raw, status, code in cases:
        refused = mint_at_door(TOKEN, KEYS, method, headers, raw, 1000)
        assert isinstance(refused, Refusal), (raw, refused)
        assert (refused.status, refused.code) == (status, code), raw


def test_the_scope_is_decided_before_the_body_is_parsed_as_the_app_decides_it() -> None:
    door = FrontDoor(TOKEN, ROUTES, keys=KEYS)
    token = KEYS.mint("bob", "submit", 60)
    headers = {"authorization": f"Bearer {token}", "content-type": "application/json"}
    refused = door.admit("POST", "/v1/actors/alice/submissions", headers, b"{broken")
    assert isinstance(refused, Refusal) and (refused.status, refused.code) == (403, "forbidden")
