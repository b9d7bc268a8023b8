"""A Scheduler that refuses while an actor parks: retried, then recorded as a pending
wake under the lease and re-armed by the sweep — the deadline is never lost."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from core.testing import VirtualClock
from runtimes.aws import AwsResources
from runtimes.aws.alarms import WakeSchedule, wake_event
from runtimes.aws.lease import Lease
from runtimes.aws.pending import ARM_ATTEMPTS, PendingWakes
from tests.aws.aws_target import create_alarms
from tests.aws.lambda_support import answer, context, function, url_event
from tests.aws.support import head

_WRITES = ("create_schedule", "update_schedule", "delete_schedule")


class FaultyScheduler:
    """The moto Scheduler client, except that its writes raise a throttling error
    while ``refusals`` is above zero (each refusal counts down; ``-1``: refuse all)."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.refusals = 0
        self.refused = 0

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.client, name)
        if name not in _WRITES:
            return method

        def faulty(**kwargs: Any) -> Any:
            if self.refusals != 0:
                self.refusals -= 1 if self.refusals > 0 else 0
                self.refused += 1
                raise ClientError(
                    {"Error": {"Code": "ThrottlingException", "Message": "slow down"}}, name
                )
            return method(**kwargs)

        return faulty


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock()


@pytest.fixture
def alarms(aws: AwsResources, clock: VirtualClock) -> WakeSchedule:
    real = create_alarms(clock.now)
    return dataclasses.replace(real, scheduler=FaultyScheduler(real.scheduler))


@pytest.fixture
def faulty(alarms: WakeSchedule) -> FaultyScheduler:
    scheduler = alarms.scheduler
    assert isinstance(scheduler, FaultyScheduler)
    return scheduler


async def _remind(fn: Any, actor: str, after: int) -> int:
    """Create the actor (a first submission), then set a reminder."""
    hello = {"type": "input", "content": "hello"}
    event = url_event("POST", f"/v1/actors/{actor}/submissions", hello)
    assert answer(await fn.invoke(event, context()))[0] == 202
    body = {"message": "ping", "after": after}
    event = url_event("POST", f"/v1/actors/{actor}/conversations/1/reminders", body)
    status, out = answer(await fn.invoke(event, context()))
    assert status == 201, out
    return int(out["at"])


def _assistant(view: Any) -> list[str]:
    return [
        "".join(part["text"] for part in e["message"]["content"])
        for e in view["entries"]
        if e["kind"] == "assistant"
    ]


async def _view(fn: Any, actor: str) -> Any:
    status, view = answer(
        await fn.invoke(url_event("GET", f"/v1/actors/{actor}/conversations/1/view"), context())
    )
    assert status == 200, view
    return view


async def test_a_refused_arm_is_retried_within_the_park(
    aws: AwsResources,
    alarms: WakeSchedule,
    faulty: FaultyScheduler,
    tmp_path: Path,
    clock: VirtualClock,
) -> None:
    fn = function(aws, alarms, tmp_path, clock)
    faulty.refusals = ARM_ATTEMPTS - 1  # all but the last try of the first park refused
    due = await _remind(fn, "p1", 300)
    assert faulty.refused == ARM_ATTEMPTS - 1
    assert alarms.armed("p1") == due
    assert await PendingWakes(aws).listed() == []


async def test_a_wake_the_scheduler_refused_is_recorded_and_re_armed_by_the_sweep(
    aws: AwsResources,
    alarms: WakeSchedule,
    faulty: FaultyScheduler,
    tmp_path: Path,
    clock: VirtualClock,
) -> None:
    fn = function(aws, alarms, tmp_path, clock)
    faulty.refusals = -1  # the Scheduler is down
    due = await _remind(fn, "p2", 300)  # the request itself is answered all the same
    assert faulty.refused >= ARM_ATTEMPTS
    assert alarms.armed("p2") is None  # no schedule...
    [pending] = await PendingWakes(aws).listed()  # ...but the wake is recorded
    assert (pending.actor, pending.at) == ("p2", due)
    assert "owner" not in head(aws, "p2")  # and the lease was released after recording
    # A sweep while the Scheduler is still down keeps the record (the wake's park
    # failed again and recorded a newer one).
    out = await function(aws, alarms, tmp_path, clock).invoke({"perdure": "sweep"}, context())
    assert out == {"status": "swept", "woken": []}, out
    [again] = await PendingWakes(aws).listed()
    assert again.at == due and again.token != pending.token
    # The Scheduler is back: the sweep (a cold container) wakes the actor, whose park
    # arms the schedule for the reminder, and the record goes.
    faulty.refusals = 0
    out = await function(aws, alarms, tmp_path, clock).invoke({"perdure": "sweep"}, context())
    assert out == {"status": "swept", "woken": ["p2"]}, out
    assert alarms.armed("p2") == due
    assert await PendingWakes(aws).listed() == []
    # The schedule fires (twice): the reminder is answered once.
    clock.advance(300_000)
    for _ in range(2):
        woke = await function(aws, alarms, tmp_path, clock).invoke(wake_event("p2", due), context())
        assert woke["status"] == "woken", woke
    assert _assistant(await _view(fn, "p2")) == ["echo: hello", "echo: ping"]


async def test_a_sweep_leaves_a_record_whose_actor_is_held(
    aws: AwsResources,
    alarms: WakeSchedule,
    faulty: FaultyScheduler,
    tmp_path: Path,
    clock: VirtualClock,
) -> None:
    fn = function(aws, alarms, tmp_path, clock)
    faulty.refusals = -1
    await _remind(fn, "p3", 300)
    faulty.refusals = 0
    holder = Lease(aws, "p3", "another-invocation", clock.now)
    await holder.acquire()
    out = await function(aws, alarms, tmp_path, clock).invoke({"perdure": "sweep"}, context())
    assert out == {"status": "swept", "woken": []}, out
    assert len(await PendingWakes(aws).listed()) == 1  # kept for the next sweep
    await holder.release()
    out = await function(aws, alarms, tmp_path, clock).invoke({"perdure": "sweep"}, context())
    assert out == {"status": "swept", "woken": ["p3"]}, out
