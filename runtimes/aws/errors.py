"""Errors of the AWS host's lease and fenced storage."""

from __future__ import annotations

from core.errors import StorageError

__all__ = ["LeaseHeld", "LeaseLost"]


class LeaseHeld(Exception):
    """Another owner holds an unexpired lease on the actor; nothing was written."""

    def __init__(self, actor: str, owner: str | None, expires_at: int | None) -> None:
        super().__init__(f"actor {actor!r} is leased to {owner!r} until {expires_at}")
        self.actor = actor
        self.owner = owner
        self.expires_at = expires_at


class LeaseLost(StorageError):
    """The fence refused a write: another owner took the lease (a higher epoch) or the
    head moved past our seq. Nothing of the refused write is durable, but this holder
    must stop — it is *not* a :class:`~core.errors.StorageRejected`, so the session is
    poisoned (docs/design.md, invariants 13 and 14) and never commits on a stale lease again."""
