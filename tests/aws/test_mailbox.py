"""Lease contention at the front door: a submission arriving while another invocation
holds the actor goes to its mailbox and is answered once."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from core.testing import VirtualClock
from runtimes.actor.testing import KIT_TOKEN, KitTools
from runtimes.actor.tokens import SigningKeys
from runtimes.aws import AwsResources
from runtimes.aws.alarms import WakeSchedule, wake_event
from runtimes.aws.lease import DEFAULT_LEASE_MS, Lease
from runtimes.aws.mailbox import Mailbox
from tests.aws.aws_target import create_alarms
from tests.aws.lambda_support import answer, context, function, url_event
from tests.aws.support import head


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock()


@pytest.fixture
def alarms(aws: AwsResources, clock: VirtualClock) -> WakeSchedule:
    return create_alarms(clock.now)


@pytest.fixture(params=["in-process", "http"])
def backend(
    request: pytest.FixtureRequest, clock: VirtualClock
) -> tuple[AwsResources, WakeSchedule]:
    """moto in-process, or a ThreadedMotoServer on 127.0.0.1 reached over real HTTP."""
    if request.param == "in-process":
        return request.getfixturevalue("aws"), request.getfixturevalue("alarms")
    endpoint = request.getfixturevalue("moto_server")
    return request.getfixturevalue("aws_http"), create_alarms(clock.now, endpoint)


def _post(actor: str, content: str, **extra: Any) -> dict[str, Any]:
    body = {"type": "input", "content": content, **extra}
    return url_event("POST", f"/v1/actors/{actor}/submissions", body)


async def _users(fn: Any, actor: str) -> list[str]:
    status, view = answer(
        await fn.invoke(url_event("GET", f"/v1/actors/{actor}/conversations/1/view"), context())
    )
    assert status == 200, view
    return [e["message"]["content"] for e in view["entries"] if e["kind"] == "user"]


async def _until(predicate: Any) -> None:
    async def poll() -> None:
        while not predicate():  # noqa: ASYNC110 - plain state
            await asyncio.sleep(0.01)

    await asyncio.wait_for(poll(), 30)


async def test_two_concurrent_invocations_one_holds_the_other_is_mailed_and_answered_once(
    backend: tuple[AwsResources, WakeSchedule], clock: VirtualClock, tmp_path: Path
) -> None:
    aws, alarms = backend
    gate = asyncio.Event()
    tools = KitTools(gate=gate.wait)
    holder_ctx = context()
    holder = asyncio.ensure_future(
        function(aws, alarms, tmp_path, clock, tools=tools).invoke(_post("c1", "tools"), holder_ctx)
    )
    await _until(lambda: "kit_book" in tools.running)  # the holder's work is running
    assert head(aws, "c1")["owner"] == holder_ctx.aws_request_id
    other = function(aws, alarms, tmp_path, clock)
    status, mailed = answer(await other.invoke(_post("c1", "hello", request_id="job-b"), context()))
    assert status == 202 and mailed == {
        "id": None,
        "conversation_id": 1,
        "type": "input",
        "status": "mailed",
        "request_id": "job-b",
    }
    assert head(aws, "c1")["owner"] == holder_ctx.aws_request_id  # exactly one holder
    # Delivered twice while held: still one mail item.
    status, again = answer(await other.invoke(_post("c1", "hello", request_id="job-b"), context()))
    assert status == 202 and again == mailed
    assert len(await Mailbox(aws).pending("c1")) == 1
    # Polled by its request id — over a Function URL and by a direct invoke — it reads
    # ``mailed`` while it waits (the app alone could only answer 423 here).
    by_request = "/v1/actors/c1/conversations/1/submissions/by-request"
    status, state = answer(
        await other.invoke(url_event("GET", by_request, query="request_id=job-b"), context())
    )
    assert status == 200 and state == {
        **mailed,
        "entry_id": None,
        "answer": None,
        "reason": None,
        "detail": None,
    }, state
    direct = {"perdure": "request", "method": "GET", "path": f"{by_request}?request_id=job-b"}
    replied = await other.invoke(direct, context())
    assert replied == {"status": 200, "body": state}, replied
    # A scoped token's poll is decided before the mailbox is read: another actor's read
    # token is refused (403, not the mail), the actor's own reads it.
    keys = SigningKeys.for_host(KIT_TOKEN)
    for token, expected in ((keys.mint("c9", "read", 60), 403), (keys.mint("c1", "read", 60), 200)):
        poll = url_event("GET", by_request, query="request_id=job-b", token=token)
        status, seen = answer(await other.invoke(poll, context()))
        assert status == expected and (seen == state) == (expected == 200), (status, seen)
    other_id = url_event("GET", by_request, query="request_id=job-x")
    status, _ = answer(await other.invoke(other_id, context()))
    assert status == 423  # nothing mailed under that id: the lease answer stands
    gate.set()
    status, accepted = answer(await holder)
    assert status == 202, accepted
    # The holder drained the mailbox before it released: the mailed submission is done.
    assert await Mailbox(aws).pending("c1") == []
    assert "owner" not in head(aws, "c1")
    status, state = answer(await other.invoke(_post("c1", "hello", request_id="job-b"), context()))
    assert status == 202 and state["status"] == "done", state
    assert (await _users(other, "c1")) == ["tools", "hello"]
    assert alarms.armed("c1") is None  # nothing left to wake for


async def test_a_mailbox_left_by_a_dead_holder_is_drained_by_the_wake(
    aws: AwsResources, alarms: WakeSchedule, clock: VirtualClock, tmp_path: Path
) -> None:
    fn = function(aws, alarms, tmp_path, clock)
    status, _ = answer(await fn.invoke(_post("c2", "first"), context()))
    assert status == 202
    dead = Lease(aws, "c2", "dead-holder", clock.now)  # takes the lease and never returns
    await dead.acquire()
    status, mailed = answer(await fn.invoke(_post("c2", "second"), context()))
    assert status == 202 and mailed["status"] == "mailed"
    assert alarms.armed("c2") == clock.now()  # the mailer armed a wake for its mail
    clock.advance(DEFAULT_LEASE_MS + 1)  # the dead holder's lease runs out
    out = await function(aws, alarms, tmp_path, clock).invoke(
        wake_event("c2", clock.now()), context()
    )
    assert out["status"] == "woken", out
    assert await Mailbox(aws).pending("c2") == []
    assert (await _users(fn, "c2")) == ["first", "second"]
    # A retry of the mailed request through the direct path is deduped too.
    direct = {
        "perdure": "request",
        "method": "POST",
        "path": "/v1/actors/c2/submissions",
        "body": {"type": "input", "content": "second", "request_id": mailed["request_id"]},
    }
    replied = await fn.invoke(direct, context())
    assert replied["status"] == 202 and replied["body"]["status"] == "done", replied
    assert (await _users(fn, "c2")) == ["first", "second"]
