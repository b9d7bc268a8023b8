"""Fencing through the handler: an invocation paused (mid-tool) past its lease expiry
while another invocation took the actor over — its next commit is rejected by DynamoDB,
its session is poisoned, and neither DynamoDB, S3 nor the new holder's state shows a
trace of the stale write."""

from __future__ import annotations

import asyncio
from pathlib import Path

from core.testing import VirtualClock
from runtimes.actor.testing import KitTools
from runtimes.aws import AwsResources
from runtimes.aws.lease import DEFAULT_LEASE_MS
from tests.aws.aws_target import create_alarms
from tests.aws.lambda_support import Context, answer, context, function, url_event
from tests.aws.support import head, items, objects


async def test_a_paused_invocations_commit_is_fenced_off_and_leaves_no_trace(
    aws: AwsResources, tmp_path: Path
) -> None:
    clock = VirtualClock()
    alarms = create_alarms(clock.now)
    paused = asyncio.Event()
    stale_tools = KitTools(gate=paused.wait)
    stale_ctx = Context("req-stale", remaining_ms=10_000 + 3_000)
    body = {"type": "input", "content": "tools", "request_id": "trip-1"}
    event = url_event("POST", "/v1/actors/f1/submissions", body)
    stale = asyncio.ensure_future(
        function(aws, alarms, tmp_path, clock, tools=stale_tools).invoke(event, stale_ctx)
    )
    while not {"kit_search", "kit_book", "kit_hold"} <= stale_tools.running:
        assert not stale.done(), stale.result()
        await asyncio.sleep(0.01)
    assert head(aws, "f1")["owner"] == "req-stale"
    epoch = int(head(aws, "f1")["epoch"])

    # The stale holder is frozen past its lease; the next invocation takes the actor
    # over (a new container: rebuilt from DynamoDB), reruns the safe tool, reports the
    # others interrupted and answers.
    clock.advance(DEFAULT_LEASE_MS + 1)
    fresh_tools = KitTools()
    fresh = function(aws, alarms, tmp_path, clock, tools=fresh_tools)
    status, again = answer(await fresh.invoke(event, context()))  # the client's retry
    assert status == 202, again
    assert int(head(aws, "f1")["epoch"]) == epoch + 1
    path = f"/v1/actors/f1/submissions/{again['id']}"
    status, state = answer(await fresh.invoke(url_event("GET", path), context()))
    assert status == 200 and state["status"] == "done", state
    assert fresh_tools.runs["kit_search"] == 1  # the safe one reran; the others did not
    assert fresh_tools.runs["kit_book"] == fresh_tools.runs["kit_hold"] == 0
    status, committed = answer(
        await fresh.invoke(url_event("GET", "/v1/actors/f1/conversations/1/view"), context())
    )
    assert status == 200
    stored, stored_objects = items(aws, "f1"), objects(aws)

    # The stale invocation thaws: its tools finish and it tries to commit their results.
    paused.set()
    status, out = answer(await asyncio.wait_for(stale, 30))
    assert status == 202, out  # its answer was the admission, made while it held the lease
    # Rejected by the fence: nothing it wrote after losing the lease is anywhere.
    assert items(aws, "f1") == stored
    assert objects(aws) == stored_objects
    status, view = answer(
        await function(aws, alarms, tmp_path, clock).invoke(
            url_event("GET", "/v1/actors/f1/conversations/1/view"), context()
        )
    )
    assert status == 200 and view == committed
    results = [e for e in view["entries"] if e["kind"] == "tool_result"]
    assert len(results) == 3, results  # one per call: the new holder's, none stale
