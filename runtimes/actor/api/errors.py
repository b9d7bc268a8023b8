"""Structured errors: every failure is ``{"error": {"code", "message"}}`` with a status.

Refusals (4xx) happen before anything is written: the core refuses a commit as a whole
(``ConversationBusy``, ``RequestIdConflict``, bad agent fields), and the request models
refuse bad input before an actor is even opened.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from core.errors import (
    ApprovalDecided,
    ConversationBusy,
    InvalidCursor,
    InvalidInput,
    ReminderFired,
    RequestIdConflict,
    SessionClosed,
    SessionPoisoned,
    StorageClosed,
    TaskNotFound,
    UnknownRecord,
    UnknownTool,
)
from runtimes.actor.api.validation import describe
from runtimes.actor.errors import (
    ActorLocked,
    HostClosed,
    InvalidActorId,
    ListingUnsupported,
    UnknownActor,
)

__all__ = ["ApiError", "error_body", "install_error_handlers"]

_log = logging.getLogger("perdure.api")

# Typed errors of the core and the host → (status, code). The first match wins, so
# subclasses come before their bases.
_MAPPED: tuple[tuple[type[Exception], int, str], ...] = (
    (InvalidActorId, 400, "invalid_actor"),
    (UnknownActor, 404, "unknown_actor"),
    (ActorLocked, 423, "actor_locked"),
    (HostClosed, 503, "shutting_down"),
    (ListingUnsupported, 501, "not_supported"),
    (InvalidCursor, 400, "invalid_cursor"),
    (ConversationBusy, 409, "conversation_busy"),
    # A key reused for another payload: 422, as the IETF Idempotency-Key draft says.
    (RequestIdConflict, 422, "request_id_conflict"),
    (ReminderFired, 409, "already_fired"),
    (ApprovalDecided, 409, "approval_decided"),
    (UnknownRecord, 404, "not_found"),
    (TaskNotFound, 404, "not_found"),
    (UnknownTool, 422, "unknown_tool"),
    (InvalidInput, 422, "invalid"),  # InvalidJson too: the one mapping of bad input
    (SessionPoisoned, 503, "storage_failed"),
    (SessionClosed, 503, "shutting_down"),
    (StorageClosed, 503, "shutting_down"),  # an actor closed under a request
)

_HTTP_CODES = {404: "no_route", 405: "method_not_allowed"}


class ApiError(Exception):
    """A refusal decided by the API layer itself."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def error_body(code: str, message: str) -> dict[str, dict[str, str]]:
    return {"error": {"code": code, "message": message}}


def _response(
    status: int, code: str, message: str, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(status_code=status, content=error_body(code, message), headers=headers)


async def _on_api_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    return _response(exc.status, exc.code, exc.message)


async def _on_mapped(request: Request, exc: Exception) -> JSONResponse:
    for kind, status, code in _MAPPED:
        if isinstance(exc, kind):
            headers = None
            if isinstance(exc, ActorLocked):  # 423: says when to come back (RFC 9110 §10.2.3)
                headers = {"retry-after": str(exc.retry_after_s)}
            return _response(status, code, str(exc) or code, headers=headers)
    return await _on_crash(request, exc)  # pragma: no cover - registered per mapped type


async def _on_invalid(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = exc.errors()
    if any(e.get("type") == "json_invalid" for e in errors):
        return _response(400, "malformed_json", "the request body is not valid JSON")
    if any(tuple(e.get("loc", ()))[:2] == ("path", "actor") for e in errors):
        return _response(400, "invalid_actor", "actor ids match [A-Za-z0-9_-]{1,64}")
    message = describe(errors, exc.body, request.headers.get("content-type"))
    return _response(422, "invalid", message)


async def _on_http(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    # Keep the exception's headers: a 405 must say what is allowed (RFC 9110 §15.5.6).
    headers = exc.headers
    allowed = _allowed(request) if exc.status_code == 405 else None
    if allowed is not None:
        kept = {k: v for k, v in (headers or {}).items() if k.lower() != "allow"}
        headers = {**kept, "allow": ", ".join(allowed)}
    return _response(exc.status_code, code, str(exc.detail), headers=headers)


_METHODS = {"get", "put", "post", "delete", "patch", "options", "head"}


def _allowed(request: Request) -> list[str] | None:
    """Every method the API documents at this path (``None``: no documented path
    matches). Starlette's own 405 names only the methods of the first route whose path
    matched, and a path can have several routes (``GET`` and ``POST`` .../schedules)."""
    app: FastAPI = request.app
    for template, operations in app.openapi().get("paths", {}).items():
        if _template(template).fullmatch(request.url.path):
            return sorted(m.upper() for m in operations if m in _METHODS)
    return None


def _template(template: str) -> re.Pattern[str]:
    return re.compile(re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(template)))


async def _on_crash(request: Request, exc: Exception) -> JSONResponse:
    _log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
    return _response(500, "internal", "internal server error")


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ApiError, _on_api_error)
    for kind, _status, _code in _MAPPED:
        app.add_exception_handler(kind, _on_mapped)
    app.add_exception_handler(RequestValidationError, _on_invalid)
    app.add_exception_handler(StarletteHTTPException, _on_http)
    app.add_exception_handler(Exception, _on_crash)
