"""The Worker's front door, as a pure decision: forward to an actor, or refuse.

The ``WorkerEntrypoint`` does nothing but this: every request is checked here before
any Durable Object is addressed, so a refused request never creates or wakes one.
The checks and their order mirror the local API's middleware and errors
(docs/design.md § The HTTP API), so a client sees the same refusals on every host:

1. only ``/v1/`` exists (``404 no_route`` elsewhere);
2. bearer auth: ``401 unauthorized`` (``WWW-Authenticate: Bearer``), constant-time: the
   host's API token, or a scoped token signed by ``keys`` (expired, forged: ``401``);
3. body size: ``413 body_too_large`` by the declared ``Content-Length`` or the body read;
4. routing: ``/v1/actors/{actor}/…`` with a known method and path, else ``404 no_route``
   or ``405 method_not_allowed``; the actor id must match ``[A-Za-z0-9_-]{1,64}``
   (``400 invalid_actor``); it is what ``idFromName`` gets;
5. a scoped token's scope (:class:`~runtimes.actor.scopes.RouteRights`, the app's own
   check): ``403 forbidden`` for another actor, a right it lacks or another conversation;
6. the body of a ``POST``/``PUT``/``PATCH``, once read: empty where the route needs one
   (``422 invalid``); sent as JSON (``Content-Type`` ``application/json`` or
   ``…+json``), it must parse (``400 malformed_json``) and name no key twice in one
   object (``422 invalid``, naming the key: :func:`~core.jsonvalue.loads_unique`, the
   app's own gate); a body of another type goes on to the app, which refuses it as the
   local API does (``422``).

The route table comes from the actor API's own routes (:meth:`RouteTable.from_routes`
takes ``(method, path template[, needs a body])``, e.g.
:func:`runtimes.actor.api.route_table.actor_routes`), so the front door and the app
cannot drift apart.
"""

from __future__ import annotations

import hmac
import json
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from urllib.parse import unquote

from core.errors import InvalidJson
from core.jsonvalue import loads_unique
from runtimes.actor.errors import InvalidActorId
from runtimes.actor.ids import ACTOR_ID_PATTERN, check_actor_id
from runtimes.actor.scopes import RouteRights
from runtimes.actor.tokens import Scope, SigningKeys, TokenRefused, looks_scoped

__all__ = [
    "ACTOR_PREFIX",
    "BODY_METHODS",
    "Forward",
    "FrontDoor",
    "Refusal",
    "RouteTable",
    "admit_request",
]

ACTOR_PREFIX = "/v1/actors/{actor}"
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
_PARAM = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)(:path)?\}")
_RIGHTS = RouteRights()


@dataclass(frozen=True)
class Forward:
    """Send the request on to the Durable Object ``idFromName(actor)``."""

    actor: str


@dataclass(frozen=True)
class Refusal:
    """Answer at the Worker with ``{"error": {"code", "message"}}``."""

    status: int
    code: str
    message: str
    headers: tuple[tuple[str, str], ...] = ()

    def body(self) -> dict[str, dict[str, str]]:
        return {"error": {"code": self.code, "message": self.message}}

    def body_bytes(self) -> bytes:
        return json.dumps(self.body()).encode()


def _pattern(template: str) -> re.Pattern[str]:
    out, pos = [], 0
    for m in _PARAM.finditer(template):
        out.append(re.escape(template[pos : m.start()]))
        out.append(".+" if m.group(2) else "[^/]+")
        pos = m.end()
    out.append(re.escape(template[pos:]))
    return re.compile("".join(out))


@dataclass(frozen=True)
class RouteTable:
    """The actor-scoped routes: paths below ``/v1/actors/{actor}``, their methods, and the
    methods among them that need a body."""

    routes: tuple[tuple[re.Pattern[str], frozenset[str], frozenset[str]], ...] = field(default=())

    @classmethod
    def from_routes(cls, routes: Iterable[tuple[str, str] | tuple[str, str, bool]]) -> RouteTable:
        """From ``(method, template)`` or ``(method, template, needs a body)``;
        templates outside the actor prefix are skipped (the front door cannot route them
        to one object)."""
        methods: dict[str, set[str]] = {}
        bodied: dict[str, set[str]] = {}
        for method, template, *needs_body in routes:
            if template.startswith(ACTOR_PREFIX + "/"):
                rest = template[len(ACTOR_PREFIX) :]
                methods.setdefault(rest, set()).add(method.upper())
                if needs_body and needs_body[0]:
                    bodied.setdefault(rest, set()).add(method.upper())
        return cls(
            tuple(
                (_pattern(rest), frozenset(m), frozenset(bodied.get(rest, ())))
                for rest, m in sorted(methods.items())
            )
        )

    def allowed(self, rest: str) -> frozenset[str] | None:
        """The methods of the route matching ``rest`` (``/submissions/5``), or ``None``."""
        found: set[str] = set()
        matched = False
        for pattern, methods, _ in self.routes:
            if pattern.fullmatch(rest):
                matched = True
                found |= methods
        if not matched:
            return None
        if "GET" in found:
            found.add("HEAD")
        return frozenset(found)

    def needs_body(self, method: str, rest: str) -> bool:
        """Whether the route matching ``rest`` needs a body with ``method``."""
        return any(
            method in bodied and pattern.fullmatch(rest) for pattern, _, bodied in self.routes
        )


def _is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or media.endswith("+json")


