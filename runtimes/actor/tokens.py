"""Scoped API tokens: signed, expiring grants on one actor (optionally one conversation).

The host's API token is the operator's credential: every route of every actor. A
*scoped* token is what an operator hands an end user (a browser app, a script): it
names one actor, optionally one conversation of it, a level of rights and an expiry.

Format: ``pat1.<payload>.<signature>``. ``payload`` is the unpadded base64url of compact
JSON ``{"a": actor, "r": rights, "iat": issued, "exp": expires}`` (plus ``"c":
conversation`` when scoped to one), ``signature`` the unpadded base64url HMAC-SHA256 of
``"pat1." + payload`` under a signing key. The signature is compared in constant time
before the payload is parsed. The prefix differs from the sandbox's workspace tokens
(``pdt1``), so neither can be mistaken for the other.

Signing keys (:class:`SigningKeys`): a list, the first signs and every one verifies, so a
key is rotated by putting a new one first and dropping the old one once the tokens it
signed have expired. With no key configured, one key is derived from the host's API token
(HMAC-SHA256 of the token under a fixed label): tokens then work with no new setting, and
replacing the host token revokes every scoped token at once.

Stdlib only and no OS calls: the same code verifies tokens on the local host, in the
Lambda handler and in the Cloudflare Worker's front door (Pyodide).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, cast

from remote_env.auth import b64url_decode, b64url_encode
from runtimes.actor.errors import InvalidActorId
from runtimes.actor.ids import check_actor_id

__all__ = [
    "MAX_TTL_S",
    "RIGHTS",
    "SCOPED_TOKEN_PREFIX",
    "Right",
    "Scope",
    "SigningKeys",
    "TokenRefused",
    "looks_scoped",
    "parse_duration",
    "parse_keys",
]

SCOPED_TOKEN_PREFIX = "pat1"
MIN_KEY_CHARS = 16
MAX_TTL_S = 366 * 24 * 3600
"""The longest a token may live: a year (and a day). Longer-lived access is the host
token's job; a scoped token that leaks should die on its own."""

_MAX_TOKEN_CHARS = 2048
_MAX_CONVERSATION = 2**53 - 1  # core.records.MAX_ID: ids are JSON-safe integers
_DERIVE_LABEL = b"perdure scoped-token signing key v1"

Right = Literal["read", "submit", "admin"]
RIGHTS: tuple[Right, ...] = ("read", "submit", "admin")
"""Ordered: each right includes the ones before it."""


def looks_scoped(bearer: str) -> bool:
    """Whether a bearer value is meant as a scoped token (by its public prefix; which
    key, if any, signed it is :meth:`SigningKeys.verify`'s question)."""
    return bearer[: len(SCOPED_TOKEN_PREFIX) + 1] == SCOPED_TOKEN_PREFIX + "."


