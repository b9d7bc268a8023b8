"""The function's configuration as ``infra/aws/template.yaml`` passes it: environment
variables, each set from a template parameter or one of the stack's resources.

:func:`read_config` checks every variable at once and raises one :class:`Misconfigured`
naming each offending template parameter and its variable — never a value — so an
operator fixes a stack in one round. Secrets are not in the environment (anyone who may
read the function's configuration would see them there): only the ARNs of the Secrets
Manager secrets or SSM SecureString parameters that hold them; :mod:`runtimes.aws.secrets`
reads those once per cold start.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from runtimes.actor.cors import parse_origins
from runtimes.actor.setting_checks import (
    DEFAULT_CONTEXT_WINDOW,
    DEFAULT_MAX_TOKENS,
    check_model_limits,
    check_service_url,
    integer_setting,
)

__all__ = [
    "API_TOKEN",
    "BUCKET",
    "CORS_ORIGINS",
    "DEFAULT_CONTEXT_WINDOW",
    "DEFAULT_MAX_TOKENS",
    "FUNCTION_ARN",
    "MODEL",
    "MODEL_BASE_URL",
    "MODEL_CONTEXT_WINDOW",
    "MODEL_KEY",
    "MODEL_MAX_TOKENS",
    "SANDBOX_SECRET",
    "SANDBOX_URL",
    "SCHEDULER_ROLE_ARN",
    "SCHEDULE_GROUP",
    "SETTINGS",
    "SETTINGS_FACTORY",
    "TABLE",
    "TOKEN_KEYS",
    "WORKDIR",
    "FunctionConfig",
    "Misconfigured",
    "ModelConfig",
    "SandboxConfig",
    "SecretRef",
    "Setting",
    "read_config",
]

# arn:PARTITION:secretsmanager:REGION:ACCOUNT:secret:NAME-abcdef
# arn:PARTITION:ssm:REGION:ACCOUNT:parameter/NAME
_ARN = re.compile(r"arn:[a-z-]+:(secretsmanager|ssm):[a-z0-9-]+:\d{12}:(secret:.+|parameter/.+)")


@dataclass(frozen=True)
class Setting:
    """One environment variable and what sets it in the template: a parameter (the name
    an operator knows) or a resource."""

    variable: str
    parameter: str | None = None
    resource: str | None = None

    def describe(self) -> str:
        if self.parameter is not None:
            return f"template parameter {self.parameter} ({self.variable})"
        return f"{self.variable} (set from the {self.resource} resource)"


SETTINGS_FACTORY = Setting("PERDURE_FUNCTION", parameter="SettingsFactory")
TABLE = Setting("PERDURE_TABLE", resource="ActorTable")
BUCKET = Setting("PERDURE_BUCKET", resource="StateBucket")
SCHEDULE_GROUP = Setting("PERDURE_SCHEDULE_GROUP", resource="WakeGroup")
SCHEDULER_ROLE_ARN = Setting("PERDURE_SCHEDULER_ROLE_ARN", resource="SchedulerRole")
FUNCTION_ARN = Setting("PERDURE_FUNCTION_ARN", resource="ActorFunction")
API_TOKEN = Setting("PERDURE_API_TOKEN_ARN", parameter="ApiTokenArn")
MODEL = Setting("PERDURE_MODEL", parameter="Model")
MODEL_BASE_URL = Setting("PERDURE_MODEL_BASE_URL", parameter="ModelBaseUrl")
MODEL_KEY = Setting("PERDURE_MODEL_KEY_ARN", parameter="ModelKeyArn")
MODEL_CONTEXT_WINDOW = Setting("PERDURE_MODEL_CONTEXT_WINDOW", parameter="ModelContextWindow")
MODEL_MAX_TOKENS = Setting("PERDURE_MODEL_MAX_TOKENS", parameter="ModelMaxTokens")
SANDBOX_URL = Setting("PERDURE_SANDBOX_URL", parameter="SandboxUrl")
SANDBOX_SECRET = Setting("PERDURE_SANDBOX_SECRET_ARN", parameter="SandboxSecretArn")
TOKEN_KEYS = Setting("PERDURE_TOKEN_KEYS_ARN", parameter="TokenKeysArn")  # optional
CORS_ORIGINS = Setting("PERDURE_CORS_ORIGINS", parameter="CorsOrigins")  # optional
WORKDIR = Setting("PERDURE_WORKDIR")  # not in the template: /tmp/perdure unless set

SETTINGS = (
    SETTINGS_FACTORY,
    TABLE,
    BUCKET,
    SCHEDULE_GROUP,
    SCHEDULER_ROLE_ARN,
    FUNCTION_ARN,
    API_TOKEN,
    MODEL,
    MODEL_BASE_URL,
    MODEL_KEY,
    MODEL_CONTEXT_WINDOW,
    MODEL_MAX_TOKENS,
    SANDBOX_URL,
    SANDBOX_SECRET,
    TOKEN_KEYS,
    CORS_ORIGINS,
)
"""Every variable the template sets (a test checks the template sets exactly these)."""


class Misconfigured(ValueError):
    """The function's configuration lacks a setting or holds an invalid one.

    ``problems``: one line per setting, each naming its template parameter."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("the function is misconfigured: " + "; ".join(problems))
        self.problems = tuple(problems)


@dataclass(frozen=True)
class SecretRef:
    """Where a secret lives: a Secrets Manager secret or an SSM SecureString parameter,
    by ARN; ``setting`` names it in messages."""

    setting: Setting
    arn: str

    @property
    def service(self) -> Literal["secretsmanager", "ssm"]:
        return "ssm" if self.arn.split(":")[2] == "ssm" else "secretsmanager"