@dataclass(frozen=True)
class FrontDoor:
    """The decision for one request; ``token`` is the API bearer token (a secret),
    ``keys`` verify scoped tokens (none: only the API token is accepted)."""

    token: str = field(repr=False)  # a secret: kept out of reprs, logs and tracebacks
    routes: RouteTable
    max_body_bytes: int = 1024 * 1024
    keys: SigningKeys | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.token, str) or len(self.token) < 16:
            raise ValueError("the API token must be a string of at least 16 characters")
        if self.max_body_bytes < 0:
            raise ValueError("max_body_bytes must be >= 0")

    def admit(
        self,
        method: str,
        path: str,
        headers: Mapping[str, str],
        body: bytes | None = None,
    ) -> Forward | Refusal:
        """``path`` as the URL carries it (percent-encoded); ``headers`` with lower-case
        names; ``body`` once read (``None`` before: only the declared size is checked)."""
        method = method.upper()
        if not (path == "/v1" or path.startswith("/v1/")):
            return Refusal(404, "no_route", f"no route for {path}")
        granted = self._auth(headers.get("authorization", ""))
        if isinstance(granted, Refusal):
            return granted
        refused = self._size(headers.get("content-length"), body)
        if refused is not None:
            return refused
        prefix = "/v1/actors/"
        if not path.startswith(prefix) or len(path) == len(prefix):
            return Refusal(404, "no_route", f"no route for {path}")
        segment, slash, rest = path[len(prefix) :].partition("/")
        actor = unquote(segment)
        try:
            check_actor_id(actor)  # the one actor id rule, shared by every host
        except InvalidActorId:
            return Refusal(400, "invalid_actor", f"actor ids match {ACTOR_ID_PATTERN[1:-1]}")
        allowed = self.routes.allowed(unquote(slash + rest))
        if allowed is None:
            return Refusal(404, "no_route", f"no route for {path}")
        if method not in allowed:
            return Refusal(
                405,
                "method_not_allowed",
                f"{method} is not allowed here",
                (("allow", ", ".join(sorted(allowed))),),
            )
        if granted is not None:
            # Before the body is read, all but its part (one conversation's submission)
            # is decided; the Worker asks again with the body before addressing the object.
            unread = body is None and method in BODY_METHODS
            denied = _RIGHTS.check(granted, method, unquote(path), body, body_unread=unread)
            if denied is not None:
                return Refusal(denied.status, denied.code, denied.message)
        if method in BODY_METHODS and body is not None:
            refused = self._body(method, unquote(slash + rest), headers, body)
            if refused is not None:
                return refused
        return Forward(actor)

    def admit_operator(self, method: str, path: str, headers: Mapping[str, str]) -> Refusal | None:
        """A host-wide route the Worker answers itself (``GET /v1/actors``, answered from
        the index): the host's API token only (``401``; a scoped token ``403``, as the
        app's own check), ``GET`` only (``405``). ``None``: admitted."""
        granted = self._auth(headers.get("authorization", ""))
        if isinstance(granted, Refusal):
            return granted
        if granted is not None:
            denied = _RIGHTS.check(granted, "GET", path)
            assert denied is not None  # a host-wide route is the operator's
            return Refusal(denied.status, denied.code, denied.message)
        if method.upper() != "GET":
            return Refusal(
                405,
                "method_not_allowed",
                f"{method.upper()} is not allowed here",
                (("allow", "GET"),),
            )
        return None

    def _body(
        self, method: str, rest: str, headers: Mapping[str, str], body: bytes
    ) -> Refusal | None:
        """The app's refusals of a body that need no actor, made here so that no Durable
        Object is created for them (the same status and code as the app's)."""
        if not body:
            if self.routes.needs_body(method, rest):
                return Refusal(422, "invalid", "invalid request: body: a JSON body is required")
            return None
        if not _is_json(headers.get("content-type", "")):
            return None
        try:
            loads_unique(body.decode("utf-8"))
        except InvalidJson as e:
            return Refusal(422, "invalid", f"invalid request: body.{e.field}: {e}")
        except (UnicodeDecodeError, ValueError, RecursionError):  # nested past the parser
            return Refusal(400, "malformed_json", "the request body is not valid JSON")
        return None

    def _auth(self, header: str) -> Refusal | Scope | None:
        """``None`` for the API token, the scope of a valid scoped token, or a refusal."""
        scheme, _, token = header.partition(" ")
        token = token.strip()
        if scheme.lower() == "bearer" and self.keys is not None and looks_scoped(token):
            try:
                return self.keys.verify(token)
            except TokenRefused as refused:
                expired = refused.reason == "expired"
                message = "the token has expired" if expired else "invalid bearer token"
                return Refusal(401, "unauthorized", message, (("www-authenticate", "Bearer"),))
        if scheme.lower() == "bearer" and hmac.compare_digest(token.encode(), self.token.encode()):
            return None
        message = "missing bearer token" if not header else "invalid bearer token"
        return Refusal(401, "unauthorized", message, (("www-authenticate", "Bearer"),))

    def _size(self, declared: str | None, body: bytes | None) -> Refusal | None:
        too_large = Refusal(
            413,
            "body_too_large",
            f"the request body exceeds {self.max_body_bytes} bytes",
            (("connection", "close"),),
        )
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_body_bytes):
            return too_large
        if body is not None and len(body) > self.max_body_bytes:
            return too_large
        return None


async def admit_request(
    door: FrontDoor,
    method: str,
    path: str,
    headers: Mapping[str, str],
    read_body: Callable[[], Awaitable[bytes]],
) -> Forward | Refusal:
    """The Worker's whole decision for one request: the request line and headers first
    (a refusal there reads no body), then, for a method with a body, the body read once
    (``read_body``). Only a :class:`Forward` may address a Durable Object."""
    decision = door.admit(method, path, headers)
    if isinstance(decision, Refusal) or method.upper() not in BODY_METHODS:
        return decision
    return door.admit(method, path, headers, await read_body())
