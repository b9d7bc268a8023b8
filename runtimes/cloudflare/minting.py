"""``POST /v1/tokens`` at the Worker: the operator mints a scoped token there too.

The Worker routes every other ``/v1/`` request to one Durable Object, but minting touches
no actor, so the front door answers it itself, as a pure decision (no Workers SDK):
the host's API token only, a JSON body as the app's ``POST /v1/tokens`` takes it, and the
same answer (``201 {token, actor, conversation_id, rights, expires_at,
expires_at_iso}``), signed with the newest of the Worker's keys.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Mapping
from typing import Any

from core.records import MAX_ID
from core.times import iso_time
from runtimes.actor.errors import InvalidActorId
from runtimes.actor.ids import check_actor_id
from runtimes.actor.tokens import MAX_TTL_S, RIGHTS, SigningKeys, looks_scoped
from runtimes.cloudflare.front_door import Refusal

__all__ = ["TOKENS_PATH", "mint_at_door"]

TOKENS_PATH = "/v1/tokens"
_FIELDS = frozenset({"actor", "conversation_id", "rights", "ttl_s"})


def mint_at_door(
    api_token: str,
    keys: SigningKeys,
    method: str,
    headers: Mapping[str, str],
    body: bytes | None,
    max_body_bytes: int,
) -> tuple[int, dict[str, Any]] | Refusal | None:
    """The answer to ``method /v1/tokens`` (``headers`` with lower-case names). Called
    first with ``body=None`` (``None``: go on and read the body, then call again)."""
    scheme, _, bearer = headers.get("authorization", "").partition(" ")
    bearer = bearer.strip()
    if scheme.lower() != "bearer" or not hmac.compare_digest(bearer.encode(), api_token.encode()):
        if scheme.lower() == "bearer" and looks_scoped(bearer):
            return Refusal(403, "forbidden", "POST /v1/tokens needs the host's API token")
        message = "invalid bearer token" if bearer else "missing bearer token"
        return Refusal(401, "unauthorized", message, (("www-authenticate", "Bearer"),))
    if method.upper() != "POST":
        return Refusal(
            405, "method_not_allowed", f"{method} is not allowed here", (("allow", "POST"),)
        )
    declared = headers.get("content-length")
    too_large = (
        declared is not None and (not declared.isdigit() or int(declared) > max_body_bytes)
    ) or (body is not None and len(body) > max_body_bytes)
    if too_large:
        message = f"the request body exceeds {max_body_bytes} bytes"
        return Refusal(413, "body_too_large", message, (("connection", "close"),))
    if body is None:
        return None
    try:
        request = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return Refusal(400, "malformed_json", "the request body is not valid JSON")
    problem = _problem(request)
    if problem is not None:
        return Refusal(422, "invalid", f"invalid request: {problem}")
    ttl = int(request["ttl_s"])
    conversation = request.get("conversation_id")
    conversation = None if conversation is None else int(conversation)
    token = keys.mint(request["actor"], request["rights"], ttl, conversation=conversation)
    expires = keys.verify(token).expires_at
    return 201, {
        "token": token,
        "actor": request["actor"],
        "conversation_id": conversation,
        "rights": request["rights"],
        "expires_at": expires,
        "expires_at_iso": iso_time(expires * 1000),
    }


def _whole(value: object, low: int, high: int) -> bool:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return type(value) is int and low <= value <= high


def _problem(request: object) -> str | None:
    """What is wrong with the body, in the app's words for the same field, or ``None``."""
    if not isinstance(request, dict):
        return "body: Input should be a valid dictionary"
    extra = sorted(set(request) - _FIELDS)
    if extra:
        return f"body.{extra[0]}: Extra inputs are not permitted"
    for name in ("actor", "rights", "ttl_s"):
        if name not in request:
            return f"body.{name}: Field required"
    try:
        check_actor_id(request["actor"])
    except InvalidActorId as error:
        return f"body.actor: {error}"
    if request["rights"] not in RIGHTS:
        return "body.rights: Input should be 'read', 'submit' or 'admin'"
    if not _whole(request["ttl_s"], 1, MAX_TTL_S):
        return f"body.ttl_s: an integer from 1 to {MAX_TTL_S} (seconds)"
    conversation = request.get("conversation_id")
    if conversation is not None and not _whole(conversation, 1, MAX_ID):
        return f"body.conversation_id: an integer from 1 to {MAX_ID}"
    return None
