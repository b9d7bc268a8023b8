"""The function's configuration from the template's parameters: read and checked at the
cold start, secrets from Secrets Manager and SSM (moto), a refused configuration logged
once by parameter name and answered 503 on every request without touching the lease; the
default factory serving with an OpenAI-compatible model (a local scripted server)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from runtimes.aws import AwsResources, handler
from runtimes.aws.config import SETTINGS, Misconfigured, read_config
from runtimes.models.openai_http import OpenAICompatibleModels
from tests.aws.aws_target import FUNCTION_ARN, GROUP, ROLE_ARN, create_alarms
from tests.aws.lambda_support import answer, context, url_event
from tests.aws.support import items
from tests.models.fake_openai import FakeOpenAI, Stream, finish, text, usage

TOKEN = "api-token-0123456789abcdef"
MODEL_KEY = "model-key-fedcba9876543210"
SANDBOX_SECRET = "sandbox-secret-0123456789abcdef"


@pytest.fixture
def secrets(aws: AwsResources) -> dict[str, str]:
    """The API token in Secrets Manager, the model key and the sandbox secret in SSM."""
    manager = boto3.client("secretsmanager")
    ssm = boto3.client("ssm")
    token = manager.create_secret(Name="perdure/api-token", SecretString=TOKEN)["ARN"]
    arns = {"PERDURE_API_TOKEN_ARN": token}
    for variable, name, value in (
        ("PERDURE_MODEL_KEY_ARN", "/perdure/model-key", MODEL_KEY),
        ("PERDURE_SANDBOX_SECRET_ARN", "/perdure/sandbox-secret", SANDBOX_SECRET),
    ):
        ssm.put_parameter(Name=name, Value=value, Type="SecureString")
        arns[variable] = ssm.get_parameter(Name=name)["Parameter"]["ARN"]
    return arns


def environment(
    aws: AwsResources, tmp_path: Path, secrets: dict[str, str], model_url: str
) -> dict[str, str]:
    """What the template sets, for a function without a sandbox."""
    return {
        "PERDURE_TABLE": aws.table,
        "PERDURE_BUCKET": aws.bucket,
        "PERDURE_SCHEDULE_GROUP": GROUP,
        "PERDURE_FUNCTION_ARN": FUNCTION_ARN,
        "PERDURE_SCHEDULER_ROLE_ARN": ROLE_ARN,
        "PERDURE_API_TOKEN_ARN": secrets["PERDURE_API_TOKEN_ARN"],
        "PERDURE_MODEL": "served-model",
        "PERDURE_MODEL_BASE_URL": model_url,
        "PERDURE_MODEL_KEY_ARN": secrets["PERDURE_MODEL_KEY_ARN"],
        "PERDURE_MODEL_CONTEXT_WINDOW": "128000",
        "PERDURE_MODEL_MAX_TOKENS": "8192",
        "PERDURE_SANDBOX_URL": "",
        "PERDURE_SANDBOX_SECRET_ARN": "",
        "PERDURE_WORKDIR": str(tmp_path / "tmp"),
    }


@pytest.fixture
def fresh_handler(monkeypatch: pytest.MonkeyPatch) -> None:
    """A new container: the entry point builds its function on the next event."""
    monkeypatch.setattr(handler, "_function", None)


@pytest.fixture
def model_server() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI()
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _set(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)


def test_every_missing_setting_is_named_by_its_template_parameter_at_once() -> None:
    with pytest.raises(Misconfigured) as caught:
        read_config({})
    message = str(caught.value)
    for parameter in ("ApiTokenArn", "Model", "ModelBaseUrl", "ModelKeyArn"):
        assert f"template parameter {parameter} " in message, message
    for variable in ("PERDURE_TABLE", "PERDURE_BUCKET", "PERDURE_SCHEDULE_GROUP"):
        assert variable in message
    assert "Sandbox" not in message  # neither half of the sandbox: no sandbox, no problem


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"PERDURE_SANDBOX_URL": "https://sandbox.example"}, "SandboxSecretArn"),
        (
            {"PERDURE_SANDBOX_SECRET_ARN": "arn:aws:ssm:us-east-1:123456789012:parameter/s"},
            "SandboxUrl",
        ),
        ({"PERDURE_MODEL_KEY_ARN": "sk-live-not-an-arn"}, "ModelKeyArn"),
        ({"PERDURE_MODEL_BASE_URL": "http://models.example/v1"}, "ModelBaseUrl"),
        ({"PERDURE_MODEL_MAX_TOKENS": "200000"}, "ModelMaxTokens"),
        ({"PERDURE_MODEL_CONTEXT_WINDOW": "lots"}, "ModelContextWindow"),
        ({"PERDURE_MODEL": "  "}, "Model"),
    ],
)
def test_a_partial_or_invalid_setting_is_refused_by_name(
    aws: AwsResources, tmp_path: Path, secrets: dict[str, str], changes: dict[str, str], named: str
) -> None:
    env = {**environment(aws, tmp_path, secrets, "https://models.example/v1"), **changes}
    with pytest.raises(Misconfigured) as caught:
        read_config(env)
    assert len(caught.value.problems) == 1, caught.value.problems
    assert f"template parameter {named} " in caught.value.problems[0]
    assert "sk-live" not in str(caught.value)  # a value pasted in the wrong place stays out


@pytest.mark.usefixtures("fresh_handler")
def test_a_refused_configuration_is_logged_once_and_every_event_answers_503(
    aws: AwsResources,
    tmp_path: Path,
    secrets: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    create_alarms(lambda: 0)
    env = environment(aws, tmp_path, secrets, "https://models.example/v1")
    env["PERDURE_SANDBOX_URL"] = "https://sandbox.example"  # without its secret
    _set(monkeypatch, env)
    caplog.set_level(logging.DEBUG)
    body = {"type": "input", "content": "hi"}
    events: list[dict[str, Any]] = [
        url_event("POST", "/v1/actors/m1/submissions", body, token=TOKEN),
        url_event("GET", "/v1/actors/m1/conversations/1/view", token=TOKEN),
    ]
    for event in events:
        status, out = answer(handler.lambda_handler(event, context()))
        assert status == 503, out
        assert out["error"]["code"] == "misconfigured"
        assert "SandboxSecretArn" in out["error"]["message"]
    for event in (
        {"perdure": "wake", "actor": "m1", "at": 0},
        {"perdure": "request", "method": "GET", "path": "/v1/actors/m1/timers"},
        {"perdure": "sweep"},
    ):
        out = handler.lambda_handler(event, context())
        assert out["status"] == 503 and out["error"]["code"] == "misconfigured", out
    lines = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(lines) == 1, lines  # at the cold start, not per request
    assert "template parameter SandboxSecretArn" in lines[0].getMessage()
    assert "\n" not in lines[0].getMessage()
    # Nothing touched: no lease head, no item, no schedule.
    assert items(aws, "m1") == [] and aws.dynamodb.scan(TableName=aws.table)["Items"] == []
    scheduler = boto3.client("scheduler")
    assert scheduler.list_schedules(GroupName=GROUP)["Schedules"] == []


@pytest.mark.usefixtures("fresh_handler")
def test_an_unreadable_secret_is_a_refused_configuration_naming_its_parameter(
    aws: AwsResources,
    tmp_path: Path,
    secrets: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    env = environment(aws, tmp_path, secrets, "https://models.example/v1")
    missing = secrets["PERDURE_MODEL_KEY_ARN"].replace("model-key", "no-such-key")
    _set(monkeypatch, {**env, "PERDURE_MODEL_KEY_ARN": missing})
    caplog.set_level(logging.DEBUG)
    event = url_event("GET", "/v1/actors/m2/timers", token=TOKEN)
    status, out = answer(handler.lambda_handler(event, context()))
    assert status == 503 and "template parameter ModelKeyArn" in out["error"]["message"], out
    assert "ParameterNotFound" in out["error"]["message"]
    assert TOKEN not in caplog.text  # the token was read before the key failed


@pytest.mark.usefixtures("fresh_handler")
def test_the_default_factory_serves_the_configured_model_with_its_key(
    aws: AwsResources,
    tmp_path: Path,
    secrets: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    model_server: FakeOpenAI,
) -> None:
    create_alarms(lambda: 0)
    _set(monkeypatch, environment(aws, tmp_path, secrets, model_server.base_url))
    caplog.set_level(logging.DEBUG)
    reply = Stream([text("hello from the model"), finish("stop"), usage(5, 4)])
    model_server.script(reply, reply)
    for n, actor in enumerate(("d1", "d2")):  # the second on the warm container
        body = {"type": "input", "content": "hi"}
        submit = url_event("POST", f"/v1/actors/{actor}/submissions", body, token=TOKEN)
        status, out = answer(handler.lambda_handler(submit, context()))
        assert status == 202, out
        read = url_event("GET", f"/v1/actors/{actor}/submissions/{out['id']}", token=TOKEN)
        status, state = answer(handler.lambda_handler(read, context()))
        assert status == 200 and state["answer"]["text"] == "hello from the model", state
        assert len(model_server.received) == n + 1
        if n == 0:  # read once per cold start: the warm container never asks again
            boto3.client("secretsmanager").delete_secret(
                SecretId=secrets["PERDURE_API_TOKEN_ARN"], ForceDeleteWithoutRecovery=True
            )
            boto3.client("ssm").delete_parameter(Name="/perdure/model-key")
    assert isinstance(handler._function, handler.ActorFunction)
    settings = handler._function.settings
    assert isinstance(settings.actor.models, OpenAICompatibleModels)
    assert settings.actor.default_agent == {"model": "served-model"}
    seen = model_server.received[-1]
    assert seen.headers["authorization"] == f"Bearer {MODEL_KEY}"
    assert seen.body["model"] == "served-model"
    for secret in (TOKEN, MODEL_KEY):
        assert secret not in caplog.text
        assert secret not in repr(settings)


def test_the_sandbox_gives_the_agent_the_coding_tools(
    aws: AwsResources, tmp_path: Path, secrets: dict[str, str]
) -> None:
    from runtimes.aws.environment import settings_from_environment

    env = environment(aws, tmp_path, secrets, "https://models.example/v1")
    env["PERDURE_SANDBOX_URL"] = "https://sandbox.example"
    env["PERDURE_SANDBOX_SECRET_ARN"] = secrets["PERDURE_SANDBOX_SECRET_ARN"]
    settings = settings_from_environment(environ=env)
    assert settings.actor.env is not None
    tools = settings.actor.default_agent["tools"]
    assert isinstance(tools, list) and {"bash", "read", "remind"} <= set(tools)


def test_the_settings_cover_every_variable_read() -> None:
    # Every setting but the optional factory has a template parameter or resource.
    assert all(s.parameter or s.resource for s in SETTINGS)
    assert len({s.variable for s in SETTINGS}) == len(SETTINGS)
