"""Actor ids: the conversation-tree id (also the stem of a local actor's files, a Durable
Object's name, a lease key)."""

from __future__ import annotations

import re

from runtimes.actor.errors import InvalidActorId

__all__ = ["ACTOR_ID_PATTERN", "check_actor_id", "is_actor_id"]

ACTOR_ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
# fullmatch, not match: "$" would accept a trailing newline.
_ACTOR_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def check_actor_id(actor: object) -> str:
    """Return ``actor`` if it is a valid actor id, else raise :class:`InvalidActorId`.

    The alphabet has no ``.`` or ``/``, so an id is always a plain file name inside the
    data directory: no traversal, no hidden files.
    """
    if not isinstance(actor, str) or _ACTOR_ID.fullmatch(actor) is None:
        raise InvalidActorId(f"actor ids match {ACTOR_ID_PATTERN}, got {actor!r}")
    return actor


def is_actor_id(value: object) -> bool:
    """Whether ``value`` is a valid actor id (a listing skips files named otherwise)."""
    return isinstance(value, str) and _ACTOR_ID.fullmatch(value) is not None
