"""``GET /v1/actors`` through the Lambda handler, as ``perdure ls`` pages it (with
:class:`~runtimes.client.ActorClient`): every actor whose first commit landed, from the
table's listing index, none for a refused request, no lease taken; the operator's token
only. (The kit's listing check runs on the host in ``test_host_kit.py``.)"""

from __future__ import annotations

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
from runtimes.client import ActorClient, RequestRefused
from tests.aws.aws_target import LambdaTransport, LeaseClock, create_alarms
from tests.aws.lambda_support import KIT_TOKEN, answer, context, function, url_event

URL = "https://lambda.example"


class FunctionUrl(LambdaTransport):
    """Function URL invocations of ``function``, noting each path and query asked."""

    def __init__(self, function: ActorFunction) -> None:
        super().__init__(function)
        self.paths: list[str] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.paths.append(str(request.url.raw_path, "ascii"))
        return await super().handle_async_request(request)


@pytest.fixture
def alarms(aws: AwsResources) -> WakeSchedule:
    return create_alarms(LeaseClock().now)


def _heads(aws: AwsResources, names: list[str]) -> list[object]:
    return [
        aws.dynamodb.get_item(TableName=aws.table, Key=ActorKeys(n).head()).get("Item")
        for n in names
    ]


async def test_perdure_ls_pages_the_actors_through_the_function(
    aws: AwsResources, alarms: WakeSchedule, tmp_path: Path
) -> None:
    fn = function(aws, alarms, tmp_path, VirtualClock())
    names = [f"user-{n:02d}" for n in range(23)]
    for name in reversed(names):
        status, body = answer(
            await fn.invoke(
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
        await fn.invoke(
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
    async with ActorClient(URL, KIT_TOKEN, transport=transport, page_size=10) as client:
        assert [name async for name in client.actors()] == names
    assert transport.paths == [
        "/v1/actors?limit=10",
        "/v1/actors?limit=10&after=user-09",
        "/v1/actors?limit=10&after=user-19",
    ]
    assert _heads(aws, [*names, "user-refused"]) == before  # no lease taken, nothing written


async def test_only_the_operator_lists(
    aws: AwsResources, alarms: WakeSchedule, tmp_path: Path
) -> None:
    fn = function(aws, alarms, tmp_path, VirtualClock())
    scoped = SigningKeys.for_host(KIT_TOKEN).mint("user-00", "admin", 600)
    async with ActorClient(URL, scoped, transport=FunctionUrl(fn)) as client:
        with pytest.raises(RequestRefused) as refused:
            [name async for name in client.actors()]
    assert (refused.value.status, refused.value.code) == (403, "forbidden")


async def _write(fn: ActorFunction, actor: str) -> None:
    body = {"type": "write", "content": {"kind": "note"}}
    status, answered = answer(
        await fn.invoke(url_event("POST", f"/v1/actors/{actor}/submissions", body), context())
    )
    assert status == 202, answered


async def test_the_index_is_written_once_per_actor_and_fills_in_for_older_actors(
    aws: AwsResources, alarms: WakeSchedule, tmp_path: Path
) -> None:
    fn = function(aws, alarms, tmp_path, VirtualClock())
    await _write(fn, "old")
    await _write(fn, "new")
    # "old" as an actor committed before the index existed: its head lacks the keys.
    aws.dynamodb.update_item(
        TableName=aws.table,
        Key=ActorKeys("old").head(),
        UpdateExpression="REMOVE listing, actor",
    )
    async with ActorClient(URL, KIT_TOKEN, transport=FunctionUrl(fn)) as client:
        assert [name async for name in client.actors()] == ["new"]
        await _write(fn, "old")  # its next commit lists it
        assert [name async for name in client.actors()] == ["new", "old"]
    lease = Lease(aws, "new", "someone", lambda: 1)
    grant = await lease.acquire()
    assert grant.listed and grant.seq > 0
    later = lease.fenced_update(grant.seq, grant.seq + 1)
    assert "listing" not in str(later.request["ExpressionAttributeNames"].values())
