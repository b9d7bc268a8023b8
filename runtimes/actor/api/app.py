"""The ASGI application of the actor HTTP API, around one :class:`Host`."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI
from fastapi.routing import APIRoute
from starlette.types import Message, Scope

from remote_env.limits import BodyLimit
from runtimes.actor.api import approvals, history, schedules, token_route, webpages
from runtimes.actor.api.cors import add_cors
from runtimes.actor.api.deltas import DeltaFeeds
from runtimes.actor.api.deltas import router as deltas_router
from runtimes.actor.api.errors import install_error_handlers
from runtimes.actor.api.middleware import BearerAuth
from runtimes.actor.api.openapi import AUTH_PREFIX, complete_openapi
from runtimes.actor.api.pages import CursorCodec
from runtimes.actor.api.routes import ApiSettings, router
from runtimes.actor.cors import check_origins
from runtimes.actor.host import Host
from runtimes.actor.scopes import unmapped_routes
from runtimes.actor.tokens import SigningKeys

__all__ = [
    "ApiConfig",
    "build_route_state",
    "create_app",
    "is_route_walk",
    "new_api_token",
    "rebind_app",
]


@dataclass(frozen=True)
class ApiConfig:
    """``token``: the host's API token, which every ``/v1/`` request must carry unless it
    carries a scoped token. ``signing_keys``: the keys scoped tokens are signed with, the
    newest first (none: one derived from ``token``; see :mod:`runtimes.actor.tokens`).
    ``cors_origins``: the browser origins (``https://app.example``) allowed to call the
    API from their pages; none by default. ``max_body_bytes``: larger bodies get
    ``413``. ``max_wait_s``: the cap on a long poll's ``wait``.
    ``heartbeat_s``: a watch stream sends a ``: ping`` comment after this long without an
    event (keeps proxies and clients from timing the stream out). ``streams``: ``False``
    for a front door that answers whole responses only (Lambda's): the watch stream is
    refused ``501 not_supported`` at once instead of held until the deadline."""

    token: str = field(repr=False)  # a secret: kept out of reprs, logs and tracebacks
    max_body_bytes: int = 1024 * 1024
    max_wait_s: float = 60.0
    heartbeat_s: float = 15.0
    signing_keys: tuple[str, ...] = field(default=(), repr=False)
    cors_origins: tuple[str, ...] = ()
    streams: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.token, str) or len(self.token) < 16:
            raise ValueError("the API token must be a string of at least 16 characters")
        SigningKeys.for_host(self.token, self.signing_keys)  # refuses short keys
        check_origins(self.cors_origins)
        if self.max_wait_s < 0:
            raise ValueError("max_wait_s must be >= 0")
        if not self.heartbeat_s > 0:
            raise ValueError("heartbeat_s must be > 0")


def new_api_token() -> str:
    """A fresh bearer token for :class:`ApiConfig`.

    Hex, so it never starts with ``-``: people and scripts pass it on command lines
    (``--token TOKEN``), where a leading dash reads as an option."""
    return secrets.token_hex(24)


def create_app(
    host: Host,
    config: ApiConfig,
    *,
    on_shutdown: Sequence[Callable[[], Awaitable[None]]] = (),
) -> FastAPI:
    """The app. Its lifespan starts ``host`` and, on shutdown, closes it and then runs
    ``on_shutdown`` (e.g. closing model clients on the loop that used them); serve it
    with lifespan events on. ``/openapi.json`` describes it, ``/docs`` shows it (Swagger
    UI from installed files), ``/ui`` is the web inspector."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await build_route_state(app, config.token)
        await host.start()
        try:
            yield
        finally:
            try:
                await host.close()
            finally:
                for hook in on_shutdown:
                    await hook()

    app = FastAPI(
        title="perdure actors",
        summary="Submit work to durable agent actors and read their answers.",
        version="0.1.0",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
    )
    rebind_app(app, host, config)
    routers = (
        router,
        history.router,
        schedules.router,
        webpages.router,
        deltas_router,
        token_route.router,
        approvals.router,
    )
    for included in routers:
        app.include_router(included)
    # Read from the routers, not app.routes (FastAPI keeps included routers there lazily).
    unmapped = unmapped_routes(
        (method, route.path)
        for included in routers
        for route in included.routes
        if isinstance(route, APIRoute)
        for method in route.methods or ()
    )
    if unmapped:
        # A route no right is mapped to would be refused to every scoped token: say so now.
        raise RuntimeError(f"routes missing from runtimes.actor.scopes.ROUTE_RIGHTS: {unmapped}")
    install_error_handlers(app)
    derive_openapi = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = complete_openapi(derive_openapi(), host.registry)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    # Added last = outermost: CORS (a preflight carries no token), authentication and
    # the token's scope, then the body limit.
    app.add_middleware(BodyLimit, max_bytes=config.max_body_bytes)
    app.add_middleware(
        BearerAuth,
        token=config.token,
        prefix=AUTH_PREFIX,
        keys=app.state.signing_keys,
        max_body_bytes=config.max_body_bytes,
    )
    if config.cors_origins:
        add_cors(app, config.cors_origins)
    return app


_UNROUTED = "/v1/-"
"""A path under the authenticated prefix that no route serves."""

_ROUTE_WALK = "perdure.route_walk"
"""The ASGI scope extension that marks :func:`build_route_state`'s request."""


def is_route_walk(scope: Scope) -> bool:
    """Whether ``scope`` is :func:`build_route_state`'s request, which no client sent:
    middleware that reports requests (the request log) leaves it out."""
    return _ROUTE_WALK in scope.get("extensions", {})


async def build_route_state(app: FastAPI, token: str) -> int:
    """Walk every route of ``app`` once before serving: one request (``GET`` of a path no
    route serves, with the token) through the whole ASGI stack, answered 404 in memory.

    FastAPI builds a router's route state (each route's dependency graph, validators and
    response fields) when a request first walks it, and Starlette its middleware stack on
    the first request: ~100 ms of the loop on our 2-core machines, which the first burst
    of clients waited behind (every first submission of ``tests/bench/suite.py --only
    host``). Nothing is written: no route runs, no actor is opened. Returns the status
    the walk was answered (404)."""
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    scope: Scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": _UNROUTED,
        "raw_path": _UNROUTED.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(b"authorization", b"Bearer " + token.encode())],
        "client": None,
        "server": None,
        "state": {},
        "extensions": {_ROUTE_WALK: {}},
    }
    await app(scope, receive, send)
    return int(sent[0]["status"]) if sent else 0


def rebind_app(app: FastAPI, host: Host, config: ApiConfig) -> None:
    """Point ``app`` (from :func:`create_app`) at ``host``, with ``config``'s waits and a
    fresh set of delta feeds. For a host that lives for one request at a time (a Lambda
    invocation): building an app costs more than the request (FastAPI builds each
    route's state on first use), so a container keeps one and rebinds it. The token,
    body limit and registry stay the ones the app was created with."""
    app.state.host = host
    if getattr(app.state, "signing_keys", None) is None:
        app.state.signing_keys = SigningKeys.for_host(config.token, config.signing_keys)
    app.state.api_settings = ApiSettings(
        max_wait_s=config.max_wait_s, heartbeat_s=config.heartbeat_s, streams=config.streams
    )
    app.state.delta_feeds = DeltaFeeds()
    app.state.cursors = CursorCodec(config.token)
