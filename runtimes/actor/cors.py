"""The CORS allow-list: which browser origins may call the API from their pages.

Off unless origins are configured (``ApiConfig.cors_origins``, ``PERDURE_CORS_ORIGINS``).
Credentials travel in the ``Authorization`` header (typically a scoped token the page got
from its own backend), never in cookies, so no origin is allowed credentials and ``*`` is
not accepted: each origin is named.

The app answers with Starlette's ``CORSMiddleware`` (:mod:`runtimes.actor.api.cors`);
:class:`CorsPolicy` is the same policy as a pure decision, for the Cloudflare Worker's
front door, which answers preflights and its own refusals before any Durable Object.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "ALLOWED_HEADERS",
    "ALLOWED_METHODS",
    "EXPOSED_HEADERS",
    "MAX_AGE_S",
    "CorsPolicy",
    "check_origins",
    "parse_origins",
]

ALLOWED_METHODS = ("GET", "HEAD", "POST", "PATCH", "DELETE")
ALLOWED_HEADERS = ("authorization", "content-type", "last-event-id")
EXPOSED_HEADERS = ("retry-after", "www-authenticate")
MAX_AGE_S = 600

_ORIGIN = re.compile(r"https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?")


def check_origins(origins: Sequence[str]) -> tuple[str, ...]:
    """``origins`` if each is ``scheme://host[:port]`` (what a browser sends as
    ``Origin``), else :class:`ValueError` naming the first that is not."""
    if isinstance(origins, str):
        raise ValueError("cors origins are a list of origins, not one string")
    for origin in origins:
        if not isinstance(origin, str) or not _ORIGIN.fullmatch(origin):
            raise ValueError(
                f"{origin!r} is not an origin: write scheme://host[:port], e.g. "
                "https://app.example.com (no path, no trailing slash, no wildcard)"
            )
    return tuple(origins)


def parse_origins(text: str | None) -> tuple[str, ...]:
    """The origins of a setting (``PERDURE_CORS_ORIGINS``), separated by commas or white
    space; none when ``text`` is empty or unset."""
    return check_origins([o for o in re.split(r"[\s,]+", text or "") if o])


@dataclass(frozen=True)
class CorsPolicy:
    """The allow-list as a decision on request headers (lower-case names)."""

    origins: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_origins(self.origins)

    def is_preflight(self, method: str, headers: Mapping[str, str]) -> bool:
        return (
            method.upper() == "OPTIONS"
            and "origin" in headers
            and "access-control-request-method" in headers
        )

    def preflight(self, headers: Mapping[str, str]) -> tuple[int, tuple[tuple[str, str], ...]]:
        """The answer to a preflight (as Starlette's): 200 with the allowances for an
        allowed origin and method, else 400 with none (the browser then blocks it)."""
        origin = headers.get("origin", "")
        method = headers.get("access-control-request-method", "").upper()
        if origin not in self.origins or method not in ALLOWED_METHODS:
            return 400, (("vary", "Origin"),)
        return 200, (
            ("access-control-allow-origin", origin),
            ("access-control-allow-methods", ", ".join(ALLOWED_METHODS)),
            ("access-control-allow-headers", ", ".join(ALLOWED_HEADERS)),
            ("access-control-max-age", str(MAX_AGE_S)),
            ("vary", "Origin"),
        )

    def response_headers(self, headers: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
        """Headers for an answer to an allowed origin's request (none for another)."""
        origin = headers.get("origin", "")
        if origin not in self.origins:
            return ()
        return (
            ("access-control-allow-origin", origin),
            ("access-control-expose-headers", ", ".join(EXPOSED_HEADERS)),
            ("vary", "Origin"),
        )
