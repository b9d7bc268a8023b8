"""The web inspector's static files (``runtimes/actor/api/ui/``) and how every host's
front door answers for them, without FastAPI: the local and Lambda hosts serve them
through the app (:mod:`runtimes.actor.api.webpages`), the Cloudflare Worker answers them
itself (:func:`inspector_answer`) before any Durable Object is addressed.

The page carries no data and no token (it asks for the token on its own page), so these
files are public; the same bytes and headers (a strict CSP: only its own scripts and
styles) on every host. Files are read from the installed package once and kept in
memory (a Durable Object has no thread pool for file reads). They are found as
``runtimes.actor`` package data, not ``runtimes.actor.api``'s: reading them must not
import the API app (a Worker isolate answers ``/ui`` without FastAPI).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import PurePosixPath

__all__ = ["UI_HEADERS", "InspectorAnswer", "InspectorFile", "inspector_answer", "inspector_file"]

_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}
_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")
# The inspector runs only its own files: no inline script, nothing from elsewhere.
UI_HEADERS: dict[str, str] = {
    "cache-control": "no-cache",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "content-security-policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
    ),
}


@dataclass(frozen=True)
class InspectorFile:
    body: bytes
    media_type: str


@dataclass(frozen=True)
class InspectorAnswer:
    """A complete HTTP answer: ``status``, ``headers`` (lower-case names), ``body``."""

    status: int
    headers: dict[str, str]
    body: bytes


_cache: dict[str, InspectorFile] = {}


def inspector_file(name: str) -> InspectorFile | None:
    """The file ``name`` of the inspector (``index.html``, ``app.js``...), or ``None``
    when there is no such file (or the name is not one a file of it could have)."""
    if name not in _cache:
        suffix = PurePosixPath(name).suffix
        if _NAME.fullmatch(name) is None or suffix not in _TYPES:
            return None
        item = resources.files("runtimes.actor").joinpath("api", "ui", name)
        if not item.is_file():
            return None
        _cache[name] = InspectorFile(item.read_bytes(), _TYPES[suffix])
    return _cache[name]


def inspector_answer(method: str, path: str) -> InspectorAnswer | None:
    """The answer to ``method path`` if it is the inspector's: ``/`` redirects to it
    (relative, so a prefix in front of the host is kept), ``/ui`` and ``/ui/`` are its
    page, ``/ui/{name}`` its files (``404 no_route`` for a name it has no file for).
    ``None`` for every other request (and for methods other than ``GET``/``HEAD``)."""
    method = method.upper()
    if method not in ("GET", "HEAD"):
        return None
    if path == "/":
        return InspectorAnswer(307, {"location": "ui"}, b"")
    if path in ("/ui", "/ui/"):
        name = "index.html"
    elif path.startswith("/ui/"):
        name = path[len("/ui/") :]
    else:
        return None
    found = inspector_file(name)
    if found is None:
        error = {"code": "no_route", "message": f"no inspector file {name!r}"}
        body = json.dumps({"error": error}).encode()
        return InspectorAnswer(404, {"content-type": "application/json"}, body)
    headers = {"content-type": found.media_type, **UI_HEADERS}
    return InspectorAnswer(200, headers, b"" if method == "HEAD" else found.body)