@dataclass(frozen=True)
class ModelConfig:
    """One OpenAI-compatible model: ``name`` is what agents store and the server gets."""

    name: str
    base_url: str
    key: SecretRef
    context_window: int = DEFAULT_CONTEXT_WINDOW
    max_tokens: int = DEFAULT_MAX_TOKENS


@dataclass(frozen=True)
class SandboxConfig:
    """The sandbox server and the secret its workspace tokens are signed with."""

    url: str
    secret: SecretRef


@dataclass(frozen=True)
class FunctionConfig:
    """Everything :func:`read_config` read (secrets by reference only)."""

    table: str
    bucket: str
    schedule_group: str
    function_arn: str
    scheduler_role_arn: str
    api_token: SecretRef
    workdir: Path
    model: ModelConfig | None = None
    sandbox: SandboxConfig | None = None
    token_keys: SecretRef | None = None
    """Scoped tokens' signing keys (comma-separated, newest first); ``None``: one key
    derived from the API token (:mod:`runtimes.actor.tokens`)."""
    cors_origins: tuple[str, ...] = ()


def read_config(environ: Mapping[str, str], *, need_model: bool = True) -> FunctionConfig:
    """Read and check the function's variables. ``need_model=False`` when a deployment's
    own settings factory brings its models: the model variables are then not read.

    Raises:
        Misconfigured: every missing or invalid setting at once.
    """
    problems: list[str] = []

    def required(setting: Setting) -> str:
        value = _read(environ, setting)
        if value is None:
            problems.append(f"{setting.describe()} is not set")
            return ""
        return value

    table, bucket, group = required(TABLE), required(BUCKET), required(SCHEDULE_GROUP)
    function_arn, role_arn = required(FUNCTION_ARN), required(SCHEDULER_ROLE_ARN)
    token = _secret(environ, API_TOKEN, problems, required=True)
    model = _model(environ, problems) if need_model else None
    sandbox = _sandbox(environ, problems)
    token_keys = _secret(environ, TOKEN_KEYS, problems, required=False)
    try:
        origins = parse_origins(_read(environ, CORS_ORIGINS))
    except ValueError as error:
        problems.append(f"{CORS_ORIGINS.describe()}: {error}")
        origins = ()
    if problems:
        raise Misconfigured(problems)
    assert token is not None
    return FunctionConfig(
        table=table,
        bucket=bucket,
        schedule_group=group,
        function_arn=function_arn,
        scheduler_role_arn=role_arn,
        api_token=token,
        workdir=Path(_read(environ, WORKDIR) or "/tmp/perdure"),
        model=model,
        sandbox=sandbox,
        token_keys=token_keys,
        cors_origins=origins,
    )


def _read(environ: Mapping[str, str], setting: Setting) -> str | None:
    """The variable, stripped; unset and empty are ``None`` (a template parameter left
    at its empty default arrives as an empty variable)."""
    value = environ.get(setting.variable, "").strip()
    return value or None


def _secret(
    environ: Mapping[str, str], setting: Setting, problems: list[str], *, required: bool
) -> SecretRef | None:
    arn = _read(environ, setting)
    if arn is None:
        if required:
            problems.append(f"{setting.describe()} is not set")
        return None
    if not _ARN.fullmatch(arn):
        problems.append(
            f"{setting.describe()} must be the ARN of a Secrets Manager secret or an SSM "
            "SecureString parameter"
        )
        return None
    return SecretRef(setting, arn)


def _integer(
    environ: Mapping[str, str], setting: Setting, default: int, problems: list[str]
) -> int:
    return integer_setting(
        _read(environ, setting), setting.describe(), default=default, minimum=1, problems=problems
    )


def _model(environ: Mapping[str, str], problems: list[str]) -> ModelConfig | None:
    name, base_url = _read(environ, MODEL), _read(environ, MODEL_BASE_URL)
    for setting, value in ((MODEL, name), (MODEL_BASE_URL, base_url)):
        if value is None:
            problems.append(f"{setting.describe()} is not set")
    if base_url is not None:
        check_service_url(MODEL_BASE_URL.describe(), base_url, problems)
    key = _secret(environ, MODEL_KEY, problems, required=True)
    window = _integer(environ, MODEL_CONTEXT_WINDOW, DEFAULT_CONTEXT_WINDOW, problems)
    max_tokens = _integer(environ, MODEL_MAX_TOKENS, DEFAULT_MAX_TOKENS, problems)
    check_model_limits(
        window,
        max_tokens,
        window_label=MODEL_CONTEXT_WINDOW.describe(),
        max_label=MODEL_MAX_TOKENS.describe(),
        problems=problems,
    )
    if name is None or base_url is None or key is None:
        return None
    return ModelConfig(name, base_url, key, window, max_tokens)


def _sandbox(environ: Mapping[str, str], problems: list[str]) -> SandboxConfig | None:
    url = _read(environ, SANDBOX_URL)
    has_secret = _read(environ, SANDBOX_SECRET) is not None
    if url is None and not has_secret:
        return None  # no sandbox: the agent gets the reminders tool only
    if url is None:
        problems.append(f"{SANDBOX_URL.describe()} is not set (the sandbox secret is)")
        return None
    if not has_secret:
        problems.append(f"{SANDBOX_SECRET.describe()} is not set (the sandbox URL is)")
        return None
    check_service_url(SANDBOX_URL.describe(), url, problems)
    secret = _secret(environ, SANDBOX_SECRET, problems, required=True)
    return None if secret is None else SandboxConfig(url, secret)
