"""What the client raises: the host's refusal (4xx) or failure (5xx), carrying the host's
own ``{"error": {"code", "message"}}``, or no answer at all."""

from __future__ import annotations

__all__ = [
    "AGAIN",
    "ApiError",
    "ClientError",
    "HostUnreachable",
    "RequestRefused",
    "ServerError",
]

AGAIN = frozenset({423, 502, 503, 504})
"""Statuses after which a poll (``wait``, the watch's long poll) asks again, after the
``Retry-After`` the answer gives (else a second): the actor held by another process or
invocation (``423``), the host shutting down or not up yet behind its front door
(``503``, ``502``, ``504``). The submission is durable: it settles all the same."""


class ClientError(Exception):
    """Anything the client raises for a request that did not succeed."""


class HostUnreachable(ClientError):
    """No HTTP answer: the host could not be reached, or the connection broke."""


class ApiError(ClientError):
    """The host answered with an error status. ``code`` and ``message`` are the host's
    own (``invalid``, ``not_found``, ``actor_locked``...: the error answers of
    docs/design.md § The HTTP API); ``retry_after``: the seconds a ``423``/``503`` asks
    the client to wait."""

    def __init__(
        self, status: int, code: str, message: str, *, retry_after: float | None = None
    ) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.retry_after = retry_after


class RequestRefused(ApiError):
    """A 4xx: the request was refused (bad input, bad or missing token, unknown actor,
    a busy conversation...). The host wrote nothing for it."""


class ServerError(ApiError):
    """A 5xx: the host failed (or is shutting down) while answering."""
