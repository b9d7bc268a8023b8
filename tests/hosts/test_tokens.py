"""Scoped tokens (runtimes/actor/tokens.py) and the route table (runtimes/actor/scopes.py)
on their own: signing, verifying, rotation, and the table's decisions."""

from __future__ import annotations

import pytest
from fastapi.routing import APIRoute

from core.testing import VirtualClock
from runtimes.actor.api import ApiConfig, create_app, history
from runtimes.actor.memory import MemoryHost
from runtimes.actor.scopes import ROUTE_RIGHTS, RouteRights, unmapped_routes
from runtimes.actor.testing import kit_config
from runtimes.actor.tokens import (
    MAX_TTL_S,
    SigningKeys,
    TokenRefused,
    parse_duration,
    parse_keys,
)

KEYS = SigningKeys(["key-one-0123456789abcdef"])


def _reason(keys: SigningKeys, token: str, now: float | None = None) -> str:
    with pytest.raises(TokenRefused) as refused:
        keys.verify(token, now=now)
    return refused.value.reason


def test_a_token_carries_its_scope_until_it_expires() -> None:
    token = KEYS.mint("alice", "submit", 60, conversation=4, now=1000)
    scope = KEYS.verify(token, now=1059.9)
    assert (scope.actor, scope.rights, scope.conversation) == ("alice", "submit", 4)
    assert (scope.issued_at, scope.expires_at) == (1000, 1060)
    assert scope.allows("read") and scope.allows("submit") and not scope.allows("admin")
    assert _reason(KEYS, token, now=1060) == "expired"


def test_every_changed_character_is_refused() -> None:
    token = KEYS.mint("alice", "read", 60)
    for i, c in enumerate(token):
        for other in {"A", "b", "_", "."} - {c}:
            changed = token[:i] + other + token[i + 1 :]
            assert _reason(KEYS, changed) in ("malformed", "bad_signature"), changed
    assert _reason(KEYS, token + "A") in ("malformed", "bad_signature")
    assert _reason(KEYS, "pdt1." + token[5:]) == "malformed"  # a sandbox token's prefix
    assert _reason(KEYS, "") == "malformed"
    assert _reason(KEYS, "pat1." + "a" * 5000) == "malformed"


def test_rotation_the_newest_key_signs_and_every_listed_one_verifies() -> None:
    old = SigningKeys(["old-key-0123456789abcdef"])
    rotated = SigningKeys(["new-key-0123456789abcdef", "old-key-0123456789abcdef"])
    issued_before = old.mint("alice", "read", 60)
    assert rotated.verify(issued_before).actor == "alice"
    issued_after = rotated.mint("alice", "read", 60)
    assert _reason(old, issued_after) == "bad_signature"
    assert SigningKeys(["new-key-0123456789abcdef"]).verify(issued_after).actor == "alice"
    assert _reason(SigningKeys(["new-key-0123456789abcdef"]), issued_before) == "bad_signature"


def test_the_derived_key_belongs_to_its_host_token_and_stays_out_of_reprs() -> None:
    derived = SigningKeys.for_host("host-token-0123456789")
    token = derived.mint("alice", "read", 60)
    assert _reason(SigningKeys.for_host("another-host-token-0123"), token) == "bad_signature"
    assert _reason(SigningKeys(["host-token-0123456789"]), token) == "bad_signature"
    assert "0123" not in repr(derived)
    assert SigningKeys.for_host("host-token-0123456789", ["k" * 16]).verify(
        SigningKeys(["k" * 16]).mint("a", "read", 60)
    )


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("a.b", "read", 60), "actor ids match"),
        (("alice", "owner", 60), "rights must be one of"),
        (("alice", "read", 0.5), "at least one second"),
        (("alice", "read", MAX_TTL_S + 1), "at most"),
        (("alice", "read", True), "at least one second"),
    ],
)
def test_minting_refuses_bad_input(args: tuple[str, str, float], says: str) -> None:
    with pytest.raises(ValueError, match=says):
        KEYS.mint(*args)
    with pytest.raises(ValueError, match="conversation id"):
        KEYS.mint("alice", "read", 60, conversation=0)
    with pytest.raises(ValueError, match="at least 16"):
        SigningKeys(["short"])


def test_durations_and_key_lists() -> None:
    assert [parse_duration(t) for t in ("90", "90s", "15m", "1.5h", "2d")] == [
        90,
        90,
        900,
        5400,
        172800,
    ]
    for bad in ("", "0", "10 minutes", "-5", "1w"):
        with pytest.raises(ValueError, match="duration"):
            parse_duration(bad)
    assert parse_keys(None) == () and parse_keys(" ") == ()
    assert parse_keys("a" * 16 + ", " + "b" * 16) == ("a" * 16, "b" * 16)
    with pytest.raises(ValueError, match="at least 16"):
        parse_keys("a" * 16 + ",short")


def test_the_table_maps_rights_as_the_issue_lists_them() -> None:
    reads = {t for (m, t), need in ROUTE_RIGHTS.items() if need == "read"}
    assert all(m == "GET" for (m, t), need in ROUTE_RIGHTS.items() if need == "read")
    assert "/v1/actors/{actor}/conversations/{conversation_id}/watch" in reads
    submits = {(m, t.rsplit("/", 1)[-1]) for (m, t), n in ROUTE_RIGHTS.items() if n == "submit"}
    assert submits == {
        ("POST", "submissions"),
        ("POST", "abort"),
        ("POST", "reminders"),
        ("DELETE", "{task_id}"),
        ("POST", "{approval_id}"),  # a decision on a tool call (issue 34)
        ("POST", "schedules"),
        ("DELETE", "{schedule_id}"),
    }
    rights = RouteRights()
    admin = KEYS.verify(KEYS.mint("alice", "admin", 60))
    assert rights.check(admin, "PATCH", "/v1/actors/alice/conversations/1/agent") is None
    assert rights.check(admin, "HEAD", "/v1/actors/alice/tasks") is None
    denied = rights.check(admin, "GET", "/v1/actors")
    assert denied is not None and "host's API token" in denied.message
    unknown = rights.check(admin, "GET", "/v1/actors/alice/secret-route")
    assert unknown is not None and unknown.status == 403


def test_a_route_missing_from_the_table_stops_the_app_from_being_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert unmapped_routes([("GET", "/v1/actors/{actor}/new"), ("GET", "/openapi.json")]) == [
        "GET /v1/actors/{actor}/new"
    ]
    host = MemoryHost(kit_config(), clock=VirtualClock())
    app = create_app(host, ApiConfig("t" * 16))  # every route of the API is mapped
    document = app.openapi()
    assert len([p for p in document["paths"] if p.startswith("/v1/")]) >= 15

    async def new_route() -> None:
        return None

    extra = APIRoute("/v1/actors/{actor}/new", new_route, methods=["GET"])
    monkeypatch.setattr(history.router, "routes", [*history.router.routes, extra])
    with pytest.raises(RuntimeError, match=r"GET /v1/actors/\{actor\}/new"):
        create_app(host, ApiConfig("t" * 16))
