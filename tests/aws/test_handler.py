"""The Lambda front door: HTTP events through Mangum, scheduler wakes, direct invokes;
bad input refused before anything is written."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path
from typing import Any

import pytest

from core.testing import VirtualClock
from runtimes.actor.testing import KitTools
from runtimes.aws import AwsResources
from runtimes.aws.alarms import WakeSchedule, schedule_name, wake_event
from tests.aws.aws_target import create_alarms
from tests.aws.lambda_support import (
    Context,
    alb_event,
    answer,
    context,
    function,
    rest_event,
    url_event,
)
from tests.aws.support import head, items, objects


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock()


@pytest.fixture
def alarms(aws: AwsResources, clock: VirtualClock) -> WakeSchedule:
    return create_alarms(clock.now)


async def _submit(fn: Any, actor: str, content: str, **extra: Any) -> dict[str, Any]:
    body = {"type": "input", "content": content, **extra}
    status, out = answer(
        await fn.invoke(url_event("POST", f"/v1/actors/{actor}/submissions", body), context())
    )
    assert status == 202, out
    return dict(out)


async def _get(fn: Any, path: str) -> tuple[int, Any]:
    return answer(await fn.invoke(url_event("GET", path), context()))


async def _ok(fn: Any, path: str) -> Any:
    status, body = await _get(fn, path)
    assert status == 200, body
    return body


def _texts(entries: list[dict[str, Any]], kind: str) -> list[str]:
    out = []
    for e in entries:
        if e["kind"] == kind:
            content = e["message"]["content"]
            if not isinstance(content, str):
                content = "".join(p.get("text", "") for p in content)
            out.append(content)
    return out


async def test_a_submission_is_answered_within_its_invocation_and_the_lease_released(
    aws: AwsResources, alarms: WakeSchedule, clock: VirtualClock, tmp_path: Path
) -> None:
    fn = function(aws, alarms, tmp_path, clock)
    accepted = await _submit(fn, "u1", "hello")
    assert "owner" not in head(aws, "u1")  # released at the end of the invocation
    # A new container (cold start) reads the answer the first invocation committed.
    status, state = await _get(
        function(aws, alarms, tmp_path, clock), f"/v1/actors/u1/submissions/{accepted['id']}"
    )
    assert status == 200 and state["status"] == "done", state
    assert state["answer"]["text"] == "echo: hello"
    assert alarms.armed("u1") is None  # nothing due: no schedule


@pytest.mark.parametrize("event", [rest_event, alb_event], ids=["api-gateway-rest", "alb"])
async def test_api_gateway_rest_and_alb_events_are_served_too(
    event: Any, aws: AwsResources, alarms: WakeSchedule, clock: VirtualClock, tmp_path: Path
) -> None:
    fn = function(aws, alarms, tmp_path, clock)
    body = {"type": "input", "content": "rest"}
    status, out = answer(
        await fn.invoke(event("POST", "/v1/actors/r1/submissions", body), context())
    )
    assert status == 202, out
    status, state = answer(
        await fn.invoke(event("GET", f"/v1/actors/r1/submissions/{out['id']}"), context())
    )
    assert status == 200 and state["answer"]["text"] == "echo: rest", state


async def test_a_direct_invoke_is_served_by_the_same_api(
    aws: AwsResources, alarms: WakeSchedule, clock: VirtualClock, tmp_path: Path
) -> None:
    fn = function(aws, alarms, tmp_path, clock)
    event = {
        "perdure": "request",
        "method": "POST",
        "path": "/v1/actors/d1/submissions",
        "body": {"type": "input", "content": "direct", "request_id": "job-1"},
    }
    first = await fn.invoke(event, context())
    again = await fn.invoke(event, context())  # request-id dedupe across invocations
    assert first["status"] == 202 and again["status"] == 202, (first, again)
    assert again["body"]["id"] == first["body"]["id"] and again["body"]["status"] == "done"
    view = await _ok(fn, "/v1/actors/d1/conversations/1/view")
    assert _texts(view["entries"], "user") == ["direct"]


async def test_bad_input_is_refused_and_nothing_is_written(
    aws: AwsResources, alarms: WakeSchedule, clock: VirtualClock, tmp_path: Path
) -> None:
    fn = function(aws, alarms, tmp_path, clock, max_body_bytes=4096)
    ok = {"type": "input", "content": "x"}
    broken_headers = url_event("POST", "/v1/actors/b1/submissions", ok)
    broken_headers["headers"] = {"authorization": 5}
    # A body that names a key twice (no dict can): which type would it be?
    duplicate = url_event("POST", "/v1/actors/b1/submissions", ok)
    raw = b'{"type": "write", "type": "input", "content": "x"}'
    duplicate["body"] = base64.b64encode(raw).decode()
    duplicate_rest = rest_event("POST", "/v1/actors/b1/submissions", ok)
    duplicate_rest["body"] = raw.decode()
    http_refusals = [
        ({"version": "2.0", "requestContext": {}}, "bad_event"),
        ({"hello": "world"}, "bad_event"),
        (broken_headers, "bad_event"),
        (url_event("POST", "/v1/actors/bad.id/submissions", ok), None),
        (url_event("POST", "/v1/actors/" + "x" * 65 + "/submissions", ok), None),
        (
            url_event(
                "POST", "/v1/actors/b1/submissions", {"type": "input", "content": "y" * 8000}
            ),
            "body_too_large",
        ),
        (url_event("POST", "/v1/actors/b1/submissions", ok, token="wrong-token-0123456789"), None),
        (url_event("POST", "/v1/actors/b1/submissions", {"type": "input", "content": ""}), None),
        (url_event("GET", "/v1/actors/b1/submissions/1"), None),
        (duplicate, "invalid"),
        (duplicate_rest, "invalid"),
    ]
    for event, code in http_refusals:
        status, body = answer(await fn.invoke(event, context()))
        assert 400 <= status < 500, (event, status, body)
        assert body["error"]["code"] and body["error"]["message"], body
        assert code is None or body["error"]["code"] == code, body
        if event in (duplicate, duplicate_rest):
            assert status == 422 and '"type"' in body["error"]["message"], body
    direct_refusals: list[Any] = [
        {"perdure": "nope"},
        {"perdure": "wake", "actor": "../etc"},
        {"perdure": "wake"},
        {"perdure": "request", "method": 1, "path": "/v1"},
    ]
    for event in direct_refusals:
        out = await fn.invoke(event, context())
        assert 400 <= out["status"] < 500 and out["error"]["code"], (event, out)
    status, body = answer(await fn.invoke([1, 2], context()))
    assert status == 400 and body["error"]["code"] == "bad_event"
    assert aws.dynamodb.scan(TableName=aws.table)["Items"] == []
    assert objects(aws) == []
    assert alarms.scheduler.list_schedules(GroupName=alarms.group)["Schedules"] == []


async def _remind(fn: Any, actor: str, after: int) -> int:
    status, out = answer(
        await fn.invoke(
            url_event(
                "POST",
                f"/v1/actors/{actor}/conversations/1/reminders",
                {"message": "ping", "after": after},
            ),
            context(),
        )
    )
    assert status == 201, out
    return int(out["at"])


async def test_a_reminder_after_a_cold_start_is_answered_once_when_delivered_twice(
    aws: AwsResources, alarms: WakeSchedule, clock: VirtualClock, tmp_path: Path
) -> None:
    fn = function(aws, alarms, tmp_path, clock)
    await _submit(fn, "m1", "hello")
    due = await _remind(fn, "m1", 300)
    # The invocation ended: the actor is parked, its one-time schedule armed.
    schedule = alarms.scheduler.get_schedule(Name=schedule_name("m1"), GroupName=alarms.group)
    assert schedule["ScheduleExpression"].startswith("at(")
    assert schedule["FlexibleTimeWindow"] == {"Mode": "OFF"}
    assert schedule["ActionAfterCompletion"] == "DELETE"
    assert alarms.armed("m1") == due
    assert "owner" not in head(aws, "m1")
    # /tmp discarded: the wake runs on a new container, and is delivered twice.
    clock.advance(300_000)
    cold = function(aws, alarms, tmp_path, clock)
    event = wake_event("m1", due)
    first = await cold.invoke(event, context())
    second = await function(aws, alarms, tmp_path, clock).invoke(event, context())
    assert first["status"] == "woken" and second["status"] == "woken", (first, second)
    view = await _ok(cold, "/v1/actors/m1/conversations/1/view")
    assert _texts(view["entries"], "user") == ["hello", "ping"], view
    assert _texts(view["entries"], "assistant") == ["echo: hello", "echo: ping"], view
    assert alarms.armed("m1") is None  # nothing due any more: no schedule left


async def test_a_wake_treats_a_deadline_within_a_minute_as_due(
    aws: AwsResources, alarms: WakeSchedule, clock: VirtualClock, tmp_path: Path
) -> None:
    fn = function(aws, alarms, tmp_path, clock)
    await _submit(fn, "w1", "hello")
    due = await _remind(fn, "w1", 90)
    clock.advance(40_000)  # the schedule fired 50 s early (its minute's precision)
    wake = asyncio.ensure_future(fn.invoke(wake_event("w1", due), context()))
    while not wake.done():  # the invocation waits for the deadline on the clock
        await asyncio.sleep(0.01)
        clock.advance(5_000)
    assert (await wake)["status"] == "woken"
    view = await _ok(fn, "/v1/actors/w1/conversations/1/view")
    assert _texts(view["entries"], "assistant") == ["echo: hello", "echo: ping"], view
    assert alarms.armed("w1") is None


async def test_a_wake_for_an_unknown_actor_writes_nothing(
    aws: AwsResources, alarms: WakeSchedule, clock: VirtualClock, tmp_path: Path
) -> None:
    out = await function(aws, alarms, tmp_path, clock).invoke(wake_event("ghost", 1), context())
    assert out["status"] == "unknown"
    assert items(aws, "ghost") == []


async def test_work_left_when_the_time_runs_out_is_parked_with_an_immediate_wake(
    aws: AwsResources, alarms: WakeSchedule, clock: VirtualClock, tmp_path: Path
) -> None:
    never = asyncio.Event()
    tools = KitTools(gate=never.wait)
    fn = function(aws, alarms, tmp_path, clock, tools=tools)
    short = Context("req-short", remaining_ms=10_000 + 200)  # 0.2 s beyond the reserve
    status, accepted = answer(
        await fn.invoke(
            url_event("POST", "/v1/actors/t1/submissions", {"type": "input", "content": "tools"}),
            short,
        )
    )
    assert status == 202, accepted
    assert tools.running >= {"kit_search", "kit_book"}  # it was stopped mid-tools
    assert alarms.armed("t1") == clock.now()  # to be continued at once
    assert "owner" not in head(aws, "t1")
    # The wake (a new container) continues the work: safe tool rerun, unsafe interrupted.
    done = KitTools()
    out = await function(aws, alarms, tmp_path, clock, tools=done).invoke(
        wake_event("t1", clock.now()), context()
    )
    assert out["status"] == "woken", out
    state = await _ok(fn, f"/v1/actors/t1/submissions/{accepted['id']}")
    assert state["status"] == "done", state
    assert done.runs["kit_search"] == 1 and done.runs["kit_book"] == 0, done.runs
    assert alarms.armed("t1") is None


async def test_the_inspector_is_served_through_the_function_url(
    aws: AwsResources, alarms: WakeSchedule, clock: VirtualClock, tmp_path: Path
) -> None:
    """The web inspector's page and files, as a browser asks for them (no token: the
    page asks for it), from the package data the artifact installs; no actor is opened."""
    fn = function(aws, alarms, tmp_path, clock)
    for path, kind in (
        ("/ui", "text/html"),
        ("/ui/app.js", "text/javascript"),
        ("/ui/inspector.css", "text/css"),
        ("/ui/favicon.svg", "image/svg+xml"),
    ):
        event = url_event("GET", path)
        del event["headers"]["authorization"]
        response = await fn.invoke(event, context())
        assert response["statusCode"] == 200, (path, response)
        assert response["headers"]["content-type"].startswith(kind), path
        assert "script-src 'self'" in response["headers"]["content-security-policy"]
        body = response["body"]
        if response.get("isBase64Encoded"):
            body = base64.b64decode(body).decode()
        if path == "/ui":
            assert '<script type="module" src="/ui/app.js">' in body
    home = await fn.invoke(url_event("GET", "/"), context())
    assert (home["statusCode"], home["headers"]["location"]) == (307, "ui")
    # Nothing written: no actor, no lease, no object.
    assert aws.dynamodb.scan(TableName=aws.table)["Items"] == []
    assert objects(aws) == []
