"""The JSON body gate both HTTP servers share (the sandbox server and the actor API):
a body that names a key twice in one object is refused ``422``, naming the key.

JSON leaves duplicate keys to the reader and ``json.loads`` keeps the last one, so
``{"type": "write", "type": "input", ...}`` would be taken as an input, while another
reader of the same bytes (a proxy, a log, an audit) may take it as a write. A route of
:class:`UniqueKeysRoute` parses its body once, with
:func:`~core.jsonvalue.loads_unique`, and FastAPI validates that parse; the refusal is
a :class:`~fastapi.exceptions.RequestValidationError`, so each app answers it with its
own ``422 invalid`` (``body.<key>: ...``). Kept outside ``remote_env.server`` (as
:mod:`remote_env.limits`) so the hosts may import it: security code exists once.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute

from core.errors import InvalidJson
from core.jsonvalue import loads_unique

__all__ = ["UniqueKeysRoute", "is_json_media"]


def is_json_media(content_type: str) -> bool:
    """``application/json`` or a ``+json`` type (``application/merge-patch+json``): what
    FastAPI parses as JSON."""
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or media.endswith("+json")


_UNSET: Any = object()


class _UniqueKeysRequest(Request):
    """A request whose JSON body was parsed (and checked) before FastAPI asks for it."""

    _parsed: Any = _UNSET

    async def check_body(self) -> None:
        # FastAPI reads a body without a Content-Type as JSON too (its non-strict mode).
        content_type = self.headers.get("content-type")
        if content_type and not is_json_media(content_type):
            return
        body = await self.body()
        if not body:
            return
        try:
            self._parsed = loads_unique(body)
        except InvalidJson as e:
            raise RequestValidationError(
                [{"type": "duplicate_key", "loc": ("body", e.field), "msg": str(e), "input": None}]
            ) from None
        except (ValueError, RecursionError):
            return  # not JSON (or nested past the parser): FastAPI's own parse refuses it

    async def json(self) -> Any:
        if self._parsed is _UNSET:
            return await super().json()
        return self._parsed


class UniqueKeysRoute(APIRoute):
    """An :class:`~fastapi.routing.APIRoute` whose JSON body is refused ``422`` when an
    object in it names a key twice (see the module docstring). Routes without a body
    are served as usual. Pass it as an ``APIRouter``'s ``route_class``."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handle = super().get_route_handler()
        if self.body_field is None:
            return handle

        async def checked(request: Request) -> Response:
            strict = _UniqueKeysRequest(request.scope, request.receive)
            await strict.check_body()
            return await handle(strict)

        return checked
