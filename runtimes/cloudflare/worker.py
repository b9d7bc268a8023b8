"""The Python Worker's entry classes (imports the Workers SDK: Pyodide only).

* :class:`Default` — the ``WorkerEntrypoint`` front door: every request is decided by
  :class:`~.front_door.FrontDoor` (auth, a scoped token's scope, body size, actor id,
  route, JSON; CORS preflights by :class:`~runtimes.actor.cors.CorsPolicy`) before any
  Durable Object is addressed; admitted requests go to ``ACTORS.getByName(actor)``,
  i.e. the object ``idFromName(actor)``. It answers itself, touching no actor,
  ``POST /v1/tokens`` (:mod:`~.minting`), ``GET /v1/actors`` (:mod:`~.listing`, from
  the index objects) and the web inspector's static files
  (``/``, ``/ui``, ``/ui/{name}``: :mod:`runtimes.actor.inspector_files`, from the
  package the build put in the bundle — through the app rather than Workers static
  assets, so every host serves the same bytes under the same CSP, and the Pyodide
  harness tests it).
* :class:`PerdureActor` — the Durable Object: a :class:`~.actor.DurableActor` host over
  ``ctx.storage`` (one actor: this object's), started once per isolate inside
  ``blockConcurrencyWhile``. ``fetch`` serves the actor API app (``create_app``) through
  the SDK's own ASGI bridge (``workers.asgi.fetch``), with lifespan events ignored (see
  :func:`without_lifespan`); ``alarm()`` runs one guarded delivery. A WebSocket upgrade
  of ``.../conversations/{cid}/watch`` is a hibernatable watch
  (:class:`~.watch.WatchHub`: ``acceptWebSocket``, ``webSocketMessage``,
  ``webSocketClose``); every wake (request, alarm, socket message) revives the watches.

What every actor is opened with (its models, extensions, env, settings) comes from the
Worker's vars and secrets (:mod:`~.settings`: the model adapter, the sandbox, tokens
minted from the sandbox secret), unless the entry module gives it with
:func:`configure`. A misconfigured deployment (a required variable missing, or half of
a pair such as the sandbox secret without its URL) is refused when an isolate starts:
its first event writes one line to the Worker's log naming every variable to fix, and
every request answers ``503 misconfigured`` with the same names (never their values)
at the front door, before any Durable Object is addressed — a deployment's mistake,
not a server fault, so never a 500.

Nothing here imports FastAPI or the actor API app at module level: an isolate imports
core, the Workers SDK and this runtime, opens its actor, and builds the HTTP app on its
first HTTP request (``fetch``); the alarm path never needs it. A deployment still gets
every import for free: the entry module imports the app eagerly, into the deploy-time
memory snapshot (``infra/cloudflare/src/entry.py``).
"""

from __future__ import annotations

import json
import re
import sys
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import unquote, urlsplit

from workers import DurableObject, Response, WorkerEntrypoint  # type: ignore[import-not-found]

from core.errors import UnknownRecord
from runtimes.actor import ActorConfig, UnknownActor
from runtimes.actor.clock import SystemClock
from runtimes.actor.cors import CorsPolicy
from runtimes.actor.tokens import SigningKeys
from runtimes.cloudflare.actor import DurableActor
from runtimes.cloudflare.alarm import AlarmReport
from runtimes.cloudflare.index import ActorIndex, IndexShard, shard_name
from runtimes.cloudflare.names import DURABLE_OBJECT_BINDING, INDEX_BINDING
from runtimes.cloudflare.settings import (
    MisconfiguredWorker,
    WorkerSettings,
    _read,
    default_actor_config,
)
from runtimes.cloudflare.watch import WatchHub

# What only the front door (``Default``) or a WebSocket upgrade uses — the front door's
# checks and route table, the scopes, the listing, the token minting and the inspector's
# files — is imported in the functions that use it, not here: an isolate that opens a
# Durable Object (for an alarm, or a request the front door of another isolate admitted)
# does not compile it before its actor is open (issue 36: import + open <= 1 s from
# sources in Pyodide; tests/cloudflare/test_open_path.py pins what stays off that path).
# The entry module imports all of it for the deploy-time snapshot.
if TYPE_CHECKING:
    from runtimes.cloudflare.front_door import FrontDoor, Refusal, RouteTable

__all__ = [
    "Default",
    "PerdureActor",
    "PerdureActorIndex",
    "api_routes",
    "configure",
    "configure_from_env",
    "without_lifespan",
    "worker_secret",
]


# A pattern, compiled (and cached by ``re``) on the first WebSocket upgrade, not at import.
_WATCH = r"/v1/actors/([^/]+)/conversations/([0-9]+)/watch"