class TokenRefused(Exception):
    """A scoped token that cannot be used; ``reason``: ``malformed``, ``bad_signature``
    or ``expired``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Scope:
    """What a verified scoped token grants: ``rights`` on ``actor`` (only on conversation
    ``conversation`` when it is set) until ``expires_at`` (epoch seconds)."""

    actor: str
    rights: Right
    conversation: int | None
    issued_at: int
    expires_at: int

    def allows(self, need: Right) -> bool:
        """Whether these rights include ``need``."""
        return RIGHTS.index(self.rights) >= RIGHTS.index(need)


def _b64decode(text: str) -> bytes:
    data = b64url_decode(text)
    if data is None:
        raise TokenRefused("malformed")
    return data


def _check_conversation(conversation: object) -> int | None:
    if conversation is None:
        return None
    if type(conversation) is not int or not 1 <= conversation <= _MAX_CONVERSATION:
        raise ValueError(f"a conversation id is an integer from 1 to {_MAX_CONVERSATION}")
    return conversation


class SigningKeys:
    """The keys scoped tokens are signed and verified with: ``keys[0]`` signs, every one
    verifies (see the module docstring for rotation)."""

    def __init__(self, keys: Sequence[str]) -> None:
        if not keys:
            raise ValueError("at least one signing key is needed")
        for key in keys:
            if not isinstance(key, str) or len(key) < MIN_KEY_CHARS:
                raise ValueError(f"a signing key has at least {MIN_KEY_CHARS} characters")
        self._keys = tuple(key.encode() for key in keys)

    def __repr__(self) -> str:  # secrets stay out of reprs, logs and tracebacks
        return f"SigningKeys(<{len(self._keys)} keys>)"

    @classmethod
    def for_host(cls, api_token: str, keys: Sequence[str] = ()) -> SigningKeys:
        """``keys`` when any are configured, else one key derived from ``api_token``."""
        if keys:
            return cls(keys)
        derived = hmac.new(api_token.encode(), _DERIVE_LABEL, hashlib.sha256).hexdigest()
        return cls([derived])

    def mint(
        self,
        actor: str,
        rights: str,
        ttl_s: float,
        *,
        conversation: int | None = None,
        now: float | None = None,
    ) -> str:
        """A token granting ``rights`` on ``actor`` (and only ``conversation``, if given)
        for ``ttl_s`` seconds from ``now`` (default: the system clock).

        Raises:
            ValueError: a bad actor id, right, conversation id or ttl (the message says
                which, for a person to read).
        """
        try:
            check_actor_id(actor)
        except InvalidActorId as error:
            raise ValueError(str(error)) from None
        if rights not in RIGHTS:
            raise ValueError(f"rights must be one of {', '.join(RIGHTS)}, not {rights!r}")
        _check_conversation(conversation)
        if isinstance(ttl_s, bool) or not isinstance(ttl_s, int | float) or not ttl_s >= 1:
            raise ValueError("the time to live must be at least one second")
        if ttl_s > MAX_TTL_S:
            raise ValueError(f"the time to live is at most {MAX_TTL_S} seconds (a year)")
        issued = int(time.time() if now is None else now)
        payload: dict[str, object] = {"a": actor, "r": rights, "iat": issued}
        payload["exp"] = issued + int(ttl_s)
        if conversation is not None:
            payload["c"] = conversation
        body = b64url_encode(json.dumps(payload, separators=(",", ":"), sort_keys=True).encode())
        signed = f"{SCOPED_TOKEN_PREFIX}.{body}"
        return f"{signed}.{b64url_encode(self._sign(self._keys[0], signed))}"

    def verify(self, token: str, *, now: float | None = None) -> Scope:
        """The scope ``token`` grants.

        Raises:
            TokenRefused: malformed, signed by no key of this list, or expired.
        """
        if not isinstance(token, str) or len(token) > _MAX_TOKEN_CHARS or not token.isascii():
            raise TokenRefused("malformed")
        parts = token.split(".")
        if len(parts) != 3 or parts[0] != SCOPED_TOKEN_PREFIX:
            raise TokenRefused("malformed")
        signed = f"{parts[0]}.{parts[1]}"
        signature = _b64decode(parts[2])
        # Every key is tried (no early exit), each compared in constant time.
        matched = False
        for key in self._keys:
            matched |= hmac.compare_digest(signature, self._sign(key, signed))
        if not matched:
            raise TokenRefused("bad_signature")
        scope = _claims(_b64decode(parts[1]))
        if (time.time() if now is None else now) >= scope.expires_at:
            raise TokenRefused("expired")
        return scope

    @staticmethod
    def _sign(key: bytes, signed: str) -> bytes:
        return hmac.new(key, signed.encode("ascii"), hashlib.sha256).digest()


def _claims(raw: bytes) -> Scope:
    """The payload of a token whose signature verified (so it is ours; checked anyway)."""
    try:
        payload = json.loads(raw)
    except ValueError as error:
        raise TokenRefused("malformed") from error
    if not isinstance(payload, dict):
        raise TokenRefused("malformed")
    actor, rights, conversation = payload.get("a"), payload.get("r"), payload.get("c")
    issued, expires = payload.get("iat"), payload.get("exp")
    try:
        check_actor_id(actor)
        conversation = _check_conversation(conversation)
    except (InvalidActorId, ValueError) as error:
        raise TokenRefused("malformed") from error
    if rights not in RIGHTS or type(issued) is not int or type(expires) is not int:
        raise TokenRefused("malformed")
    return Scope(
        actor=cast(str, actor),
        rights=cast(Right, rights),
        conversation=conversation,
        issued_at=issued,
        expires_at=expires,
    )


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    """Seconds from ``90``, ``90s``, ``1.5h``, ``15m``, ``12h`` or ``30d``.

    Raises:
        ValueError: anything else, or a duration under one second.
    """
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([smhd]?)\s*", text)
    if match is None:
        raise ValueError(f"{text!r} is not a duration: write e.g. 90, 90s, 15m, 12h or 30d")
    seconds = float(match[1]) * _UNITS[match[2] or "s"]
    if seconds < 1:
        raise ValueError("a duration is at least one second")
    return seconds


def parse_keys(text: str | None) -> tuple[str, ...]:
    """The signing keys of a setting (``PERDURE_TOKEN_KEYS``): separated by commas or
    white space, the newest first; none when ``text`` is empty or unset."""
    keys = tuple(k for k in re.split(r"[\s,]+", text or "") if k)
    if keys:
        SigningKeys(keys)  # refuses short keys, with a message that names no key
    return keys
