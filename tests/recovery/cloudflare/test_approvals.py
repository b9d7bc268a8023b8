"""Tool approvals on the Durable Object host (issue 34), on the ``ctx.storage`` stand-in:
a call pending approval holds no alarm (no heartbeat for it once the request is over);
the isolate is evicted; hours pass; an approval arrives over the API (the app the object
serves, through ASGI as the Workers SDK's bridge does): the tool runs once, the run
answers, a second, different decision is refused with nothing written. An expiring
approval arms the object's one alarm at its deadline and is denied when that alarm is
delivered to a new isolate, with no request arriving."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx

from core.testing import VirtualClock
from runtimes.actor import ActorConfig
from runtimes.actor.api.app import ApiConfig, create_app
from runtimes.cloudflare.alarm import HEARTBEAT_MS
from tests.cloudflare.kit_target import DurableNamespace, DurableNamespaceHost
from tests.local.support import APPROVAL_AGENT, approval_extension, echo_extension, scripted_model

TOKEN = "worker-token-0123456789"
ACTOR = "ann"
A = f"/v1/actors/{ACTOR}"
HOURS = 5 * 3600 * 1000


def config() -> ActorConfig:
    return ActorConfig(
        models=scripted_model(),
        extensions=[echo_extension(), approval_extension(3600)],
        default_agent=dict(APPROVAL_AGENT),
    )


@asynccontextmanager
async def api(host: DurableNamespaceHost) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(host, ApiConfig(TOKEN))
    await host.start()
    headers = {"authorization": f"Bearer {TOKEN}"}
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://do", headers=headers) as c:
        yield c


async def pending(c: httpx.AsyncClient) -> list[Any]:
    r = await c.get(f"{A}/approvals")
    assert r.status_code == 200, r.text
    approvals: list[Any] = r.json()["approvals"]
    return approvals


async def ask(namespace: DurableNamespace, clock: VirtualClock, content: str) -> tuple[int, Any]:
    """Submit; wait until the call asks; the isolate is then evicted (killed)."""
    host = namespace.host(config(), clock)
    async with api(host) as c:
        r = await c.post(f"{A}/submissions", json={"type": "input", "content": content})
        assert r.status_code == 202, r.text
        for _ in range(1000):
            if await pending(c):
                break
            await asyncio.sleep(0.005)
        else:
            raise AssertionError((await c.get(f"{A}/tasks")).text)
        (one,) = await pending(c)
    await namespace.kill(host)
    return r.json()["id"], one


async def test_an_approval_after_eviction_and_hours_runs_the_tool_once(tmp_path: Path) -> None:
    namespace, clock, effects = DurableNamespace(tmp_path), VirtualClock(), tmp_path / "e"
    try:
        sid, one = await ask(namespace, clock, f"guard:{effects}")
        home = namespace.home(ACTOR)
        # At most the heartbeat the request's run armed: delivered, it finds nothing to
        # do and leaves no alarm behind (the pending call holds none).
        clock.advance(HEARTBEAT_MS)
        host = namespace.host(config(), clock)
        if home.alarm is not None:
            await host.wake(ACTOR)
        await namespace.kill(host)
        assert home.alarm is None
        clock.advance(HOURS)
        host = namespace.host(config(), clock)
        async with api(host) as c:
            assert [p["id"] for p in await pending(c)] == [one["id"]]
            r = await c.post(f"{A}/approvals/{one['id']}", json={"decision": "approve"})
            assert r.status_code == 200, r.text
            state = (await c.get(f"{A}/submissions/{sid}", params={"wait": 20})).json()
            assert state["status"] == "done", state
            assert state["answer"]["text"].startswith("guarded finished")
            assert effects.read_text() == "ran\n"
            digest = namespace.digest(ACTOR)
            r = await c.post(f"{A}/approvals/{one['id']}", json={"decision": "deny"})
            assert r.status_code == 409 and r.json()["error"]["code"] == "approval_decided"
            assert namespace.digest(ACTOR) == digest
        await host.close()
        assert effects.read_text() == "ran\n"
    finally:
        namespace.close()


async def test_an_expiring_approval_is_denied_by_the_alarm_with_no_request(
    tmp_path: Path,
) -> None:
    namespace, clock, effects = DurableNamespace(tmp_path), VirtualClock(), tmp_path / "e"
    try:
        sid, one = await ask(namespace, clock, f"expire:{effects}")
        home = namespace.home(ACTOR)
        clock.advance(HEARTBEAT_MS)
        host = namespace.host(config(), clock)
        await host.wake(ACTOR)  # the run's heartbeat: the deadline is armed after it
        await namespace.kill(host)
        assert home.alarm == one["expires_at"]
        clock.set(one["expires_at"] + HOURS)  # late, as alarms may be
        host = namespace.host(config(), clock)
        assert await host.wake(ACTOR)  # the alarm, not a request, opens the actor
        harness_done = False
        async with host.use(ACTOR) as harness:
            record = await (await harness.submission(sid)).wait(timeout=20)  # type: ignore[union-attr]
            harness_done = record.status == "done"
            answer = await (await harness.submission(sid)).answer(record)  # type: ignore[union-attr]
        assert harness_done and answer is not None and "expired" in answer.text
        assert not effects.exists()
        await host.close()
    finally:
        namespace.close()