class _Deployment:
    actor_config: ActorConfig | None = None  # given by configure()
    from_env: ActorConfig | None = None  # built once per isolate from the Worker's env
    routes: RouteTable | None = None
    env: Any = None  # the env the isolate's Durable Object was constructed with
    logged: ClassVar[set[str]] = set()  # misconfigurations already on this isolate's log


def _settings(env: Any) -> WorkerSettings:
    return WorkerSettings.from_env(env, need_model=_Deployment.actor_config is None)


def _actor_config(settings: WorkerSettings) -> ActorConfig:
    if _Deployment.actor_config is not None:
        return _Deployment.actor_config
    if _Deployment.from_env is None:
        # Once per isolate: its model client and transports serve every request.
        _Deployment.from_env = default_actor_config(settings)
    return _Deployment.from_env


def api_routes() -> RouteTable:
    """The actor API's own routes, for the front door (so the two cannot drift apart):
    the actor routes, the listings and the long-poll deltas."""
    from runtimes.actor.api.route_table import actor_routes
    from runtimes.cloudflare.front_door import RouteTable

    return RouteTable.from_routes(actor_routes())


def configure(actor_config: ActorConfig, *, routes: RouteTable | None = None) -> None:
    """Called once by the Worker's entry module: what every actor is opened with (its
    models, extensions, env, settings), and optionally the front door's route table
    (default: the actor API's)."""
    _Deployment.actor_config = actor_config
    _Deployment.from_env = None
    _Deployment.routes = routes


def worker_secret(name: str) -> str | None:
    """The Worker's secret (or var) ``name`` from the env this isolate's Durable Object
    received; ``None`` when it is unset. For what :func:`configure` set up before any
    env existed and reads later, such as the ``${NAME}`` placeholders of MCP servers'
    headers (``mcp_extension(servers, secrets=worker_secret)``)."""
    env = _Deployment.env
    return None if env is None else _read(env, name)


def configure_from_env(*, routes: RouteTable | None = None) -> None:
    """Forget any :func:`configure`: actors are opened with what the Worker's vars and
    secrets describe (:func:`~.settings.default_actor_config`)."""
    _Deployment.actor_config = None
    _Deployment.from_env = None
    _Deployment.routes = routes


