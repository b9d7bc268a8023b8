"""The function's settings from its environment (the variables infra/aws/template.yaml
sets, :mod:`runtimes.aws.config`) and its secrets (:mod:`runtimes.aws.secrets`).

:func:`settings` is the template's default ``SettingsFactory``: the model, its key, the
API token and the sandbox all come from template parameters. A deployment with models
or extensions of its own names its own factory instead::

    # mypackage/perdure_settings.py, SettingsFactory=mypackage.perdure_settings:settings
    def settings() -> FunctionSettings:
        return settings_from_environment(ActorConfig(models=OpenAICompatibleModels({...})))

Either raises :class:`~runtimes.aws.config.Misconfigured` for a missing, partial or
invalid configuration; the handler then refuses every request with ``503``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from remote_env.auth import MIN_SECRET_BYTES
from runtimes.actor.api import ApiConfig
from runtimes.actor.clock import SystemClock
from runtimes.actor.config import ActorConfig
from runtimes.actor.tokens import parse_keys
from runtimes.aws.agent import default_actor_config
from runtimes.aws.alarms import WakeSchedule
from runtimes.aws.config import API_TOKEN, SANDBOX_SECRET, TOKEN_KEYS, Misconfigured, read_config
from runtimes.aws.handler import FunctionSettings
from runtimes.aws.resources import AwsResources
from runtimes.aws.secrets import SecretReader

__all__ = ["settings", "settings_from_environment"]

_MIN_API_TOKEN_CHARS = 16


def settings() -> FunctionSettings:
    """The template's default factory: everything from the environment."""
    return settings_from_environment()


def settings_from_environment(
    actor: ActorConfig | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    clients: dict[str, Any] | None = None,
) -> FunctionSettings:
    """The function's settings; ``actor`` replaces the model the template configures
    (its variables are then not read). ``clients``: boto3 clients by service name
    (default: made from the environment, as Lambda gives it)."""
    import boto3  # type: ignore[import-untyped]  # the `aws` extra, only where it runs

    env = os.environ if environ is None else environ
    config = read_config(env, need_model=actor is None)
    made = dict(clients or {})

    def client(service: str) -> Any:
        if service not in made:
            made[service] = boto3.client(service)
        return made[service]

    reader = SecretReader({k: made[k] for k in ("secretsmanager", "ssm") if k in made})
    token = reader.read(config.api_token)
    if len(token) < _MIN_API_TOKEN_CHARS:
        raise Misconfigured(
            [f"{API_TOKEN.describe()}: the token needs {_MIN_API_TOKEN_CHARS} characters or more"]
        )
    if actor is None:
        assert config.model is not None
        sandbox = None
        if config.sandbox is not None:
            secret = reader.read(config.sandbox.secret).encode()
            if len(secret) < MIN_SECRET_BYTES:
                raise Misconfigured(
                    [
                        f"{SANDBOX_SECRET.describe()}: the secret must be at least "
                        f"{MIN_SECRET_BYTES} bytes"
                    ]
                )
            sandbox = (config.sandbox.url, secret)
        actor = default_actor_config(config.model, reader.read(config.model.key), sandbox)
    clock = SystemClock()
    config.workdir.mkdir(parents=True, exist_ok=True)
    resources = AwsResources(
        dynamodb=client("dynamodb"), s3=client("s3"), table=config.table, bucket=config.bucket
    )
    alarms = WakeSchedule(
        client("scheduler"),
        config.schedule_group,
        config.function_arn,
        config.scheduler_role_arn,
        clock.now,
    )
    keys: tuple[str, ...] = ()
    if config.token_keys is not None:
        try:
            keys = parse_keys(reader.read(config.token_keys))
        except ValueError as error:  # the message names no key
            raise Misconfigured([f"{TOKEN_KEYS.describe()}: {error}"]) from None
    return FunctionSettings(
        resources=resources,
        actor=actor,
        api=ApiConfig(token, signing_keys=keys, cors_origins=config.cors_origins),
        workdir=config.workdir,
        alarms=alarms,
        clock=clock,
    )
