"""Which right each route of the actor API needs, in one table, and the check of a scoped
token against it.

:data:`ROUTE_RIGHTS` maps every ``(method, path template)`` of the API to the right it
needs: ``read`` (views, the watch, listings within the actor), ``submit`` (read, plus
submissions, abort, reminders and schedules), ``admin`` (everything on the actor: its agent, forks,
compaction, resets) or ``operator`` (the host's API token only: the host-wide listing and
minting tokens). A route missing from the table is refused to every scoped token, and the
app refuses to start with one (:func:`unmapped_routes`), so a new route cannot be
forgotten.

:class:`RouteRights` is a pure decision (no I/O, stdlib only), made before the actor is
opened: by the API's middleware on every host, and by the Cloudflare Worker's front door
before it addresses a Durable Object.

A token scoped to one conversation reaches the routes whose path names that conversation,
and ``POST .../submissions`` whose JSON body names it (``conversation_id``, the root
conversation when absent). Every other route of the actor reads or changes more than that
conversation, so it is refused to such a token.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from runtimes.actor.tokens import Scope

__all__ = [
    "NEEDS_BODY",
    "ROUTE_RIGHTS",
    "Denied",
    "Need",
    "RouteRights",
    "unmapped_routes",
]

Need = Literal["read", "submit", "admin", "operator"]

_A = "/v1/actors/{actor}"
_C = _A + "/conversations/{conversation_id}"

ROUTE_RIGHTS: Mapping[tuple[str, str], Need] = {
    # host-wide: the operator's
    ("GET", "/v1/actors"): "operator",
    ("POST", "/v1/tokens"): "operator",
    # the actor as a whole
    ("POST", _A + "/submissions"): "submit",
    ("GET", _A + "/submissions/{submission_id}"): "read",
    ("GET", _A + "/tasks"): "read",
    ("GET", _A + "/timers"): "read",
    ("DELETE", _A + "/timers/{task_id}"): "submit",  # cancels a reminder
    ("GET", _A + "/conversations"): "read",
    ("GET", _A + "/approvals"): "read",
    ("POST", _A + "/approvals/{approval_id}"): "submit",  # a decision is the user's input
    # one conversation
    ("GET", _C + "/view"): "read",
    ("GET", _C + "/watch"): "read",
    ("GET", _C + "/deltas"): "read",
    ("GET", _C + "/submissions"): "read",
    ("GET", _C + "/submissions/by-request"): "read",
    ("GET", _C + "/entries"): "read",
    ("POST", _C + "/abort"): "submit",
    ("POST", _C + "/reminders"): "submit",
    ("POST", _C + "/schedules"): "submit",
    ("GET", _C + "/schedules"): "read",
    ("DELETE", _C + "/schedules/{schedule_id}"): "submit",
    ("PATCH", _C + "/agent"): "admin",
    ("POST", _C + "/fork"): "admin",
    ("POST", _C + "/compact"): "admin",
    ("POST", _C + "/reset"): "admin",
}

NEEDS_BODY = frozenset({("POST", _A + "/submissions")})
"""Routes whose conversation is named in the body: a conversation-scoped token's check
reads it."""

_PARAM = re.compile(r"\{([a-z_]+)\}")


def _pattern(template: str) -> re.Pattern[str]:
    out, pos = [], 0
    for m in _PARAM.finditer(template):
        out.append(re.escape(template[pos : m.start()]))
        out.append(f"(?P<{m[1]}>[^/]+)")
        pos = m.end()
    out.append(re.escape(template[pos:]))
    return re.compile("".join(out))


def unmapped_routes(routes: Iterable[tuple[str, str]], prefix: str = "/v1/") -> list[str]:
    """The ``(method, template)`` pairs under ``prefix`` that :data:`ROUTE_RIGHTS` does
    not map (``HEAD`` counts as its ``GET``), as ``"METHOD template"``."""
    return sorted(
        f"{method} {template}"
        for method, template in routes
        if template.startswith(prefix)
        and method.upper() != "HEAD"
        and (method.upper(), template) not in ROUTE_RIGHTS
    )


@dataclass(frozen=True)
class Denied:
    """The answer to a request the token does not allow."""

    status: int
    code: str
    message: str


@dataclass(frozen=True)
class _Route:
    method: str
    template: str
    pattern: re.Pattern[str]
    need: Need


class RouteRights:
    """The decision for one request of a scoped token (see the module docstring)."""

    def __init__(self, table: Mapping[tuple[str, str], Need] = ROUTE_RIGHTS) -> None:
        self._routes = tuple(
            _Route(method, template, _pattern(template), need)
            for (method, template), need in table.items()
        )

    def route(self, method: str, path: str) -> tuple[str, Need, dict[str, str]] | None:
        """The template, need and path parameters of the route ``method path`` (``path``
        percent-decoded), or ``None``."""
        method = "GET" if method.upper() == "HEAD" else method.upper()
        for r in self._routes:
            if r.method == method:
                m = r.pattern.fullmatch(path)
                if m is not None:
                    return r.template, r.need, m.groupdict()
        return None

    def needs_body(self, scope: Scope, method: str, path: str) -> bool:
        """Whether :meth:`check` must see the body to decide (a conversation-scoped
        token's submission)."""
        found = self.route(method, path)
        return (
            scope.conversation is not None
            and found is not None
            and (("GET" if method.upper() == "HEAD" else method.upper()), found[0]) in NEEDS_BODY
        )

    def check(
        self,
        scope: Scope,
        method: str,
        path: str,
        body: bytes | None = None,
        *,
        body_unread: bool = False,
    ) -> Denied | None:
        """``None`` if ``scope`` allows ``method path`` (``path`` percent-decoded; ``body``
        when :meth:`needs_body`), else why not. Never opens anything. ``body_unread``:
        decide all but the body's part now (a front door that reads the body only once
        the rest is admitted, then asks again with it)."""
        found = self.route(method, path)
        if found is None:
            return _forbidden(f"a scoped token cannot use {method.upper()} {path}")
        template, need, params = found
        if need == "operator":
            return _forbidden(f"{method.upper()} {template} needs the host's API token")
        if params.get("actor") != scope.actor:
            return _forbidden(f"this token is for actor {scope.actor!r} only")
        if not scope.allows(need):
            return _forbidden(
                f"this token grants {scope.rights}; {method.upper()} {template} needs {need}"
            )
        if scope.conversation is None:
            return None
        return self._conversation(scope.conversation, method, template, params, body, body_unread)

    def _conversation(
        self,
        allowed: int,
        method: str,
        template: str,
        params: dict[str, str],
        body: bytes | None,
        body_unread: bool,
    ) -> Denied | None:
        wrong = _forbidden(f"this token is for conversation {allowed} only")
        if "conversation_id" in params:
            named = params["conversation_id"]
            return None if named.isdigit() and int(named) == allowed else wrong
        if (method.upper(), template) not in NEEDS_BODY:
            return wrong  # reads or changes more than one conversation
        if body_unread:
            return None
        named_in_body = _body_conversation(body)
        if named_in_body is None:
            return _forbidden(
                f"a token for conversation {allowed} needs a JSON object body whose "
                "conversation_id is that conversation"
            )
        return None if named_in_body == allowed else wrong


def _forbidden(message: str) -> Denied:
    return Denied(403, "forbidden", message)


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        # Parsers disagree on which duplicate wins: a body the check cannot be sure of.
        raise ValueError("duplicate keys")
    return dict(pairs)


def _body_conversation(body: bytes | None) -> int | None:
    """The conversation a submission's body names (the root, 1, when it names none), or
    ``None`` when the body is not a JSON object this check can be sure of."""
    if not body:
        return None
    try:
        value = json.loads(body.decode("utf-8"), object_pairs_hook=_unique)
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(value, dict):
        return None
    named = value.get("conversation_id")
    if named is None:
        return 1  # the API's default: the root conversation
    if type(named) is float and named.is_integer():
        return int(named)  # the API reads a whole-number float as that integer
    if type(named) is not int:
        return None
    return named
