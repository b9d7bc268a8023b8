"""Crashes through the Lambda handler: a container process running the real entry point
on a moto server (``ThreadedMotoServer`` on 127.0.0.1) is SIGKILLed mid-tool, or right
before or after the DynamoDB transaction that makes its commits durable before the
unsafe tool runs; a new container (a fresh ``/tmp``) rebuilds exactly the durable state
and finishes the work — the seed scenario: search reruns (safe), book runs once or is
reported interrupted (unsafe), ``job-42`` is answered once."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import boto3
import pytest

from core.storage import EntryQuery
from runtimes.actor.clock import SystemClock
from runtimes.aws import AwsResources, open_actor_replica
from runtimes.aws.lease import DEFAULT_LEASE_MS
from tests.aws.aws_target import FUNCTION_ARN, GROUP, ROLE_ARN, create_alarms
from tests.aws.conftest import BUCKET, REGION, TABLE
from tests.aws.support import container, head

ROOT = Path(__file__).resolve().parents[3]
TOKEN = "crash-token-0123456789abcdef"
ACTOR = "seed"
TASK = "Find a train to Graz and book it"
TAKEOVER_MS = DEFAULT_LEASE_MS + 1_000  # the second container comes after the lease ran out


def _submit() -> str:
    body = json.dumps({"type": "input", "content": TASK, "request_id": "job-42"})
    return json.dumps(_url("POST", f"/v1/actors/{ACTOR}/submissions", body))


def _get(path: str) -> str:
    return json.dumps(_url("GET", f"/v1/actors/{ACTOR}{path}", ""))


def _url(method: str, path: str, body: str) -> dict[str, Any]:
    return {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": path,
        "rawQueryString": "",
        "headers": {"authorization": f"Bearer {TOKEN}", "content-type": "application/json"},
        "requestContext": {"http": {"method": method, "path": path, "sourceIp": "127.0.0.1"}},
        "body": body,
        "isBase64Encoded": False,
    }


def _start(
    moto_server: str,
    workdir: Path,
    log: Path,
    events: list[str],
    *,
    owner: str,
    offset_ms: int = 0,
    kill_after: int | None = None,
    kill_before: int | None = None,
) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "AWS_ENDPOINT_URL": moto_server,
        "PERDURE_FUNCTION": "tests.recovery.aws.handler_crash_child:settings",
        "PERDURE_TABLE": TABLE,
        "PERDURE_BUCKET": BUCKET,
        "PERDURE_API_TOKEN_ARN": _token_arn(moto_server),
        "PERDURE_SCHEDULE_GROUP": GROUP,
        "PERDURE_FUNCTION_ARN": FUNCTION_ARN,
        "PERDURE_SCHEDULER_ROLE_ARN": ROLE_ARN,
        "PERDURE_WORKDIR": str(workdir),
        "CRASH_LOG": str(log),
        "CRASH_OWNER": owner,
        "CRASH_LEASE_OFFSET_MS": str(offset_ms),
    }
    if kill_after is not None:
        env["CRASH_KILL_AFTER_TRANSACTION"] = str(kill_after)
    if kill_before is not None:
        env["CRASH_KILL_BEFORE_TRANSACTION"] = str(kill_before)
    return subprocess.Popen(
        [sys.executable, "-u", "-m", "tests.recovery.aws.handler_crash_child", *events],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _token_arn(moto_server: str) -> str:
    """The API token's secret in the moto server (made on first use: each test resets)."""
    client = boto3.client("secretsmanager", region_name=REGION, endpoint_url=moto_server)
    try:
        return str(client.describe_secret(SecretId="perdure/api-token")["ARN"])
    except client.exceptions.ResourceNotFoundException:
        return str(client.create_secret(Name="perdure/api-token", SecretString=TOKEN)["ARN"])


