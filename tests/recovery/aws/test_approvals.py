"""Tool approvals on the AWS host through the real Lambda handler on a moto server
(issue 34): a container is SIGKILLed right after the call's question became durable;
hours later a new container takes an approval
over the API: the tool runs once, the run answers, a second, different decision is
refused with nothing written. An expiring approval arms the actor's one schedule at its
deadline; the wake that schedule delivers, with no request, denies it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import boto3
import pytest

from runtimes.actor.clock import SystemClock
from runtimes.aws import AwsResources
from runtimes.aws.alarms import schedule_name, wake_event
from tests.aws.aws_target import FUNCTION_ARN, GROUP, ROLE_ARN, create_alarms
from tests.aws.conftest import BUCKET, REGION, TABLE
from tests.aws.support import container, head
from tests.recovery.aws.test_handler_crash import _token_arn, _url

ROOT = Path(__file__).resolve().parents[3]
ACTOR = "ann"
A = f"/v1/actors/{ACTOR}"
HOURS = 5 * 3600 * 1000
# The first container dies right after its first DynamoDB transaction: the handler
# defers its commits to it (the input, the round with the call, the call parked for a
# decision), sent as it parks the actor, with the lease's release in the same write.
ASKED = 1
pytestmark = [pytest.mark.timeout(180), pytest.mark.usefixtures("alarms_group")]


@pytest.fixture
def alarms_group(aws_http: AwsResources, moto_server: str) -> None:
    create_alarms(SystemClock().now, moto_server)


def event(method: str, path: str, body: Any = None) -> str:
    return json.dumps(_url(method, path, json.dumps(body) if body is not None else ""))


def run(
    moto: str,
    tmp: Path,
    events: list[str],
    *,
    owner: str,
    offset_ms: int = 0,
    kill_after: int | None = None,
    kill_before: int | None = None,
) -> tuple[int, list[Any]]:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "AWS_ENDPOINT_URL": moto,
        "PERDURE_FUNCTION": "tests.recovery.aws.approval_child:settings",
        "PERDURE_TABLE": TABLE,
        "PERDURE_BUCKET": BUCKET,
        "PERDURE_API_TOKEN_ARN": _token_arn(moto),
        "PERDURE_SCHEDULE_GROUP": GROUP,
        "PERDURE_FUNCTION_ARN": FUNCTION_ARN,
        "PERDURE_SCHEDULER_ROLE_ARN": ROLE_ARN,
        "PERDURE_WORKDIR": str(container(tmp)),
        "CRASH_OWNER": owner,
        "CRASH_CLOCK_OFFSET_MS": str(offset_ms),
    }
    if kill_after is not None:
        env["CRASH_KILL_AFTER_TRANSACTION"] = str(kill_after)
    if kill_before is not None:
        env["CRASH_KILL_BEFORE_TRANSACTION"] = str(kill_before)
    done = subprocess.run(
        [sys.executable, "-u", "-m", "tests.recovery.aws.approval_child", *events],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    said = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert done.returncode in (0, -signal.SIGKILL), done.stderr
    return done.returncode, [s["response"] for s in said if "response" in s]


def body(response: dict[str, Any]) -> Any:
    return json.loads(response["body"])


def test_an_approval_after_the_holder_is_killed_and_hours_pass_runs_the_tool_once(
    aws_http: AwsResources, moto_server: str, tmp_path: Path
) -> None:
    effects = tmp_path / "effects.txt"
    submit = {"type": "input", "content": f"guard:{effects}", "request_id": "job-1"}
    rc, _ = run(
        moto_server,
        tmp_path,
        [event("POST", f"{A}/submissions", submit)],
        owner="doomed",
        kill_after=ASKED,
    )
    assert rc == -signal.SIGKILL
    assert "owner" not in head(aws_http, ACTOR)  # the question became durable as it let go
    assert not effects.exists()

    by_request = f"{A}/conversations/1/submissions/by-request"
    rc, (listed,) = run(
        moto_server, tmp_path, [event("GET", f"{A}/approvals")], owner="next", offset_ms=HOURS
    )
    assert listed["statusCode"] == 200, listed
    (one,) = body(listed)["approvals"]
    assert one["tool"] == "guarded" and one["arguments"] == {"path": str(effects)}
    decide = f"{A}/approvals/{one['id']}"
    by_request_event = json.dumps(
        {**_url("GET", by_request, ""), "rawQueryString": "request_id=job-1"}
    )
    rc, (approved, state) = run(
        moto_server,
        tmp_path,
        [event("POST", decide, {"decision": "approve"}), by_request_event],
        owner="later",
        offset_ms=HOURS + 60_000,
    )
    assert rc == 0
    assert approved["statusCode"] == 200, approved
    answered = body(state)
    assert answered["status"] == "done", answered
    assert answered["answer"]["text"].startswith("guarded finished")
    assert effects.read_text() == "ran\n"
    seq = head(aws_http, ACTOR)["seq"]
    rc, (other,) = run(
        moto_server,
        tmp_path,
        [event("POST", decide, {"decision": "deny"})],
        owner="last",
        offset_ms=HOURS + 120_000,
    )
    assert other["statusCode"] == 409 and body(other)["error"]["code"] == "approval_decided"
    assert head(aws_http, ACTOR)["seq"] == seq  # nothing written
    assert effects.read_text() == "ran\n"


def test_an_expiring_approval_is_denied_by_its_scheduled_wake(
    aws_http: AwsResources, moto_server: str, tmp_path: Path
) -> None:
    effects = tmp_path / "effects.txt"
    submit = {"type": "input", "content": f"expire:{effects}", "request_id": "job-1"}
    rc, (accepted, listed) = run(
        moto_server,
        tmp_path,
        [event("POST", f"{A}/submissions", submit), event("GET", f"{A}/approvals")],
        owner="first",
    )
    assert rc == 0 and accepted["statusCode"] == 202, accepted
    (one,) = body(listed)["approvals"]
    scheduler = boto3.client("scheduler", region_name=REGION, endpoint_url=moto_server)
    schedule = scheduler.get_schedule(Name=schedule_name(ACTOR), GroupName=GROUP)
    target = json.loads(schedule["Target"]["Input"])
    assert target == wake_event(ACTOR, one["expires_at"])  # the one schedule: the deadline
    by_request = json.dumps(
        {
            **_url("GET", f"{A}/conversations/1/submissions/by-request", ""),
            "rawQueryString": "request_id=job-1",
        }
    )
    # The Scheduler delivers the wake hours late; no request about the approval comes.
    rc, (woken,) = run(moto_server, tmp_path, [json.dumps(target)], owner="woken", offset_ms=HOURS)
    assert rc == 0, woken
    rc, (state,) = run(moto_server, tmp_path, [by_request], owner="reader", offset_ms=HOURS)
    answered = body(state)
    assert answered["status"] == "done" and "expired" in answered["answer"]["text"], answered
    assert not effects.exists()
