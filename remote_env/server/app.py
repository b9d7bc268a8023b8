"""The ASGI application: routes, JSON error envelopes, body limit, lifespan."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from remote_env import __version__
from remote_env.limits import BodyLimit
from remote_env.server.errors import Rejected
from remote_env.server.routes import router
from remote_env.server.service import SandboxService
from remote_env.server.settings import ServerSettings
from remote_env.server.tracing import TraceRequests

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

__all__ = ["create_app"]

# "no_route", not "not_found": that code means a missing *file* to clients.
_HTTP_CODES = {
    400: "malformed_body",
    401: "unauthorized",
    404: "no_route",
    405: "method_not_allowed",
}


def _error(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(
        status_code=status, content={"error": {"code": code, "message": message}}, headers=headers
    )


async def _on_rejected(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, Rejected)
    body = exc.body().model_dump(exclude_none=True)
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
    return JSONResponse(status_code=exc.status, content={"error": body}, headers=headers)


async def _on_invalid(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    problems = []
    for problem in exc.errors()[:5]:
        where = ".".join(str(part) for part in problem.get("loc", ()))
        problems.append(f"{where}: {problem.get('msg', 'invalid')}")
    return _error(422, "invalid", "invalid request: " + "; ".join(problems))


async def _on_http(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    # Keep the exception's headers: a 405 must say which methods are ``Allow``-ed.
    return _error(
        exc.status_code,
        _HTTP_CODES.get(exc.status_code, "http_error"),
        str(exc.detail),
        headers=dict(exc.headers) if exc.headers else None,
    )


async def _on_crash(request: Request, exc: Exception) -> JSONResponse:
    return _error(500, "internal", "internal server error")


def create_app(
    settings: ServerSettings, *, tracer_provider: TracerProvider | None = None
) -> FastAPI:
    """Build the sandbox server app.

    The app's lifespan starts a :class:`SandboxService` (op log, recovery, retention) and
    closes it on shutdown. When driving the app in-process (``httpx.ASGITransport`` sends no
    lifespan events) enter ``app.router.lifespan_context(app)`` around the requests.
    """

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        service = await SandboxService.start(settings)
        app.state.service = service
        try:
            yield
        finally:
            await service.close()

    app = FastAPI(
        title="perdure sandbox",
        version=__version__,
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
    )
    app.include_router(router)
    app.add_exception_handler(Rejected, _on_rejected)
    app.add_exception_handler(RequestValidationError, _on_invalid)
    app.add_exception_handler(StarletteHTTPException, _on_http)
    app.add_exception_handler(Exception, _on_crash)
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    # Outermost: the span covers the whole request, refusals included.
    app.add_middleware(TraceRequests, tracer_provider=tracer_provider)
    return app
