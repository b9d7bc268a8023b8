"""Scoped tokens at the Lambda handler (moto): a token for one actor is decided by the
app's middleware before any route runs, so a refused request takes no lease and writes
no item, object or working copy."""

from __future__ import annotations

import json
from pathlib import Path

import boto3
import pytest

from core.testing import VirtualClock
from runtimes.actor.testing import KIT_TOKEN, kit_config
from runtimes.actor.tokens import SigningKeys
from runtimes.aws import AwsResources
from runtimes.aws.alarms import WakeSchedule
from runtimes.aws.config import Misconfigured
from runtimes.aws.environment import settings_from_environment
from tests.aws.aws_target import create_alarms
from tests.aws.lambda_support import answer, context, function, url_event
from tests.aws.support import items
from tests.hosts.scope_sweep import bad_tokens, openapi_routes, sweep_read_token

KEYS = SigningKeys.for_host(KIT_TOKEN)


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock()


@pytest.fixture
def alarms(aws: AwsResources, clock: VirtualClock) -> WakeSchedule:
    return create_alarms(clock.now)


def _objects(aws: AwsResources, actor: str) -> list[str]:
    listed = aws.s3.list_objects_v2(Bucket=aws.bucket)
    return [o["Key"] for o in listed.get("Contents", []) if actor in o["Key"]]


def _files_of(tmp: Path, actor: str) -> list[Path]:
    """The containers' working copies (and anything else) named after ``actor``."""
    return [p for p in tmp.rglob("*") if actor in p.name]


async def test_a_read_token_reaches_its_actor_only_and_takes_no_other_lease(
    aws: AwsResources, alarms: WakeSchedule, clock: VirtualClock, tmp_path: Path
) -> None:
    fn = function(aws, alarms, tmp_path, clock)
    created = answer(
        await fn.invoke(
            url_event("POST", "/v1/actors/alice/submissions", {"type": "input", "content": "hi"}),
            context(),
        )
    )
    assert created[0] == 202, created
    status, document = answer(await fn.invoke(url_event("GET", "/openapi.json"), context()))
    assert status == 200

    async def send(method: str, path: str, headers: dict[str, str], body: bytes | None) -> int:
        token = headers["authorization"].removeprefix("Bearer ")
        payload = None if body is None else json.loads(body)
        status, _ = answer(
            await fn.invoke(url_event(method, path, payload, token=token), context())
        )
        return status

    problems, sent = await sweep_read_token(
        send, openapi_routes(document), KEYS, actor="alice", other="bob", streams=False
    )
    assert problems == []
    assert sent >= 35
    assert items(aws, "bob") == [] and _objects(aws, "bob") == []
    assert _files_of(tmp_path, "bob") == []


@pytest.mark.parametrize("kind", ["expired", "tampered", "other key", "other actor", "truncated"])
async def test_a_bad_token_is_refused_before_the_lease(
    aws: AwsResources, alarms: WakeSchedule, clock: VirtualClock, tmp_path: Path, kind: str
) -> None:
    fn = function(aws, alarms, tmp_path, clock)
    token = bad_tokens(KEYS, "carol", "bob")[kind]
    event = url_event(
        "POST", "/v1/actors/carol/submissions", {"type": "input", "content": "hi"}, token=token
    )
    status, body = answer(await fn.invoke(event, context()))
    assert status == (403 if kind == "other actor" else 401), body
    assert items(aws, "carol") == [] and _objects(aws, "carol") == []
    assert _files_of(tmp_path, "carol") == []


async def test_a_submit_token_submits_through_the_handler(
    aws: AwsResources, alarms: WakeSchedule, clock: VirtualClock, tmp_path: Path
) -> None:
    fn = function(aws, alarms, tmp_path, clock)
    token = KEYS.mint("dave", "submit", 60)
    body = {"type": "input", "content": "hello"}
    status, accepted = answer(
        await fn.invoke(
            url_event("POST", "/v1/actors/dave/submissions", body, token=token), context()
        )
    )
    assert status == 202, accepted
    status, state = answer(
        await fn.invoke(
            url_event("GET", f"/v1/actors/dave/submissions/{accepted['id']}", token=token),
            context(),
        )
    )
    assert status == 200 and state["answer"]["text"] == "echo: hello", state


def test_the_environment_sets_the_signing_keys_and_the_cors_allow_list(
    aws: AwsResources, tmp_path: Path
) -> None:
    manager = boto3.client("secretsmanager")
    token = manager.create_secret(Name="perdure/api-token", SecretString=KIT_TOKEN)["ARN"]
    keys = "new-key-0123456789abcdef, old-key-0123456789abcdef"
    keys_arn = manager.create_secret(Name="perdure/token-keys", SecretString=keys)["ARN"]
    environ = {
        "PERDURE_TABLE": aws.table,
        "PERDURE_BUCKET": aws.bucket,
        "PERDURE_API_TOKEN_ARN": token,
        "PERDURE_SCHEDULE_GROUP": "g",
        "PERDURE_FUNCTION_ARN": "arn:aws:lambda:us-east-1:123456789012:function:f",
        "PERDURE_SCHEDULER_ROLE_ARN": "arn:aws:iam::123456789012:role/r",
        "PERDURE_WORKDIR": str(tmp_path / "w"),
        "PERDURE_TOKEN_KEYS_ARN": keys_arn,
        "PERDURE_CORS_ORIGINS": "https://app.example.com",
    }
    api = settings_from_environment(kit_config(), environ).api
    assert api.signing_keys == ("new-key-0123456789abcdef", "old-key-0123456789abcdef")
    assert api.cors_origins == ("https://app.example.com",)
    # Unset (as the template leaves them when its parameters are empty): derived, no CORS.
    environ |= {"PERDURE_TOKEN_KEYS_ARN": "", "PERDURE_CORS_ORIGINS": ""}
    plain = settings_from_environment(kit_config(), environ).api
    assert plain.signing_keys == () and plain.cors_origins == ()
    with pytest.raises(Misconfigured, match="template parameter CorsOrigins"):
        settings_from_environment(kit_config(), {**environ, "PERDURE_CORS_ORIGINS": "*"})
    short = manager.create_secret(Name="perdure/short-keys", SecretString="short")["ARN"]
    with pytest.raises(Misconfigured, match="template parameter TokenKeysArn") as refused:
        settings_from_environment(kit_config(), {**environ, "PERDURE_TOKEN_KEYS_ARN": short})
    assert "short" not in str(refused.value).replace("short-keys", "")


async def test_the_host_token_mints_a_token_through_the_handler(
    aws: AwsResources, alarms: WakeSchedule, clock: VirtualClock, tmp_path: Path
) -> None:
    fn = function(aws, alarms, tmp_path, clock)
    body = {"actor": "erin", "rights": "read", "ttl_s": 300}
    status, minted = answer(await fn.invoke(url_event("POST", "/v1/tokens", body), context()))
    assert status == 201, minted
    assert KEYS.verify(minted["token"]).actor == "erin"
    assert items(aws, "erin") == []  # minting opens no actor
