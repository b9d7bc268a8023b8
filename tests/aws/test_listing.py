"""``GET /v1/actors`` through the Lambda handler, as ``perdure ls`` pages it: every actor
whose first commit landed, from the table's listing index, none for a refused request,
no lease taken; the operator's token only. (The kit's listing check runs on the host in
``test_host_kit.py``.)"""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path

import httpx
import pytest

from core.testing import VirtualClock
from runtimes.actor.tokens import SigningKeys
from runtimes.aws import AwsResources
from runtimes.aws.alarms import WakeSchedule
from runtimes.aws.handler import ActorFunction
from runtimes.aws.keys import ActorKeys
from runtimes.aws.lease import Lease
from runtimes.cli.history import HostClient, HostUnavailable
from tests.aws.aws_target import LeaseClock, create_alarms
from tests.aws.lambda_support import KIT_TOKEN, answer, context, function, url_event


class FunctionUrl(httpx.BaseTransport):
    """httpx requests as Function URL events, each one invocation of ``function``."""

    def __init__(self, function: ActorFunction) -> None:
        self.function = function
        self.paths: list[str] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.paths.append(str(request.url.raw_path, "ascii"))
        event = url_event(request.method, request.url.path, query=request.url.query.decode())
        event["headers"] = dict(request.headers)
        event["body"] = base64.b64encode(request.read()).decode()
        out = self.function(event, context())
        body = out.get("body", "")
        raw = base64.b64decode(body) if out.get("isBase64Encoded") else body.encode()
        return httpx.Response(out["statusCode"], headers=out.get("headers"), content=raw)


@pytest.fixture
def alarms(aws: AwsResources) -> WakeSchedule:
    return create_alarms(LeaseClock().now)


def _heads(aws: AwsResources, names: list[str]) -> list[object]:
    return [
        aws.dynamodb.get_item(TableName=aws.table, Key=ActorKeys(n).head()).get("Item")
        for n in names
    ]


def test_perdure_ls_pages_the_actors_through_the_function(
    aws: AwsResources, alarms: WakeSchedule, tmp_path: Path
) -> None:
    fn = function(aws, alarms, tmp_path, VirtualClock())
    names = [f"user-{n:02d}" for n in range(23)]
    for name in reversed(names):
        status, body = answer(
            fn(
                url_event(
                    "POST",
                    f"/v1/actors/{name}/submissions",
                    {"type": "write", "content": {"kind": "note"}},
                ),
                context(),
            )
        )
        assert status == 202, body
    # Refused after the lease was taken (no conversation 99): a head at seq 0, not listed.
    status, body = answer(
        fn(
            url_event(
                "POST",
                "/v1/actors/user-refused/submissions",
                {"type": "input", "content": "x", "conversation_id": 99},
            ),
            context(),
        )
    )
    assert status == 404, body
    before = _heads(aws, [*names, "user-refused"])
    transport = FunctionUrl(fn)
    with HostClient("https://lambda.example", KIT_TOKEN, transport=transport) as host:
        assert list(host.actors(page_size=10)) == names
    assert transport.paths == [
        "/v1/actors?limit=10",
        "/v1/actors?limit=10&after=user-09",
        "/v1/actors?limit=10&after=user-19",
    ]
    assert _heads(aws, [*names, "user-refused"]) == before  # no lease taken, nothing written


def test_only_the_operator_lists(aws: AwsResources, alarms: WakeSchedule, tmp_path: Path) -> None:
    fn = function(aws, alarms, tmp_path, VirtualClock())
    scoped = SigningKeys.for_host(KIT_TOKEN).mint("user-00", "admin", 600)
    with (
        HostClient("https://lambda.example", scoped, transport=FunctionUrl(fn)) as host,
        pytest.raises(HostUnavailable, match="403 forbidden"),
    ):
        list(host.actors())


def _write(fn: ActorFunction, actor: str) -> None:
    body = {"type": "write", "content": {"kind": "note"}}
    status, answered = answer(
        fn(url_event("POST", f"/v1/actors/{actor}/submissions", body), context())
    )
    assert status == 202, answered


def test_the_index_is_written_once_per_actor_and_fills_in_for_older_actors(
    aws: AwsResources, alarms: WakeSchedule, tmp_path: Path
) -> None:
    fn = function(aws, alarms, tmp_path, VirtualClock())
    _write(fn, "old")
    _write(fn, "new")
    # "old" as an actor committed before the index existed: its head lacks the keys.
    aws.dynamodb.update_item(
        TableName=aws.table,
        Key=ActorKeys("old").head(),
        UpdateExpression="REMOVE listing, actor",
    )
    transport = FunctionUrl(fn)
    with HostClient("https://lambda.example", KIT_TOKEN, transport=transport) as host:
        assert list(host.actors()) == ["new"]
        _write(fn, "old")  # its next commit lists it
        assert list(host.actors()) == ["new", "old"]
    lease = Lease(aws, "new", "someone", lambda: 1)
    grant = asyncio.run(lease.acquire())
    assert grant.listed and grant.seq > 0
    later = lease.fenced_update(grant.seq, grant.seq + 1)
    assert "listing" not in str(later.request["ExpressionAttributeNames"].values())
