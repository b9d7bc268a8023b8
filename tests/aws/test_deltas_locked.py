"""Through the Lambda handler (Mangum, moto): the deltas long poll, its wait capped by
the invocation's remaining time, and reads refused ``423`` with ``Retry-After`` while
another invocation holds the actor's lease."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any

import pytest

from core.docops import apply_ops
from core.testing import VirtualClock
from runtimes.aws import AwsResources
from runtimes.aws.alarms import WakeSchedule
from runtimes.aws.host import RETRY_AFTER_CAP_S
from runtimes.aws.lease import Lease
from tests.aws.aws_target import create_alarms
from tests.aws.lambda_support import Context, answer, context, function, url_event
from tests.aws.support import head, items, objects


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock()


@pytest.fixture
def alarms(aws: AwsResources, clock: VirtualClock) -> WakeSchedule:
    return create_alarms(clock.now)


def _deltas(actor: str, after: int | None = None, wait: float = 0) -> dict[str, Any]:
    query = f"wait={wait}" + ("" if after is None else f"&after={after}")
    return url_event("GET", f"/v1/actors/{actor}/conversations/1/deltas", query=query)


async def _page(fn: Any, event: dict[str, Any], ctx: Context | None = None) -> dict[str, Any]:
    status, page = answer(await fn.invoke(event, ctx or context()))
    assert status == 200, page
    return dict(page)


async def _view(fn: Any, actor: str) -> Any:
    status, view = answer(
        await fn.invoke(url_event("GET", f"/v1/actors/{actor}/conversations/1/view"), context())
    )
    assert status == 200, view
    return view


def _users(view: Any) -> list[str]:
    return [e["message"]["content"] for e in view["entries"] if e["kind"] == "user"]


async def test_a_long_poll_gets_the_deltas_its_own_invocation_commits(
    aws: AwsResources, alarms: WakeSchedule, clock: VirtualClock, tmp_path: Path
) -> None:
    fn = function(aws, alarms, tmp_path, clock)
    hello = {"type": "input", "content": "hello"}
    status, _ = answer(
        await fn.invoke(url_event("POST", "/v1/actors/d1/submissions", hello), context())
    )
    assert status == 202
    remind = {"message": "ping", "after": 300}
    event = url_event("POST", "/v1/actors/d1/conversations/1/reminders", remind)
    assert answer(await fn.invoke(event, context()))[0] == 201
    # The first poll: the view and its cursor (every invocation is a new app and feed,
    # started at the replica's seq).
    page = await _page(fn, _deltas("d1"))
    [frame] = page["frames"]
    view, cursor = frame["value"], page["next"]
    assert frame["type"] == "view" and view == await _view(fn, "d1")
    assert cursor == int(head(aws, "d1")["seq"]), (page, head(aws, "d1"))
    # Up to date: a new invocation covers the cursor and the bounded wait runs out.
    assert await _page(fn, _deltas("d1", cursor, 0.2)) == {"frames": [], "next": cursor}
    # The reminder is due: the polling invocation itself opens the actor and fires it,
    # and answers with the deltas of those commits (on a cold /tmp, too).
    clock.advance(300_000)
    cold = function(aws, alarms, tmp_path, clock)
    page = await _page(cold, _deltas("d1", cursor, 10))
    assert page["frames"] and {f["type"] for f in page["frames"]} == {"delta"}, page
    for frame in page["frames"]:
        assert frame["seq"] > cursor
        view = apply_ops(view, frame["ops"])
    assert "ping" in _users(view), view
    # The rest of that work committed after the answer, in the same invocation: the next
    # poll converges (deltas if the new feed covers the cursor, else one replace).
    committed = await _view(fn, "d1")
    page = await _page(fn, _deltas("d1", page["next"], 0.2))
    for frame in page["frames"]:
        view = frame["value"] if frame["type"] == "replace" else apply_ops(view, frame["ops"])
    assert view == committed
    assert _users(view) == ["hello", "ping"]


async def test_the_wait_ends_before_the_invocations_deadline(
    aws: AwsResources, alarms: WakeSchedule, clock: VirtualClock, tmp_path: Path
) -> None:
    fn = function(aws, alarms, tmp_path, clock)
    hello = {"type": "input", "content": "hello"}
    assert (
        answer(await fn.invoke(url_event("POST", "/v1/actors/d2/submissions", hello), context()))[0]
        == 202
    )
    cursor = (await _page(fn, _deltas("d2")))["next"]
    short = Context("req-short", remaining_ms=10_000 + 300)  # 0.3 s beyond the reserve
    started = time.monotonic()
    page = await _page(fn, _deltas("d2", cursor, 60), short)
    assert page == {"frames": [], "next": cursor}
    assert time.monotonic() - started < 5  # not the 60 s asked for
    # Bad parameters: 422 before the actor is opened, nothing written.
    before = items(aws, "d2")
    for query in ("after=-1", "wait=-3", "wait=nan", "after=seven"):
        event = url_event("GET", "/v1/actors/d2/conversations/1/deltas", query=query)
        status, body = answer(await fn.invoke(event, context()))
        assert status == 422 and body["error"]["code"] == "invalid", (query, body)
    assert items(aws, "d2") == before


def _locked(response: dict[str, Any]) -> tuple[dict[str, Any], str]:
    assert response["statusCode"] == 423, response
    raw = response["body"]
    if response.get("isBase64Encoded"):
        raw = base64.b64decode(raw).decode()
    headers = {k.lower(): v for k, v in response["headers"].items()}
    return json.loads(raw), headers["retry-after"]


async def test_reads_while_another_invocation_holds_the_lease_get_423_with_retry_after(
    aws: AwsResources, alarms: WakeSchedule, clock: VirtualClock, tmp_path: Path
) -> None:
    fn = function(aws, alarms, tmp_path, clock)
    hello = {"type": "input", "content": "hello"}
    assert (
        answer(await fn.invoke(url_event("POST", "/v1/actors/l1/submissions", hello), context()))[0]
        == 202
    )
    holder = Lease(aws, "l1", "another-invocation", clock.now)
    await holder.acquire()
    held = items(aws, "l1")
    stored = objects(aws)
    for path, query in (
        ("/conversations/1/view", ""),
        ("/conversations/1/deltas", "wait=5"),
        ("/submissions/2", "wait=5"),
        ("/tasks", ""),
        ("/timers", ""),
    ):
        event = url_event("GET", f"/v1/actors/l1{path}", query=query)
        started = time.monotonic()
        body, retry = _locked(await fn.invoke(event, context()))
        assert time.monotonic() - started < 5, path  # refused at once, not waited out
        assert body["error"]["code"] == "actor_locked" and body["error"]["message"], body
        assert 1 <= int(retry) <= RETRY_AFTER_CAP_S, retry
    # Nothing was written by the refused invocations: the lease is still the holder's.
    assert items(aws, "l1") == held and objects(aws) == stored
    assert head(aws, "l1")["owner"] == "another-invocation"
    # Released: the same read succeeds.
    await holder.release()
    assert _users(await _view(fn, "l1")) == ["hello"]


async def test_a_direct_read_while_locked_answers_423_with_retry_after(
    aws: AwsResources, alarms: WakeSchedule, clock: VirtualClock, tmp_path: Path
) -> None:
    fn = function(aws, alarms, tmp_path, clock)
    hello = {"type": "input", "content": "hello"}
    assert (
        answer(await fn.invoke(url_event("POST", "/v1/actors/l2/submissions", hello), context()))[0]
        == 202
    )
    await Lease(aws, "l2", "another-invocation", clock.now).acquire()
    direct = {"perdure": "request", "method": "GET", "path": "/v1/actors/l2/conversations/1/view"}
    out = await fn.invoke(direct, context())
    assert out["status"] == 423 and out["body"]["error"]["code"] == "actor_locked", out
    assert 1 <= int(out["retry_after"]) <= RETRY_AFTER_CAP_S, out
