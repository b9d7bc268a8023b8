"""``perdure dev``: the local host's HTTP API on loopback, ready to try.

The model comes from ``--model`` / ``PERDURE_MODEL`` (a litellm model string such as
``openai/gpt-4o-mini``). Without one the host answers with a scripted demo model (and
says so on startup); a model without the credentials litellm needs is refused at
start-up, with the variable to set.
"""

from __future__ import annotations

import importlib
import os
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from core.faux import FAUX_MODEL, FauxModel, FauxState, faux_message
from core.harness import (
    AssistantMessage,
    Extension,
    ModelInfo,
    ModelRequest,
    Models,
    UserMessage,
    reminders_extension,
)
from core.jsonvalue import JsonObject
from core.times import iso_time
from core.tools import coding_tools
from runtimes.actor import ActorConfig
from runtimes.actor.api import ApiConfig, new_api_token
from runtimes.actor.sandbox import sandbox_env
from runtimes.cli.preflight import (
    PreflightError,
    bind_port,
    check_model,
    check_sandbox,
    load_sandbox_secret,
    lock_data_dir,
    token_from_file,
)
from runtimes.local.host import ActorHost, HostConfig
from runtimes.local.server import bind, make_server
from runtimes.mcp import McpServer, mcp_extension, servers_from_json
from runtimes.observe import (
    HostTelemetry,
    ObservedModels,
    configure_logging,
    log_line,
    tracer_provider_from_env,
)
from runtimes.observe.logs import LogFormat
from runtimes.observe.otel import TracingUnavailable

__all__ = ["DevOptions", "ModelChoice", "choose_model", "demo_model", "run_dev", "sandbox_env"]

# When litellm does not know a model's limits (a local or brand-new model).
_FALLBACK_CONTEXT = 128_000
_FALLBACK_MAX_TOKENS = 8_192


def demo_model() -> FauxModel:
    """A scripted model that answers every message politely, forever."""

    def answer(request: ModelRequest, state: FauxState) -> AssistantMessage:
        said = next(
            (m.content for m in reversed(request.messages) if isinstance(m, UserMessage)), ""
        )
        return faux_message(
            f"Hello! You said: {said!r}. I am perdure's scripted demo model, so polite "
            "answers are all I have. Restart with --model (or PERDURE_MODEL) set to a "
            "litellm model string to talk to a real one."
        )

    # Endless, and keeping no history of requests: a dev host runs for days.
    return FauxModel(fallback=answer, record_requests=False)


@dataclass(frozen=True)
class ModelChoice:
    models: Models
    model_id: str
    note: str
    demo: bool
    on_shutdown: tuple[Callable[[], Awaitable[None]], ...] = ()


def choose_model(model: str | None, *, api_base: str | None = None) -> ModelChoice:
    """litellm for ``model``, or the demo model when no model is given. A model whose
    provider litellm does not know, or whose credentials are missing (with or without
    ``api_base``), raises :class:`~runtimes.cli.preflight.PreflightError`: an explicit
    ``--model`` never falls back to the demo model silently."""
    if not model:
        return ModelChoice(
            demo_model(), FAUX_MODEL.id, "no model configured: using the scripted demo model", True
        )
    check_model(model, api_base)
    # Imported only now: importing litellm takes seconds and sets process-wide state,
    # and the adapter module must come first: it configures litellm before importing it
    # (offline price map, no .env loading).
    from runtimes.models.litellm import LitellmModel, LitellmModels, close_litellm_clients

    litellm = importlib.import_module("litellm")
    try:
        known = litellm.get_model_info(model)
        context = int(known.get("max_input_tokens") or _FALLBACK_CONTEXT)
        max_tokens = int(known.get("max_output_tokens") or _FALLBACK_MAX_TOKENS)
    except Exception:  # litellm raises several types for a model missing from its map
        context, max_tokens = _FALLBACK_CONTEXT, _FALLBACK_MAX_TOKENS
    info = ModelInfo(model, context_window=context, max_tokens=max_tokens)
    models = LitellmModels({model: LitellmModel(info=info, api_base=api_base)})
    return ModelChoice(models, model, f"model {model} via litellm", False, (close_litellm_clients,))


@dataclass(frozen=True)
class DevOptions:
    data_dir: Path
    port: int = 8787
    model: str | None = None
    api_base: str | None = None
    token: str | None = field(default=None, repr=False)
    token_file: Path | None = None
    idle_evict_s: float = 300.0
    sandbox_url: str | None = None
    sandbox_secret_file: Path | None = None
    log_format: LogFormat = "text"
    sandbox_wait_s: float = 15.0
    """How long start-up waits for a sandbox server that is just starting."""
    signing_keys: tuple[str, ...] = field(default=(), repr=False)
    """Scoped tokens' signing keys, newest first (none: derived from the API token)."""
    cors_origins: tuple[str, ...] = ()
    mcp_file: Path | None = None
    """MCP servers' configuration (``runtimes.mcp.servers_from_json``); header secrets
    are read from the environment."""