def without_lifespan(app: Any) -> Any:
    """``app`` with ASGI lifespan events ignored (left unacknowledged, which the bridge
    reads as "no lifespan support").

    The SDK's bridge runs one lifespan startup/shutdown cycle *per request*; the actor
    API's lifespan starts and closes the host, which in a Durable Object lives as long
    as the isolate, not as long as a request. The Durable Object starts the host itself.
    """

    async def serve(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            return
        await app(scope, receive, send)

    return serve


def _report(report: AlarmReport) -> None:
    # The Worker's log (wrangler tail / Workers Logs) is stderr.
    what = "gave up" if report.gave_up else f"retrying at {report.retry_at}"
    print(
        f"perdure: alarm attempt {report.attempt}/{report.max_failures} failed"
        f" ({report.error}); {what}",
        file=sys.stderr,
    )


def _misconfigured(error: MisconfiguredWorker) -> Refusal:
    """The answer to every request while the deployment is misconfigured; the first
    time an isolate meets ``error`` it also goes to the Worker's log (``wrangler tail``),
    once, not once per request."""
    from runtimes.cloudflare.front_door import Refusal

    message = str(error)
    if message not in _Deployment.logged:
        _Deployment.logged.add(message)
        print(f"perdure: {message}; every request answers 503 until it is fixed", file=sys.stderr)
    return Refusal(503, "misconfigured", message)


def _json_response(refusal: Refusal, extra: tuple[tuple[str, str], ...] = ()) -> Any:
    headers = {"content-type": "application/json", **dict(refusal.headers), **dict(extra)}
    return Response(refusal.body_bytes(), status=refusal.status, headers=headers)


def _door(settings: WorkerSettings, max_body_bytes: int | None = None) -> FrontDoor:
    from runtimes.cloudflare.front_door import FrontDoor

    keys = SigningKeys.for_host(settings.api_token, settings.token_keys)
    size = settings.max_body_bytes if max_body_bytes is None else max_body_bytes
    return FrontDoor(settings.api_token, _Deployment.routes or api_routes(), size, keys=keys)


def _js(request: Any) -> Any:
    return getattr(request, "js_object", request)


class _ShardRpc:
    """An index object's stub as a :class:`~.index.ShardStub`. Only strings and numbers
    cross: ``after`` is ``""`` for none, and the ids come back as one JSON string, so
    no conversion of a JS array or of ``null`` is relied on."""

    def __init__(self, stub: Any) -> None:
        self._stub = stub

    async def add(self, actor: str) -> None:
        await self._stub.add(actor)

    async def names(self, after: str | None, limit: int) -> list[str]:
        found = json.loads(str(await self._stub.names(after or "", limit)))
        return [str(name) for name in found]


def _index(env: Any) -> ActorIndex | None:
    """The index objects of the deployment, reached through ``env.ACTOR_INDEX``; ``None``
    for a deployment without the binding (nothing is indexed, the listing is ``501``)."""
    namespace = getattr(env, INDEX_BINDING, None)
    if namespace is None:
        return None
    return ActorIndex(lambda n: _ShardRpc(namespace.getByName(shard_name(n))))


class Default(WorkerEntrypoint):  # type: ignore[misc]
    """The front door (see the module docstring)."""

    async def fetch(self, request: Any) -> Any:
        from runtimes.actor.inspector_files import inspector_answer
        from runtimes.cloudflare.front_door import Refusal, admit_request
        from runtimes.cloudflare.listing import LISTING_PATH, list_at_door
        from runtimes.cloudflare.minting import TOKENS_PATH

        js_request = _js(request)
        method = str(js_request.method).upper()
        path = urlsplit(str(js_request.url)).path
        page = inspector_answer(method, path)
        if page is not None:
            # The inspector's static files, from the package in the bundle: public (the
            # page asks for the token itself), so served before the settings are read.
            return Response(page.body, status=page.status, headers=page.headers)
        headers = {str(k).lower(): str(v) for k, v in js_request.headers.entries()}
        try:
            settings = _settings(self.env)
        except MisconfiguredWorker as error:
            return _json_response(_misconfigured(error))
        cors = CorsPolicy(settings.cors_origins)
        if cors.origins and cors.is_preflight(method, headers):
            # Answered here: a preflight carries no token, and no object needs to wake.
            status, allowed = cors.preflight(headers)
            return Response("", status=status, headers=dict(allowed))
        door = _door(settings)
        if path == TOKENS_PATH:  # touches no actor: answered here
            return await self._mint(js_request, method, headers, settings, cors)
        if path == LISTING_PATH:  # read from the index: no actor's object is addressed
            index = _index(self.env)
            if index is None:
                message = f"this Worker has no {INDEX_BINDING} binding (see wrangler.toml)"
                refusal = Refusal(501, "not_supported", message)
                return _json_response(refusal, cors.response_headers(headers))
            query = urlsplit(str(js_request.url)).query
            listed = await list_at_door(door, method, query, headers, index)
            if isinstance(listed, Refusal):
                return _json_response(listed, cors.response_headers(headers))
            extra = {"content-type": "application/json", **dict(cors.response_headers(headers))}
            return Response(json.dumps(listed), status=200, headers=extra)

        async def read_body() -> bytes:
            # Read a clone: the original, unread, goes on to the Durable Object.
            buffer = await js_request.clone().arrayBuffer()
            return bytes(buffer.to_bytes())

        decision = await admit_request(door, method, path, headers, read_body)
        if isinstance(decision, Refusal):
            return _json_response(decision, cors.response_headers(headers))
        stub = getattr(self.env, DURABLE_OBJECT_BINDING).getByName(decision.actor)
        return await stub.fetch(js_request)

    async def _mint(
        self,
        js_request: Any,
        method: str,
        headers: dict[str, str],
        settings: WorkerSettings,
        cors: CorsPolicy,
    ) -> Any:
        from runtimes.cloudflare.front_door import Refusal
        from runtimes.cloudflare.minting import mint_at_door

        keys = SigningKeys.for_host(settings.api_token, settings.token_keys)
        limit = settings.max_body_bytes
        answer = mint_at_door(settings.api_token, keys, method, headers, None, limit)
        if answer is None:  # admitted so far: read the body and decide
            body = bytes((await js_request.clone().arrayBuffer()).to_bytes())
            answer = mint_at_door(settings.api_token, keys, method, headers, body, limit)
        assert answer is not None  # with the body, it is always decided
        if isinstance(answer, Refusal):
            return _json_response(answer, cors.response_headers(headers))
        status, minted = answer
        extra = {"content-type": "application/json", **dict(cors.response_headers(headers))}
        return Response(json.dumps(minted), status=status, headers=extra)


class PerdureActor(DurableObject):  # type: ignore[misc]
    """One conversation tree (see the module docstring)."""

    def __init__(self, ctx: Any, env: Any) -> None:
        super().__init__(ctx, env)
        # The front door refuses every request of a misconfigured deployment first, so
        # only an alarm (or a socket accepted before the configuration broke) can reach
        # an object that cannot open its actor: it stays closed and says why.
        self.misconfigured: MisconfiguredWorker | None = None
        _Deployment.env = env  # one deployment per isolate: every object gets the same
        try:
            self.settings = _settings(self.env)
        except MisconfiguredWorker as error:
            self.misconfigured = error
            return
        config = _actor_config(self.settings)
        self.host = DurableActor(
            self.ctx.storage,
            config,
            clock=SystemClock(),
            alarm_report=_report,
            index=_index(self.env),
        )
        self.hub = WatchHub(self.host, self.ctx)
        self._started = False
        self._app: Any = None

    async def _start(self) -> None:
        if not self._started:
            # Started once per isolate, with every other event held until it is done;
            # never closed here: an eviction just drops the isolate (closing writes
            # nothing a crash would not leave either).
            await self.ctx.blockConcurrencyWhile(self.host.start)
            self._started = True

    async def _serve(self) -> Any:
        await self._start()
        if self._app is None:
            # The HTTP app (FastAPI, the actor API's routes and schemas) is imported on
            # the first HTTP request, not with this module: an isolate woken by an alarm
            # or a hibernated socket's message never builds it (module docstring).
            from runtimes.actor.api import ApiConfig, create_app

            api = ApiConfig(
                self.settings.api_token,
                max_body_bytes=self.settings.max_body_bytes,
                signing_keys=self.settings.token_keys,
                cors_origins=self.settings.cors_origins,
            )
            self._app = without_lifespan(create_app(self.host, api))
        return self._app

    async def fetch(self, request: Any) -> Any:
        if self.misconfigured is not None:
            return _json_response(_misconfigured(self.misconfigured))
        js_request = _js(request)
        upgrade = str(js_request.headers.get("upgrade") or "").lower()
        if upgrade == "websocket":
            await self._start()
            self.hub.revive()  # a wake after hibernation: watches get the current view
            return await self._watch(js_request)
        from workers import asgi

        app = await self._serve()
        self.hub.revive()
        return await asgi.fetch(app, request, self.env)

    async def _watch(self, js_request: Any) -> Any:
        """``GET .../conversations/{cid}/watch`` upgraded: a hibernatable watch."""
        from js import Response as JsResponse  # type: ignore[import-not-found]
        from js import WebSocketPair

        from runtimes.cloudflare.front_door import Refusal

        headers = {str(k).lower(): str(v) for k, v in js_request.headers.entries()}
        path = urlsplit(str(js_request.url)).path
        door = _door(self.settings, 1024 * 1024)
        decision = door.admit("GET", path, headers)  # the app's auth and scope, re-checked
        if isinstance(decision, Refusal):
            return _json_response(decision)
        match = re.fullmatch(_WATCH, unquote(path))
        if match is None:
            return _json_response(Refusal(404, "no_route", f"no WebSocket route for {path}"))
        client, server = WebSocketPair.new().object_values()
        try:
            await self.hub.accept(server, match[1], int(match[2]))
        except (UnknownActor, UnknownRecord) as error:
            return _json_response(Refusal(404, "not_found", str(error)))
        return JsResponse.new(None, status=101, webSocket=client)

    async def webSocketMessage(self, ws: Any, message: Any) -> None:
        if self.misconfigured is not None:
            _misconfigured(self.misconfigured)
            return
        await self._start()
        await self.hub.message(ws, message)

    async def webSocketClose(self, ws: Any, code: int, reason: str, was_clean: bool) -> None:
        if self.misconfigured is not None:
            return
        await self._start()
        await self.hub.closed(ws, int(code), str(reason))

    async def alarm(self, alarm_info: Any = None) -> None:
        if self.misconfigured is not None:
            # Logged once; raising leaves the alarm to workerd's bounded retries, so a
            # configuration fixed meanwhile still delivers it.
            _misconfigured(self.misconfigured)
            raise self.misconfigured
        # Opening is part of the guarded work: an isolate that cannot open the actor
        # is a failed attempt, counted and backed off, not an endless workerd retry.
        await self.host.alarm()
        self.hub.revive()


class PerdureActorIndex(DurableObject):  # type: ignore[misc]
    """One shard of the index of the actors (see the module docstring). Its methods are
    called over RPC by the actors' objects (:meth:`add`) and the front door
    (:meth:`names`); it serves no HTTP."""

    def __init__(self, ctx: Any, env: Any) -> None:
        super().__init__(ctx, env)
        self.shard = IndexShard(self.ctx.storage)

    async def add(self, actor: Any) -> None:
        self.shard.add(str(actor))

    async def names(self, after: Any, limit: Any) -> str:
        # JSON text: see _ShardRpc.
        return json.dumps(self.shard.names(str(after) or None, int(limit)))