def _effects(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def _said(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def _body(response: dict[str, Any]) -> Any:
    return json.loads(response["body"])


async def _committed_state(aws: AwsResources, tmp: Path) -> tuple[int, list[Any], list[Any]]:
    """What a fresh /tmp rebuilds from DynamoDB and S3 alone: its seq, the root's
    entries and the job-42 submission (opened under a lease taken after the dead one's,
    then released)."""
    clock = SystemClock()
    replica = await open_actor_replica(
        aws, ACTOR, owner="inspector", now=lambda: clock.now() + TAKEOVER_MS, workdir=container(tmp)
    )
    try:
        assert replica.origin == "rebuilt"
        if replica.storage.seq == 0:  # nothing durable: no actor
            return 0, [], [None]
        entries = (await replica.storage.scan_entries(EntryQuery(1, order="asc"))).items
        job = await replica.storage.submission_by_request(1, "job-42")
        return replica.storage.seq, [(e.id, e.kind) for e in entries], [job]
    finally:
        await replica.close()


def _finish(moto_server: str, tmp: Path, log: Path) -> list[dict[str, Any]]:
    """The next container: re-submits job-42 (the client's retry), then reads the view."""
    second = _start(
        moto_server,
        container(tmp),
        log,
        [_submit(), _get("/conversations/1/view")],
        owner="next",
        offset_ms=TAKEOVER_MS,
    )
    out, err = second.communicate(timeout=90)
    assert second.returncode == 0, err
    return _said(out)


def _assert_outcome(
    said: list[dict[str, Any]],
    job_id: int | None,
    log: Path,
    effects: dict[str, int | set[int]],
    *,
    book: str,
) -> None:
    """The next container answered job-42 once (the original submission when it was
    durable); the model saw the search's result and the booking ``interrupted`` or
    ``ok``; the tools ran as ``effects`` counts (a set: any of those)."""
    submitted, viewed = [s["response"] for s in said if "response" in s]
    assert submitted["statusCode"] == 202, submitted
    if job_id is not None:
        assert _body(submitted)["id"] == job_id  # job-42 answered the original submission
    (saw,) = [s["model_saw"] for s in said if "model_saw" in s]
    by_tool = {r["tool"]: r for r in saw}
    assert by_tool["search"] == {
        "tool": "search",
        "error": False,
        "content": "Train IC 511 Vienna-Graz departs 10:02",
    }
    if book == "interrupted":
        assert by_tool["book"]["error"]
        assert "Tool book was interrupted and may have partially run" in by_tool["book"]["content"]
    else:
        assert by_tool["book"] == {
            "tool": "book",
            "error": False,
            "content": "Booked a seat on IC 511",
        }
    view = _body(viewed)
    users = [e for e in view["entries"] if e["kind"] == "user"]
    assert len(users) == 1, users  # deduped: one input
    assert view["entries"][-1]["kind"] == "assistant"
    found = _effects(log)
    for line, count in effects.items():
        assert found.count(line) in (count if isinstance(count, set) else {count}), found


@pytest.fixture
def alarms_group(aws_http: AwsResources, moto_server: str) -> None:
    create_alarms(SystemClock().now, moto_server)


@pytest.mark.usefixtures("alarms_group")
async def test_a_handler_killed_mid_tool_is_finished_by_the_next_container(
    aws_http: AwsResources, moto_server: str, tmp_path: Path
) -> None:
    log = tmp_path / "effects.log"
    first = _start(moto_server, container(tmp_path), log, [_submit()], owner="doomed")
    started = time.monotonic()
    while not {"search start", "book start"} <= set(_effects(log)):
        assert time.monotonic() - started < 30 and first.poll() is None, first.stderr
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.5)  # inside both tools (each takes 2 s)
    first.send_signal(signal.SIGKILL)
    assert first.wait(10) == -signal.SIGKILL
    first.communicate()
    assert sorted(_effects(log)) == ["book start", "search start"]
    assert head(aws_http, ACTOR)["owner"] == "doomed-0"  # died holding the lease

    seq, entries, [job] = await _committed_state(aws_http, tmp_path)
    assert seq == int(head(aws_http, ACTOR)["seq"])
    assert [kind for _, kind in entries] == ["user", "assistant"]  # the calls' intent
    assert job is not None and job.status not in ("done", "unanswered")
    seed = {"search start": 2, "search end": 1, "book start": 1, "book end": 0}
    _assert_outcome(_finish(moto_server, tmp_path, log), job.id, log, seed, book="interrupted")


# The handler defers its commits and makes them durable in one transaction (a flush)
# where it must: before the unsafe ``book`` runs (its intent must be durable first), and
# when it lets the actor go. So the first transaction of a job-42 invocation carries the
# root, the admission, the round (both calls, search's intent riding in it) and book's
# intent; search (safe) may already run while it is sent. Keyed by (when, transaction):
KILL_POINTS: dict[tuple[str, int], tuple[list[str], dict[str, int | set[int]], str]] = {
    # Nothing is durable (the working copy was ahead): the next container accepts
    # job-42 anew and runs both tools once; the first may have started search only.
    ("before", 1): (
        [],
        {"search start": {1, 2}, "search end": 1, "book start": 1, "book end": 1},
        "ok",
    ),
    # Both calls' intent is durable, book never started: search reruns, book is
    # reported interrupted (its intent was durable, so it may have run), not run.
    ("after", 1): (
        ["user", "assistant"],
        {"search start": {1, 2}, "search end": 1, "book start": 0},
        "interrupted",
    ),
}


@pytest.mark.parametrize("point", sorted(KILL_POINTS), ids=lambda p: f"{p[0]}-{p[1]}")
@pytest.mark.usefixtures("alarms_group")
async def test_a_handler_killed_around_its_flush_is_rebuilt_exactly(
    point: tuple[str, int], aws_http: AwsResources, moto_server: str, tmp_path: Path
) -> None:
    when, transaction = point
    log = tmp_path / "effects.log"
    first = _start(
        moto_server,
        container(tmp_path),
        log,
        [_submit()],
        owner="doomed",
        **{f"kill_{when}": transaction},  # type: ignore[arg-type]
    )
    out, err = first.communicate(timeout=60)
    assert first.returncode == -signal.SIGKILL, err
    assert {"durable" if when == "after" else "not_durable": transaction} in _said(out)
    assert "book start" not in _effects(log)  # killed before the unsafe tool could start
    # What a fresh /tmp rebuilds is what DynamoDB has, whatever the dead copy applied.
    seq, entries, [job] = await _committed_state(aws_http, tmp_path)
    assert seq == int(head(aws_http, ACTOR)["seq"])
    kinds, effects, book = KILL_POINTS[point]
    assert [kind for _, kind in entries] == kinds
    if kinds:
        assert job is not None and job.status not in ("done", "unanswered")
    else:
        assert job is None and seq == 0
    job_id = None if job is None else job.id
    _assert_outcome(_finish(moto_server, tmp_path, log), job_id, log, effects, book=book)
