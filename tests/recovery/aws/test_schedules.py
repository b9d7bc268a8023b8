"""A recurring schedule on the AWS host through the real Lambda handler on a moto server
(issue 34): the actor's one EventBridge schedule is armed at the occurrence; the wake it
delivers is SIGKILLed right before or right after the one DynamoDB transaction its
deferred commits go out in (the occurrence admitted, answered and the lease released);
a container after the lease ran out takes the same wake again: the occurrence is
submitted exactly once and answered, and the actor's schedule is re-armed at the next
occurrence."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import boto3
import pytest

from runtimes.actor.clock import SystemClock
from runtimes.aws import AwsResources
from runtimes.aws.alarms import schedule_name, wake_event
from runtimes.aws.lease import DEFAULT_LEASE_MS
from tests.aws.aws_target import GROUP, create_alarms
from tests.aws.conftest import REGION
from tests.recovery.aws.test_approvals import ACTOR, A, body, event, run
from tests.recovery.aws.test_handler_crash import _url

HOUR = 3600 * 1000
pytestmark = [pytest.mark.timeout(180), pytest.mark.usefixtures("alarms_group")]


@pytest.fixture
def alarms_group(aws_http: AwsResources, moto_server: str) -> None:
    create_alarms(SystemClock().now, moto_server)


def _armed(moto_server: str) -> dict[str, object]:
    scheduler = boto3.client("scheduler", region_name=REGION, endpoint_url=moto_server)
    schedule = scheduler.get_schedule(Name=schedule_name(ACTOR), GroupName=GROUP)
    armed: dict[str, object] = json.loads(schedule["Target"]["Input"])
    return armed


# The second case (after the transaction) is in the slow run: each costs ~20 s.
@pytest.mark.parametrize("when", ["before", pytest.param("after", marks=pytest.mark.slow)])
def test_a_wake_killed_around_the_occurrence_s_commit_submits_it_once(
    aws_http: AwsResources, moto_server: str, tmp_path: Path, when: str
) -> None:
    path = f"{A}/conversations/1/schedules"
    hello = {"type": "input", "content": "hello"}
    schedule = {"message": "hourly report", "every": "1h", "request_id": "hourly"}
    rc, (accepted, made) = run(
        moto_server,
        tmp_path,
        [event("POST", f"{A}/submissions", hello), event("POST", path, schedule)],
        owner="first",
    )
    assert rc == 0 and accepted["statusCode"] == 202 and made["statusCode"] == 201, made
    due = body(made)["next_at"]
    wake = _armed(moto_server)
    assert wake == wake_event(ACTOR, due)  # the actor's one schedule: the occurrence

    # The Scheduler delivers the wake; the container dies after a DynamoDB transaction.
    rc, _ = run(
        moto_server,
        tmp_path,
        [json.dumps(wake)],
        owner="doomed",
        offset_ms=HOUR + 1_000,
        **{f"kill_{when}": 1},  # type: ignore[arg-type]
    )
    assert rc == -signal.SIGKILL
    # The wake again (the Scheduler retries, or the re-arm sweep), after the lease ran
    # out: the occurrence is submitted once and answered, the next one armed.
    late = HOUR + DEFAULT_LEASE_MS + 60_000
    request_id = f"schedule:{body(made)['id']}:{due}"
    by_request = json.dumps(
        {
            **_url("GET", f"{A}/conversations/1/submissions/by-request", ""),
            "rawQueryString": f"request_id={request_id}&wait=20",
        }
    )
    rc, (woken, state, listed) = run(
        moto_server,
        tmp_path,
        [json.dumps(wake), by_request, event("GET", path)],
        owner="again",
        offset_ms=late,
    )
    assert rc == 0, woken
    answered = body(state)
    assert answered["status"] == "done", answered
    assert answered["answer"]["text"] == "echo: hourly report", answered
    (listed_one,) = body(listed)["schedules"]
    assert listed_one["fired"] == 1 and listed_one["next_at"] == due + HOUR, listed_one
    rc, (page,) = run(
        moto_server,
        tmp_path,
        [event("GET", f"{A}/conversations/1/submissions")],
        owner="reader",
        offset_ms=late,
    )
    occurrences = [
        s for s in body(page)["submissions"] if (s["request_id"] or "").startswith("schedule:")
    ]
    assert [s["request_id"] for s in occurrences] == [request_id], occurrences
    assert _armed(moto_server) == wake_event(ACTOR, due + HOUR)
