"""Errors the local actor host raises (typed, so the HTTP layer can map each one)."""

from __future__ import annotations

__all__ = ["ActorLocked", "HostClosed", "HostError", "InvalidActorId", "UnknownActor"]


class HostError(Exception):
    """Base class of the local host's errors."""


class InvalidActorId(HostError, ValueError):
    """An actor id outside ``[A-Za-z0-9_-]{1,64}``; refused before touching the disk."""


class UnknownActor(HostError, LookupError):
    """The actor has no storage in the data directory (and the call may not create one)."""


class ActorLocked(HostError):
    """Another process holds the actor's file lock: one writer per actor (invariant 14)."""


class HostClosed(HostError):
    """The host is shutting down or closed; it activates no more actors."""
