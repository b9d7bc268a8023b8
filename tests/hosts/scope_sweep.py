"""The scoped-token sweep, shared by the three hosts' tests: every route of the OpenAPI
document, sent with a token scoped to one actor, through whatever front door the host
has (``Send``).

Its expectations are written here, independently of the route table the hosts enforce
(``runtimes.actor.scopes.ROUTE_RIGHTS``): a ``read`` token on actor A may ``GET`` A's
routes and nothing else — every route of another actor, every write of A and every
host-wide route answer 403 (or 404).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from runtimes.actor.tokens import SigningKeys

__all__ = [
    "Send",
    "bad_tokens",
    "openapi_routes",
    "sample_body",
    "sample_path",
    "sweep_read_token",
]

Send = Callable[[str, str, dict[str, str], bytes | None], Awaitable[int]]
"""``(method, path, headers, body) -> status``: one request through the host's front door."""

REFUSED = (403, 404)


def openapi_routes(document: dict[str, Any]) -> list[tuple[str, str]]:
    """Every ``(METHOD, template)`` under ``/v1/`` in an OpenAPI document."""
    routes = [
        (method.upper(), path)
        for path, operations in document["paths"].items()
        if path.startswith("/v1/")
        for method in operations
        if method in ("get", "post", "put", "patch", "delete")
    ]
    assert len(routes) >= 18, routes  # the whole API, not an empty document
    return sorted(routes)


def sample_path(template: str, actor: str) -> str:
    return (
        template.replace("{actor}", actor)
        .replace("{conversation_id}", "1")
        .replace("{submission_id}", "1")
        .replace("{task_id}", "1")
    )


def sample_body(method: str, template: str) -> bytes | None:
    """A body the route would accept (so a refusal is the token's doing, not the body's)."""
    if method not in ("POST", "PATCH", "PUT"):
        return None
    if template.endswith("/submissions"):
        return json.dumps({"type": "input", "content": "sweep", "request_id": "sweep"}).encode()
    if template.endswith("/reminders"):
        return json.dumps({"message": "later", "after": 3600}).encode()
    if template.endswith("/fork"):
        return json.dumps({"at_entry": 1}).encode()
    if template == "/v1/tokens":
        return json.dumps({"actor": "someone", "rights": "admin", "ttl_s": 60}).encode()
    return b"{}"


def _may(method: str, template: str) -> bool:
    """What a read token on the sample actor may do: read that actor, nothing else."""
    return method == "GET" and template.startswith("/v1/actors/{actor}/")


async def sweep_read_token(
    send: Send,
    routes: Iterable[tuple[str, str]],
    keys: SigningKeys,
    *,
    actor: str,
    other: str,
    streams: bool = True,
) -> tuple[list[str], int]:
    """Send every route for ``actor`` and ``other`` with a read token for ``actor``.
    Returns the problems (route, expectation, status) and how many requests were sent.
    ``streams=False``: the allowed watch (an endless event stream) is not sent, for a
    front door that answers only once the app's response has ended."""
    token = keys.mint(actor, "read", 600)
    problems: list[str] = []
    sent = 0
    for method, template in routes:
        body = sample_body(method, template)
        headers = {"authorization": f"Bearer {token}"}
        if body is not None:
            headers["content-type"] = "application/json"
        targets = {sample_path(template, actor): actor, sample_path(template, other): other}
        for path, target in targets.items():
            allowed = target == actor and _may(method, template)
            if allowed and not streams and template.endswith("/watch"):
                continue
            status = await send(method, path, headers, body)
            sent += 1
            if allowed and status in (401, 403):
                problems.append(f"{method} {path}: allowed, got {status}")
            if not allowed and status not in REFUSED:
                problems.append(f"{method} {path}: must be refused, got {status}")
    return problems, sent


def bad_tokens(keys: SigningKeys, actor: str, other: str) -> dict[str, str]:
    """Tokens each host must refuse for ``actor``'s routes: expired, tampered, signed
    with another key, and scoped to another actor (``other``)."""
    good = keys.mint(actor, "admin", 600)
    head, _claims, signature = good.split(".")
    forged = keys.mint(other, "admin", 600).split(".")[1]
    return {
        "expired": keys.mint(actor, "admin", 60, now=1_000_000),
        "tampered": f"{head}.{forged}.{signature}",  # another actor's claims, this signature
        "other key": SigningKeys(["another signing key, not the host's"]).mint(actor, "admin", 600),
        "other actor": keys.mint(other, "admin", 600),
        "truncated": good[:-2],
    }
