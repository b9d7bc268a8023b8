"""Errors every actor host raises (typed, so the actor API maps each one to a status)."""

from __future__ import annotations

__all__ = [
    "ActorLocked",
    "HostClosed",
    "HostError",
    "InvalidActorId",
    "ListingUnsupported",
    "UnknownActor",
]


class HostError(Exception):
    """Base class of the hosts' errors."""


class InvalidActorId(HostError, ValueError):
    """An actor id outside ``[A-Za-z0-9_-]{1,64}``; refused before touching the disk."""


class UnknownActor(HostError, LookupError):
    """The actor has no storage (and the call may not create one)."""


class ActorLocked(HostError):
    """Another writer holds the actor (a file lock, a lease): one writer per actor
    (invariant 14). ``retry_after_s``: when a retry may find it free (the API's
    ``Retry-After``)."""

    def __init__(self, message: str = "", *, retry_after_s: int = 1) -> None:
        super().__init__(message)
        self.retry_after_s = max(1, retry_after_s)


class HostClosed(HostError):
    """The host is shutting down or closed; it activates no more actors."""


class ListingUnsupported(HostError):
    """The host cannot list its actors (its store keeps no index of them)."""