def run_dev(options: DevOptions, say: Callable[[str], None] = print) -> None:
    """Check the set-up (see :mod:`runtimes.cli.preflight`), then serve until
    SIGINT/SIGTERM and close every actor. Prints the URL and token; logs one line per
    request, model call, tool call and harness event to stderr."""
    lock = lock_data_dir(options.data_dir)
    try:
        sock = bind_port(bind, "127.0.0.1", options.port)
        try:
            _serve(options, sock, say)
        finally:
            sock.close()
    finally:
        lock.release()


def _mcp_servers(path: Path | None) -> list[McpServer]:
    if path is None:
        return []
    try:
        return list(servers_from_json(path.read_text(encoding="utf-8")))
    except (OSError, ValueError) as error:
        raise PreflightError(f"--mcp {path}: {error}") from None


def _serve(options: DevOptions, sock: socket.socket, say: Callable[[str], None]) -> None:
    choice = choose_model(options.model, api_base=options.api_base)
    env = None
    if options.sandbox_url is not None and options.sandbox_secret_file is not None:
        secret = load_sandbox_secret(options.sandbox_secret_file, wait_s=options.sandbox_wait_s)
        check_sandbox(options.sandbox_url, secret, wait_s=options.sandbox_wait_s)
        env = sandbox_env(options.sandbox_url, secret)
    if options.token:
        token = options.token
    elif options.token_file is not None:
        token = token_from_file(options.token_file)
    else:
        token = new_api_token()
    configure_logging(options.log_format)
    try:
        provider = tracer_provider_from_env("perdure-dev")
    except TracingUnavailable as error:
        raise PreflightError(str(error)) from None
    tracer = None if provider is None else provider.get_tracer("perdure")
    agent: JsonObject = {"model": choice.model_id}
    # The agent can always set reminders (they need no sandbox); with a sandbox, the
    # coding tools too. Without a tools list the agent is offered every installed tool.
    reminders = reminders_extension()
    extensions: list[Extension] = [reminders]
    if env is not None:
        tools = coding_tools()
        extensions.append(tools)
        agent["tools"] = [t.name for t in (*tools.tools, *reminders.tools)]
    servers = _mcp_servers(options.mcp_file)
    if servers:
        from runtimes.mcp.sdk import SdkConnector  # the SDK, imported only when used

        # MCP tools are offered by their extension, whatever the agent's tools list.
        extensions.append(mcp_extension(servers, connector=SdkConnector(), secrets=os.environ.get))

    def telemetry(actor: str) -> HostTelemetry:
        return HostTelemetry(actor, tracer)

    host = ActorHost(
        HostConfig(
            data_dir=options.data_dir,
            actor=ActorConfig(
                models=ObservedModels(choice.models, tracer),
                extensions=extensions,
                env=env,
                default_agent=agent,
                observe=_log_actor,
                telemetry=telemetry,
            ),
            idle_evict_s=options.idle_evict_s,
        )
    )
    api = ApiConfig(token, signing_keys=options.signing_keys, cors_origins=options.cors_origins)
    server = make_server(host, api, on_shutdown=choice.on_shutdown, log_requests=True)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    say(f"perdure dev: {choice.note}")
    if env is None:
        say("tools: remind (pass --sandbox URL --sandbox-secret FILE for the coding tools)")
    else:
        say(f"tools: coding tools on the sandbox at {options.sandbox_url}, and remind")
    if servers:
        say(f"mcp:   {', '.join(f'{s.name} ({s.url})' for s in servers)}")
    say(f"data:  {options.data_dir.resolve()}")
    say(f"url:   {url}   (OpenAPI: {url}/openapi.json)")
    say(f"ui:    {url}/ui   (the inspector: open it and paste the token below)")
    say(f"token: {token}")
    say(
        f"try:   curl -s -H 'Authorization: Bearer {token}' -H 'Content-Type: application/json' "
        f'-d \'{{"type": "input", "content": "hello"}}\' {url}/v1/actors/demo/submissions'
    )
    say(f"chat:  perdure chat demo --url {url} --token {token}")
    if provider is not None:
        say("traces: exported as OTEL_* configures")
    try:
        server.run(sockets=[sock])
    finally:
        if provider is not None:
            provider.shutdown()
    if not server.started:  # uvicorn logged why (a failed lifespan start-up) and returned
        raise PreflightError("the server did not start: see the error above")


def _log_actor(actor: str, event: str, wake_at: int | None) -> None:
    wake = f" (next wake {iso_time(wake_at)})" if wake_at is not None else ""
    log_line(
        "actor", f"{actor}: {event}{wake}", {"actor": actor, "event": event, "wake_at": wake_at}
    )
