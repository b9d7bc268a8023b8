"""Actor ids: the conversation-tree id (also the stem of a local actor's files, a Durable
Object's name, a lease key, and the name of the actor's workspace on the sandbox)."""

from __future__ import annotations

from remote_env.workspace_names import WORKSPACE_REGEX, is_workspace_name
from runtimes.actor.errors import InvalidActorId

__all__ = ["ACTOR_ID_PATTERN", "check_actor_id", "is_actor_id"]

# One rule, the sandbox's workspace names: every host gates actor ids with it, so an
# actor a host admits always gets its workspace (never a refusal mid-tool).
ACTOR_ID_PATTERN = WORKSPACE_REGEX


def check_actor_id(actor: object) -> str:
    """Return ``actor`` if it is a valid actor id, else raise :class:`InvalidActorId`.

    The alphabet has no ``.`` or ``/``, so an id is always a plain file name inside the
    data directory: no traversal, no hidden files.
    """
    if not isinstance(actor, str) or not is_workspace_name(actor):
        raise InvalidActorId(f"actor ids match {ACTOR_ID_PATTERN}, got {actor!r}")
    return actor


def is_actor_id(value: object) -> bool:
    """Whether ``value`` is a valid actor id (a listing skips files named otherwise)."""
    return is_workspace_name(value)
