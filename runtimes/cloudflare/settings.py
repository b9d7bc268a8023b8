"""The Worker's configuration: read from its ``env`` (vars and secrets), checked at once.

A Worker has no files and no process environment: what a deployment is configured with
arrives as ``env`` (``[vars]`` in ``wrangler.toml``, secrets from ``wrangler secret
put``), on the entry class and on every Durable Object. :meth:`WorkerSettings.from_env`
reads every name of :mod:`~runtimes.cloudflare.names` and reports *all* missing or
invalid ones in one :class:`MisconfiguredWorker`, naming the variables (never their
values), so an operator fixes a deployment in one round.

:func:`default_actor_config` turns the settings into what every actor is opened with:
the OpenAI-compatible httpx model adapter and, when a sandbox is configured, the coding
tools on a ``remote_env`` workspace per actor (:func:`runtimes.actor.sandbox.sandbox_env`,
tokens minted from the sandbox secret), both over the runtime's ``fetch``.

Importable on CPython (no ``js`` at module level); the adapters are imported only when
the actor configuration is built.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from remote_env.auth import MIN_SECRET_BYTES
from runtimes.actor import ActorConfig
from runtimes.actor.cors import parse_origins
from runtimes.actor.setting_checks import (
    DEFAULT_CONTEXT_WINDOW,
    DEFAULT_MAX_TOKENS,
    check_model_limits,
    check_service_url,
    integer_setting,
)
from runtimes.actor.tokens import parse_keys
from runtimes.cloudflare import names

if TYPE_CHECKING:
    import httpx

__all__ = [
    "DEFAULT_CONTEXT_WINDOW",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_TOKENS",
    "MIN_API_TOKEN_CHARS",
    "MisconfiguredWorker",
    "ModelSettings",
    "SandboxSettings",
    "WorkerSettings",
    "default_actor_config",
]

DEFAULT_MAX_BODY_BYTES = 1024 * 1024
MIN_API_TOKEN_CHARS = 16


class MisconfiguredWorker(ValueError):
    """The Worker's ``env`` lacks a required name or holds an invalid value.

    ``problems``: one line per variable, each naming it."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("the Worker is misconfigured: " + "; ".join(problems))
        self.problems = tuple(problems)


@dataclass(frozen=True)
class ModelSettings:
    """One OpenAI-compatible model: ``name`` is what agents store and the server gets."""

    name: str
    base_url: str
    api_key: str = field(repr=False)
    context_window: int = DEFAULT_CONTEXT_WINDOW
    max_tokens: int = DEFAULT_MAX_TOKENS


@dataclass(frozen=True)
class SandboxSettings:
    """The sandbox server and the secret its workspace tokens are signed with."""

    url: str
    secret: bytes = field(repr=False)


@dataclass(frozen=True)
class WorkerSettings:
    """Everything the Worker reads from ``env`` (see ``infra/cloudflare/README.md``)."""

    api_token: str = field(repr=False)
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    model: ModelSettings | None = None
    sandbox: SandboxSettings | None = None
    token_keys: tuple[str, ...] = field(default=(), repr=False)
    cors_origins: tuple[str, ...] = ()

    @classmethod
    def from_env(cls, env: Any, *, need_model: bool = True) -> WorkerSettings:
        """Read and check ``env``. ``need_model=False`` when the deployment's entry module
        configured its models itself (``configure(ActorConfig(...))``): the model
        variables are then not read at all.

        Raises:
            MisconfiguredWorker: every missing or invalid variable at once.
        """
        problems: list[str] = []
        token = _read(env, names.API_TOKEN_SECRET)
        if token is None:
            problems.append(f"secret {names.API_TOKEN_SECRET} is not set")
        elif len(token) < MIN_API_TOKEN_CHARS:
            problems.append(
                f"secret {names.API_TOKEN_SECRET} must be at least {MIN_API_TOKEN_CHARS} characters"
            )
        max_body = _integer(env, names.MAX_BODY_BYTES_VAR, DEFAULT_MAX_BODY_BYTES, 0, problems)
        model = _model(env, problems) if need_model else None
        sandbox = _sandbox(env, problems)
        keys = _parsed(env, names.TOKEN_KEYS_SECRET, "secret", parse_keys, problems)
        origins = _parsed(env, names.CORS_ORIGINS_VAR, "var", parse_origins, problems)
        if problems:
            raise MisconfiguredWorker(problems)
        assert token is not None
        return cls(token, max_body, model, sandbox, keys, origins)


def _read(env: Any, name: str) -> str | None:
    """``env.NAME`` as a stripped string; unset, ``null`` and empty are ``None``."""
    try:
        value = getattr(env, name, None)
    except Exception:  # a JS proxy may throw on an odd property; treat it as unset
        value = None
    if value is None:
        return None
    text = str(value).strip()
    # Pyodide's JsNull / undefined stringify as these; a real value never equals them.
    return None if text in ("", "null", "undefined") else text


