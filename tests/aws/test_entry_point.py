"""The function's entry point as Lambda calls it: synchronous, settings built once from
the environment (the API token from Secrets Manager) by the factory PERDURE_FUNCTION
names."""

from __future__ import annotations

from pathlib import Path

import boto3
import pytest

from runtimes.actor.testing import KIT_TOKEN
from runtimes.aws import AwsResources, handler
from tests.aws.aws_target import FUNCTION_ARN, GROUP, ROLE_ARN, create_alarms
from tests.aws.lambda_support import answer, context, url_event
from tests.aws.support import head


def test_lambda_handler_serves_with_settings_from_the_environment(
    aws: AwsResources, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    create_alarms(lambda: 0)
    secrets = boto3.client("secretsmanager")
    token_arn = secrets.create_secret(Name="perdure/api-token", SecretString=KIT_TOKEN)["ARN"]
    for name, value in {
        "PERDURE_FUNCTION": "tests.aws.settings_factory:settings",
        "PERDURE_TABLE": aws.table,
        "PERDURE_BUCKET": aws.bucket,
        "PERDURE_API_TOKEN_ARN": token_arn,
        "PERDURE_SCHEDULE_GROUP": GROUP,
        "PERDURE_FUNCTION_ARN": FUNCTION_ARN,
        "PERDURE_SCHEDULER_ROLE_ARN": ROLE_ARN,
        "PERDURE_WORKDIR": str(tmp_path / "tmp"),
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(handler, "_function", None)
    body = {"type": "input", "content": "hi"}
    status, out = answer(
        handler.lambda_handler(url_event("POST", "/v1/actors/e1/submissions", body), context())
    )
    assert status == 202, out
    status, state = answer(
        handler.lambda_handler(
            url_event("GET", f"/v1/actors/e1/submissions/{out['id']}"), context()
        )
    )
    assert status == 200 and state["answer"]["text"] == "echo: hi", state
    assert int(head(aws, "e1")["seq"]) > 0 and "owner" not in head(aws, "e1")
    assert (tmp_path / "tmp" / "e1.sqlite").exists()  # the working copy stays for warm reuse
