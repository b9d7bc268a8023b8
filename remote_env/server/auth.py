"""Bearer-token authentication of requests: the token names the workspace."""

from __future__ import annotations

from starlette.requests import Request

from remote_env.auth import InvalidToken, verify_token
from remote_env.server.errors import Rejected

__all__ = ["workspace_from_request"]

_REASONS = {
    "malformed": "the bearer token is malformed",
    "bad_signature": "the bearer token's signature is invalid",
    "expired": "the bearer token has expired",
}


def workspace_from_request(request: Request, secret: bytes) -> str:
    """Return the workspace a request's ``Authorization: Bearer`` token grants.

    Raises:
        Rejected: 401 ``unauthorized`` for a missing, malformed, forged or expired token.
    """
    header = request.headers.get("authorization")
    if header is None:
        raise Rejected(401, "unauthorized", "missing bearer token")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Rejected(401, "unauthorized", "expected 'Authorization: Bearer <token>'")
    try:
        claims = verify_token(secret, token.strip())
    except InvalidToken as exc:
        raise Rejected(401, "unauthorized", _REASONS.get(exc.reason, "invalid token")) from None
    return claims.workspace