def _parsed(
    env: Any,
    name: str,
    kind: str,
    parse: Callable[[str | None], tuple[str, ...]],
    problems: list[str],
) -> tuple[str, ...]:
    try:
        return parse(_read(env, name))
    except ValueError as error:
        # The parsers' messages name no secret value (a key is never quoted).
        problems.append(f"{kind} {name}: {error}")
        return ()


def _integer(env: Any, name: str, default: int, minimum: int, problems: list[str]) -> int:
    return integer_setting(
        _read(env, name), f"var {name}", default=default, minimum=minimum, problems=problems
    )


def _model(env: Any, problems: list[str]) -> ModelSettings | None:
    name = _read(env, names.MODEL_VAR)
    base_url = _read(env, names.MODEL_BASE_URL_VAR)
    api_key = _read(env, names.MODEL_API_KEY_SECRET)
    for var, value, kind in (
        (names.MODEL_VAR, name, "var"),
        (names.MODEL_BASE_URL_VAR, base_url, "var"),
        (names.MODEL_API_KEY_SECRET, api_key, "secret"),
    ):
        if value is None:
            problems.append(f"{kind} {var} is not set")
    if base_url is not None:
        check_service_url(f"var {names.MODEL_BASE_URL_VAR}", base_url, problems)
    window = _integer(env, names.MODEL_CONTEXT_WINDOW_VAR, DEFAULT_CONTEXT_WINDOW, 1, problems)
    max_tokens = _integer(env, names.MODEL_MAX_TOKENS_VAR, DEFAULT_MAX_TOKENS, 1, problems)
    check_model_limits(
        window,
        max_tokens,
        window_label=f"var {names.MODEL_CONTEXT_WINDOW_VAR}",
        max_label=f"var {names.MODEL_MAX_TOKENS_VAR}",
        problems=problems,
    )
    if name is None or base_url is None or api_key is None:
        return None
    return ModelSettings(name, base_url, api_key, window, max_tokens)


def _sandbox(env: Any, problems: list[str]) -> SandboxSettings | None:
    url = _read(env, names.SANDBOX_URL_VAR)
    secret = _read(env, names.SANDBOX_SECRET)
    if url is None and secret is None:
        return None  # no sandbox: the agent gets the reminders tool only
    if url is None:
        problems.append(f"var {names.SANDBOX_URL_VAR} is not set (the sandbox secret is)")
        return None
    if secret is None:
        problems.append(f"secret {names.SANDBOX_SECRET} is not set (the sandbox URL is)")
        return None
    check_service_url(f"var {names.SANDBOX_URL_VAR}", url, problems)
    raw = secret.encode()
    if len(raw) < MIN_SECRET_BYTES:
        problems.append(f"secret {names.SANDBOX_SECRET} must be at least {MIN_SECRET_BYTES} bytes")
    return SandboxSettings(url, raw)


def default_actor_config(
    settings: WorkerSettings,
    *,
    make_transport: Callable[[], httpx.AsyncBaseTransport] | None = None,
) -> ActorConfig:
    """What every actor is opened with when the entry module configured nothing itself:
    the model of ``settings.model``; the reminders tool; with a sandbox, the coding tools
    on the actor's own workspace. ``make_transport`` makes each client's httpx transport
    (each client closes its own); default: the runtime's ``fetch``. Tests on CPython
    pass httpx's own."""
    from core.harness import Extension, ModelInfo, reminders_extension
    from core.jsonvalue import JsonObject
    from core.tools import coding_tools
    from runtimes.actor.sandbox import sandbox_env
    from runtimes.cloudflare.fetch_transport import FetchTransport
    from runtimes.models.openai_http import OpenAICompatibleModels, OpenAIModel

    model = settings.model
    if model is None:
        raise MisconfiguredWorker([f"var {names.MODEL_VAR} is not set"])
    info = ModelInfo(model.name, context_window=model.context_window, max_tokens=model.max_tokens)
    route = OpenAIModel(info=info, base_url=model.base_url, api_key=model.api_key)
    make = make_transport or FetchTransport
    models = OpenAICompatibleModels({info.id: route}, transport=make())
    reminders = reminders_extension()
    extensions: list[Extension] = [reminders]
    agent: JsonObject = {"model": info.id}
    env = None
    if settings.sandbox is not None:
        tools = coding_tools()
        extensions.append(tools)
        agent["tools"] = [t.name for t in (*tools.tools, *reminders.tools)]
        env = sandbox_env(settings.sandbox.url, settings.sandbox.secret, make_transport=make)
    return ActorConfig(models=models, extensions=extensions, env=env, default_agent=agent)
