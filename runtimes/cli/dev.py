"""``perdure dev``: the local host's HTTP API on loopback, ready to try.

The model comes from ``--model`` / ``PERDURE_MODEL`` (a litellm model string such as
``openai/gpt-4o-mini``). Without one, or without the credentials litellm needs for it,
the host answers with a scripted demo model (and says so on startup).
"""

from __future__ import annotations

import importlib
import secrets
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
from core.tools import coding_tools
from runtimes.actor import ActorConfig
from runtimes.actor.api import ApiConfig
from runtimes.actor.sandbox import sandbox_env
from runtimes.local.host import ActorHost, HostConfig
from runtimes.local.server import bind, make_server

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
    """litellm for ``model`` when its credentials are configured (or ``api_base`` names
    a server), else the demo model, with a note saying which and why."""
    if not model:
        return ModelChoice(
            demo_model(), FAUX_MODEL.id, "no model configured: using the scripted demo model", True
        )
    # Imported only now: importing litellm takes seconds and sets process-wide state,
    # and the adapter module must come first: it configures litellm before importing it
    # (offline price map, no .env loading).
    from runtimes.models.litellm import LitellmModel, LitellmModels, close_litellm_clients

    litellm = importlib.import_module("litellm")

    if api_base is None:
        missing = litellm.validate_environment(model).get("missing_keys") or []
        if missing:
            note = f"{model} needs {', '.join(missing)}: using the scripted demo model"
            return ModelChoice(demo_model(), FAUX_MODEL.id, note, True)
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
    idle_evict_s: float = 300.0
    sandbox_url: str | None = None
    sandbox_secret: bytes | None = field(default=None, repr=False)


def run_dev(options: DevOptions, say: Callable[[str], None] = print) -> None:
    """Serve until SIGINT/SIGTERM, then close every actor. Prints the URL and token."""
    choice = choose_model(options.model, api_base=options.api_base)
    agent: JsonObject = {"model": choice.model_id}
    # The agent can always set reminders (they need no sandbox); with a sandbox, the
    # coding tools too. Without a tools list the agent is offered every installed tool.
    reminders = reminders_extension()
    extensions: list[Extension] = [reminders]
    env = None
    if options.sandbox_url is not None and options.sandbox_secret is not None:
        tools = coding_tools()
        extensions.append(tools)
        agent["tools"] = [t.name for t in (*tools.tools, *reminders.tools)]
        env = sandbox_env(options.sandbox_url, options.sandbox_secret)
    token = options.token or secrets.token_urlsafe(24)
    host = ActorHost(
        HostConfig(
            data_dir=options.data_dir,
            actor=ActorConfig(
                models=choice.models, extensions=extensions, env=env, default_agent=agent
            ),
            idle_evict_s=options.idle_evict_s,
        )
    )
    server = make_server(host, ApiConfig(token), on_shutdown=choice.on_shutdown)
    sock = bind("127.0.0.1", options.port)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    say(f"perdure dev: {choice.note}")
    if env is None:
        say("tools: remind (pass --sandbox URL --sandbox-secret FILE for the coding tools)")
    say(f"data:  {options.data_dir.resolve()}")
    say(f"url:   {url}   (OpenAPI: {url}/openapi.json)")
    say(f"token: {token}")
    say(
        f"try:   curl -s -H 'Authorization: Bearer {token}' -H 'Content-Type: application/json' "
        f'-d \'{{"type": "input", "content": "hello"}}\' {url}/v1/actors/demo/submissions'
    )
    say(f"chat:  perdure chat demo --url {url} --token {token}")
    server.run(sockets=[sock])
