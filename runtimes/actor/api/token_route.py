"""``POST /v1/tokens``: the operator mints a scoped token over HTTP.

Only the host's API token reaches it (``operator`` in
:data:`~runtimes.actor.scopes.ROUTE_RIGHTS`); it signs with the app's newest key, the same
as ``perdure token`` does offline. Nothing is stored: a token is valid because of its
signature, so minting touches no actor.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from core.times import iso_time
from runtimes.actor.api.routes import API_ERRORS
from runtimes.actor.api.schemas import WHOLE, ConversationId
from runtimes.actor.ids import ACTOR_ID_PATTERN
from runtimes.actor.tokens import MAX_TTL_S, SigningKeys

__all__ = ["MintedToken", "TokenRequest", "router"]

router = APIRouter(prefix="/v1/tokens", responses=API_ERRORS)  # auth: see routes.router


class TokenRequest(BaseModel):
    """What the token grants."""

    model_config = ConfigDict(extra="forbid", strict=True)

    actor: Annotated[str, Field(pattern=ACTOR_ID_PATTERN, description="the one actor")]
    conversation_id: ConversationId | None = Field(
        None, description="only this conversation of the actor (default: all)"
    )
    rights: Annotated[
        Literal["read", "submit", "admin"],
        Field(
            description="read: views, watch, listings; submit: read plus submissions, abort, "
            "reminders; admin: everything on the actor"
        ),
    ]
    ttl_s: Annotated[int, Field(ge=1, le=MAX_TTL_S, description="seconds until it expires"), WHOLE]


class MintedToken(BaseModel):
    """The token, to send as ``Authorization: Bearer <token>``, and what it grants."""

    token: str
    actor: str
    conversation_id: int | None
    rights: str
    expires_at: int = Field(description="epoch seconds")
    expires_at_iso: str


@router.post("", status_code=201, response_model=MintedToken)
async def mint(body: TokenRequest, request: Request) -> MintedToken:
    """Mint a signed, expiring token for one actor (optionally one conversation) with
    ``read``, ``submit`` or ``admin`` rights. Host API token only."""
    keys: SigningKeys = request.app.state.signing_keys
    token = keys.mint(body.actor, body.rights, body.ttl_s, conversation=body.conversation_id)
    expires = keys.verify(token).expires_at
    return MintedToken(
        token=token,
        actor=body.actor,
        conversation_id=body.conversation_id,
        rights=body.rights,
        expires_at=expires,
        expires_at_iso=iso_time(expires * 1000),
    )
