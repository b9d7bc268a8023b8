"""A reminder's wake runs the due work to its answer within the wake's own invocation:
one model request per reminder, never a second one by a later invocation that finds the
actor parked mid-run.

Over moto's HTTP server (``aws_http``): every DynamoDB call is a real request in a thread,
slow enough that a wake which polled the event loop for the reminder's commit (instead of
waiting for it) parked the actor mid-run in about half of the runs."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from core.faux import FauxModel
from core.testing import VirtualClock
from runtimes.actor.testing import kit_config
from runtimes.aws import AwsResources
from runtimes.aws.alarms import WakeSchedule, wake_event
from runtimes.aws.handler import ActorFunction
from tests.aws.aws_target import create_alarms
from tests.aws.lambda_support import answer, context, function, url_event

RUNS = 20


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock()


@pytest.fixture
def alarms(aws_http: AwsResources, moto_server: str, clock: VirtualClock) -> WakeSchedule:
    return create_alarms(clock.now, moto_server)


def _counted(fn: ActorFunction) -> tuple[ActorFunction, FauxModel]:
    """``fn`` with a model of its own, whose requests the test counts."""
    config = kit_config()
    assert isinstance(config.models, FauxModel)
    settings = dataclasses.replace(fn.settings, actor=config)
    return ActorFunction(settings), config.models


@pytest.mark.parametrize("run", range(RUNS))
async def test_a_reminder_wake_asks_the_model_once_and_answers_in_its_invocation(
    run: int, aws_http: AwsResources, alarms: WakeSchedule, clock: VirtualClock, tmp_path: Path
) -> None:
    aws = aws_http
    actor = f"rw{run}"
    fn = function(aws, alarms, tmp_path, clock)
    body = {"type": "input", "content": "hello"}
    status, out = answer(
        await fn.invoke(url_event("POST", f"/v1/actors/{actor}/submissions", body), context())
    )
    assert status == 202, out
    status, reminder = answer(
        await fn.invoke(
            url_event(
                "POST",
                f"/v1/actors/{actor}/conversations/1/reminders",
                {"message": "ping", "after": 300},
            ),
            context(),
        )
    )
    assert status == 201, reminder
    clock.advance(300_000)
    # The wake on a new container: the reminder fires, the model answers it, and the
    # answer is committed before the invocation parks the actor.
    waker, model = _counted(function(aws, alarms, tmp_path, clock))
    out = await waker.invoke(wake_event(actor, reminder["at"]), context())
    assert out["status"] == "woken", out
    assert model.state.call_count == 1, model.state.call_count
    assert alarms.armed(actor) is None  # nothing left to do: no wake armed
    # A later invocation finds the answer; it asks the model nothing.
    reader, later = _counted(function(aws, alarms, tmp_path, clock))
    status, view = answer(
        await reader.invoke(url_event("GET", f"/v1/actors/{actor}/conversations/1/view"), context())
    )
    assert status == 200, view
    answers = [e["message"]["content"] for e in view["entries"] if e["kind"] == "assistant"]
    assert len(answers) == 2 and later.state.call_count == 0, (answers, later.state.call_count)
