"""A model call longer than the invocation's time budget is continued by the next
invocation (a new container), not lost: the harness is parked mid-call with an immediate
wake, and the wake re-issues the request and answers the submission once."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from core.faux import FauxModel, FauxState, faux_message
from core.harness import ModelRequest, UserMessage
from core.testing import VirtualClock
from runtimes.actor import ActorConfig
from runtimes.actor.api import ApiConfig
from runtimes.actor.testing import KIT_TOKEN
from runtimes.aws import AwsResources
from runtimes.aws.alarms import wake_event
from runtimes.aws.handler import ActorFunction, FunctionSettings
from tests.aws.aws_target import create_alarms
from tests.aws.lambda_support import Context, answer, context, url_event
from tests.aws.support import container, head


async def test_a_model_call_longer_than_the_budget_is_continued_by_the_next_invocation(
    aws: AwsResources, tmp_path: Path
) -> None:
    clock = VirtualClock()
    alarms = create_alarms(clock.now)
    slow = asyncio.Event()  # the first model call hangs until the test lets it go
    requests: list[str] = []

    async def step(request: ModelRequest, state: FauxState) -> Any:
        users = [m for m in request.messages if isinstance(m, UserMessage)]
        text = str(users[-1].content)
        requests.append(text)
        if len(requests) == 1:
            await slow.wait()
        return faux_message(f"echo: {text}")

    def fn() -> ActorFunction:
        return ActorFunction(
            FunctionSettings(
                resources=aws,
                actor=ActorConfig(
                    models=FauxModel(fallback=step, record_requests=False),
                    default_agent={"model": "faux/faux-1"},
                ),
                api=ApiConfig(KIT_TOKEN),
                workdir=container(tmp_path),
                alarms=alarms,
                clock=clock,
            )
        )

    body = {"type": "input", "content": "think hard", "request_id": "long-1"}
    short = Context("req-short", remaining_ms=10_000 + 200)  # 0.2 s beyond the reserve
    event = url_event("POST", "/v1/actors/mb/submissions", body)
    status, accepted = answer(await fn().invoke(event, short))
    assert status == 202, accepted
    assert requests == ["think hard"]  # the call was in flight when the time ran out
    assert alarms.armed("mb") == clock.now()  # parked with an immediate wake
    assert "owner" not in head(aws, "mb")
    # The wake runs on a new container: the request is issued again and answered.
    out = await fn().invoke(wake_event("mb", clock.now()), context())
    assert out["status"] == "woken", out
    assert requests == ["think hard", "think hard"]
    path = f"/v1/actors/mb/submissions/{accepted['id']}"
    status, state = answer(await fn().invoke(url_event("GET", path), context()))
    assert status == 200 and state["status"] == "done", state
    assert state["answer"]["text"] == "echo: think hard"
    status, view = answer(
        await fn().invoke(url_event("GET", "/v1/actors/mb/conversations/1/view"), context())
    )
    assert [e["kind"] for e in view["entries"]] == ["user", "assistant"], view
    slow.set()
