"""Workspace tokens: HMAC-SHA256 signed, scoped to one workspace, with an expiry.

A token is ``pdt1.<payload>.<signature>`` where ``payload`` is the base64url (unpadded) JSON
``{"ws": workspace, "iat": issued, "exp": expires, "jti": random id}`` and ``signature`` is the
base64url HMAC-SHA256 of ``"pdt1." + payload`` under the sandbox secret. Only the holder of
the secret (the control plane and the sandbox host) can mint one; the signature is checked in
constant time before the payload is even parsed.

This module is stdlib-only so an edge runtime can mint tokens without the server's
dependencies.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from remote_env.workspace_names import is_workspace_name

__all__ = [
    "MIN_SECRET_BYTES",
    "TOKEN_PREFIX",
    "InvalidToken",
    "TokenClaims",
    "b64url_decode",
    "b64url_encode",
    "load_secret",
    "mint_token",
    "verify_token",
    "write_new_secret",
]

TOKEN_PREFIX = "pdt1"
MIN_SECRET_BYTES = 16
_MAX_TOKEN_LENGTH = 4096


class InvalidToken(Exception):
    """The token is malformed, forged, expired or otherwise unusable (``reason`` says which)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class TokenClaims:
    """The verified content of a token."""

    workspace: str
    issued_at: int
    expires_at: int
    token_id: str


def b64url_encode(data: bytes) -> str:
    """``data`` as unpadded base64url: the encoding of every signed token's parts."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: str) -> bytes | None:
    """The bytes ``text`` spells in unpadded base64url, or ``None`` if it is malformed or
    not the canonical spelling: the last character's unused low bits would otherwise give
    every token several spellings that all verify (a changed token still valid)."""
    if not re.fullmatch(r"[A-Za-z0-9_-]*", text):
        return None
    try:
        data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        return None
    return data if b64url_encode(data) == text else None


def _b64decode(text: str) -> bytes:
    data = b64url_decode(text)
    if data is None:
        raise InvalidToken("malformed")
    return data


def _check_secret(secret: bytes) -> None:
    if not isinstance(secret, bytes) or len(secret) < MIN_SECRET_BYTES:
        raise ValueError(f"the secret must be at least {MIN_SECRET_BYTES} bytes")


def _sign(secret: bytes, signed_part: str) -> bytes:
    return hmac.new(secret, signed_part.encode("ascii"), hashlib.sha256).digest()


def mint_token(secret: bytes, workspace: str, ttl: float, *, now: float | None = None) -> str:
    """Mint a token for ``workspace`` valid for ``ttl`` seconds from ``now`` (default: now).

    Raises:
        ValueError: a short secret, an invalid workspace name or a non-positive ``ttl``.
    """
    _check_secret(secret)
    if not is_workspace_name(workspace):
        raise ValueError(f"invalid workspace name {workspace!r}")
    if not ttl > 0:
        raise ValueError("ttl must be positive")
    issued = int(time.time() if now is None else now)
    payload = {
        "ws": workspace,
        "iat": issued,
        "exp": issued + int(ttl),
        "jti": secrets.token_hex(8),
    }
    body = b64url_encode(json.dumps(payload, separators=(",", ":"), sort_keys=True).encode())
    signed_part = f"{TOKEN_PREFIX}.{body}"
    return f"{signed_part}.{b64url_encode(_sign(secret, signed_part))}"


def verify_token(secret: bytes, token: str, *, now: float | None = None) -> TokenClaims:
    """Check a token's signature and expiry and return its claims.

    Raises:
        InvalidToken: ``reason`` is ``malformed``, ``bad_signature`` or ``expired``.
    """
    _check_secret(secret)
    if not isinstance(token, str) or len(token) > _MAX_TOKEN_LENGTH or not token.isascii():
        raise InvalidToken("malformed")
    parts = token.split(".")
    if len(parts) != 3 or parts[0] != TOKEN_PREFIX:
        raise InvalidToken("malformed")
    signed_part = f"{parts[0]}.{parts[1]}"
    signature = _b64decode(parts[2])
    # compare_digest on the raw MACs: timing does not reveal how many bytes matched.
    if not hmac.compare_digest(signature, _sign(secret, signed_part)):
        raise InvalidToken("bad_signature")
    try:
        payload = json.loads(_b64decode(parts[1]))
    except ValueError as exc:
        raise InvalidToken("malformed") from exc
    if not isinstance(payload, dict):
        raise InvalidToken("malformed")
    workspace, issued, expires, token_id = (
        payload.get("ws"),
        payload.get("iat"),
        payload.get("exp"),
        payload.get("jti"),
    )
    if (
        not isinstance(workspace, str)
        or not is_workspace_name(workspace)
        or type(issued) is not int
        or type(expires) is not int
        or not isinstance(token_id, str)
    ):
        raise InvalidToken("malformed")
    current = time.time() if now is None else now
    if current >= expires:
        raise InvalidToken("expired")
    return TokenClaims(workspace=workspace, issued_at=issued, expires_at=expires, token_id=token_id)


def load_secret(path: Path) -> bytes:
    """Read a secret file (surrounding whitespace ignored).

    Raises:
        OSError: the file cannot be read.
        ValueError: the secret is shorter than :data:`MIN_SECRET_BYTES`.
    """
    secret = path.read_bytes().strip()
    _check_secret(secret)
    return secret


def write_new_secret(path: Path) -> bytes:
    """Create ``path`` (mode 0600, failing if it exists) holding a fresh random secret."""
    secret = secrets.token_hex(32).encode("ascii")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(secret + b"\n")
    return secret
