"""What a tool round costs on AWS, pinned so it cannot grow back (issue 36), and the
rules that let a park leave the Scheduler alone without losing a wake (invariant 15).

The counts come from :func:`tests.bench.edge_aws.measure`: botocore hooks on the real
clients against moto. Targets reached: 0 Scheduler calls in a round whose earliest
deadline did not change; <= 2 transactions / 12 WRU (safe) and <= 3 / 20 (unsafe) — the
handler groups an invocation's commits (one transaction when the invocation lets the
actor go, releasing the lease in it, plus one before an unsafe tool runs). The ceilings
below are today's counts, tighter than the targets, so a regression shows at once.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from moto import mock_aws

from core.testing import VirtualClock
from runtimes.aws import AwsResources, Lease
from runtimes.aws.alarms import schedule_name, wake_event
from tests.aws.aws_target import create_alarms
from tests.aws.lambda_support import answer, context, function, url_event
from tests.bench.edge_aws import count_calls, measure

MINUTE = 60_000


@pytest.mark.parametrize(
    ("tool", "transactions", "wru", "dynamodb_calls"),
    [("safe", 1, 7, 4), ("unsafe", 2, 13, 5)],
)
async def test_a_tool_round_makes_no_scheduler_call_and_no_more_writes_than_today(
    tool: str, transactions: int, wru: int, dynamodb_calls: int
) -> None:
    with mock_aws():
        cost = await measure(tool, rounds=3, actors=1)  # type: ignore[arg-type]
    assert cost["scheduler_calls"] == 0, cost  # the deadline stays None: nothing to arm
    assert cost["s3_calls"] == 0, cost
    assert cost["transactions"] <= transactions, cost
    assert cost["wru"] <= wru, cost
    assert cost["dynamodb_calls"] <= dynamodb_calls, cost


async def test_the_armed_wake_is_trusted_only_from_the_holder_just_before(
    aws: AwsResources,
) -> None:
    clock = VirtualClock()
    first = Lease(aws, "a1", "owner-a", clock.now, duration_ms=MINUTE)
    grant = await first.acquire()
    assert not grant.armed_known  # nobody recorded a schedule yet
    first.record_armed(1234)
    await first.release()

    second = Lease(aws, "a1", "owner-b", clock.now, duration_ms=MINUTE)
    grant = await second.acquire()
    assert (grant.armed, grant.armed_known) == (1234, True)
    # owner-b dies holding the lease (after arming something else, say): no release.
    second.record_armed(None)
    clock.advance(2 * MINUTE)

    third = Lease(aws, "a1", "owner-c", clock.now, duration_ms=MINUTE)
    grant = await third.acquire()
    assert not grant.armed_known  # the crashed holder's schedule is unknown: arm anew
    await third.release()  # released without arming (the Scheduler refused, say)

    fourth = Lease(aws, "a1", "owner-d", clock.now, duration_ms=MINUTE)
    assert not (await fourth.acquire()).armed_known


async def test_a_park_skips_the_scheduler_only_while_the_armed_deadline_stands(
    aws: AwsResources, tmp_path: Path
) -> None:
    clock = VirtualClock()
    alarms = create_alarms(clock.now)
    calls: Counter[str] = Counter()
    count_calls(calls, alarms.scheduler, "scheduler")
    fn = function(aws, alarms, tmp_path, clock)
    actor = "sk1"

    async def submit(path: str, body: dict[str, object]) -> Any:
        status, out = answer(await fn.invoke(url_event("POST", path, body), context()))
        assert status in (201, 202), out
        return out

    await submit(f"/v1/actors/{actor}/submissions", {"type": "input", "content": "hello"})
    reminder = await submit(
        f"/v1/actors/{actor}/conversations/1/reminders", {"message": "ping", "after": 300}
    )
    assert alarms.armed(actor) == reminder["at"]  # the deadline changed: armed
    calls.clear()
    await submit(f"/v1/actors/{actor}/submissions", {"type": "input", "content": "again"})
    assert sum(calls.values()) == 0, calls  # same deadline: the schedule is left alone
    assert alarms.armed(actor) == reminder["at"]

    # A schedule that fired deleted itself: the wake it delivered arms again, even for
    # the deadline the previous holder recorded (here: a mailer's early wake).
    alarms.scheduler.delete_schedule(Name=schedule_name(actor), GroupName=alarms.group)
    out = await fn.invoke(wake_event(actor, clock.now()), context())
    assert out["status"] == "woken", out
    assert alarms.armed(actor) == reminder["at"]

    # A wake that finds the actor held elsewhere arms one for now: the holder may leave
    # the schedule alone, and this one has just fired.
    alarms.scheduler.delete_schedule(Name=schedule_name(actor), GroupName=alarms.group)
    holder = Lease(aws, actor, "someone-else", clock.now, duration_ms=MINUTE)
    await holder.acquire()
    out = await fn.invoke(wake_event(actor, clock.now()), context())
    assert out["status"] == "busy", out
    assert alarms.armed(actor) == clock.now()
