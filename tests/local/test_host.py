"""The local actor host in-process: activation, eviction, the wake heap, locks, shutdown."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from core.harness import HarnessSettings, RetrySettings
from core.testing.clock import VirtualClock
from runtimes.actor import ActorLocked, HostClosed, InvalidActorId, UnknownActor, check_actor_id
from runtimes.local.host import ActorHost, ActorLock, WakeHeap
from tests.local.support import AGENT, files, host_config, outcomes


async def eventually(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


def _lock_free(path: Path) -> bool:
    try:
        ActorLock.acquire(path).release()
    except ActorLocked:
        return False
    return True


async def submit(host: ActorHost, actor: str, text: str) -> int:
    async with host.use(actor, create=True) as harness:
        root = await harness.root(agent=AGENT)
        return (await root.submit(text)).id


async def status(host: ActorHost, actor: str, submission_id: int) -> str:
    async with host.use(actor) as harness:
        submission = await harness.submission(submission_id)
        assert submission is not None
        return (await submission.status()).status


async def test_an_idle_actor_is_evicted_and_reopened_by_the_next_request(tmp_path: Path) -> None:
    host = ActorHost(host_config(tmp_path, idle_evict_s=0.2))
    await host.start()
    try:
        async with host.use("a", create=True) as harness:
            root = await harness.root(agent=AGENT)
            record = await (await root.submit("hi")).wait(timeout=10)
            assert record.status == "done"
        assert host.active == {"a"}
        # `active` drops the actor before its close (on a worker thread) releases the lock.
        await eventually(lambda: not host.active and _lock_free(tmp_path / "a.lock"))
        assert harness.session.closed
        assert host.wakes == {}  # nothing left to do: no wake
        assert await status(host, "a", record.id) == "done"  # reopened with its history
        assert host.active == {"a"}
    finally:
        await host.close()
    assert not host.active


async def test_an_actor_is_never_evicted_under_a_request(tmp_path: Path) -> None:
    host = ActorHost(host_config(tmp_path, idle_evict_s=0.05))
    await host.start()
    try:
        async with host.use("a", create=True) as harness:
            await harness.root(agent=AGENT)
            await asyncio.sleep(0.4)
            assert host.active == {"a"} and not harness.session.closed
        await eventually(lambda: not host.active)
    finally:
        await host.close()


async def test_a_running_actor_is_not_evicted_and_a_refused_eviction_says_so(
    tmp_path: Path,
) -> None:
    gate = tmp_path / "gate"
    host = ActorHost(host_config(tmp_path / "data", idle_evict_s=0.05))
    await host.start()
    try:
        sid = await submit(host, "a", f"gate:{gate}")
        await asyncio.sleep(0.4)
        assert host.active == {"a"}  # the generation runs: not evictable
        assert not await host.evict("a")
        gate.touch()
        await eventually(lambda: not host.active)
        assert await status(host, "a", sid) == "done"
        assert await host.evict("a", force=True)
        assert not await host.evict("a")
    finally:
        await host.close()


async def test_a_durable_timer_wakes_an_evicted_actor_without_any_request(tmp_path: Path) -> None:
    # The first model call fails retryably: the generation waits `retry` for 1.5 s, a
    # durable deadline. The idle actor is evicted meanwhile; the wake heap re-opens it.
    settings = HarnessSettings(retry=RetrySettings(base_delay_ms=1_500))
    host = ActorHost(host_config(tmp_path, idle_evict_s=0.1, settings=settings))
    await host.start()
    try:
        started = host.clock.now()
        sid = await submit(host, "a", "fail-once:timer")
        await eventually(lambda: "a" in host.wakes)
        assert not host.active  # evicted while it waits
        assert host.wakes["a"] >= started + 1_500
        await eventually(lambda: "a" in host.active)  # woken by the heap, no request
        assert host.clock.now() >= started + 1_500
        await eventually(lambda: not host.active)  # done, evicted again, nothing to wake
        assert host.wakes == {}
        assert await status(host, "a", sid) == "done"
    finally:
        await host.close()


async def test_a_new_host_recovers_pending_deadlines_from_storage(tmp_path: Path) -> None:
    settings = HarnessSettings(retry=RetrySettings(base_delay_ms=600))
    first = ActorHost(host_config(tmp_path, idle_evict_s=0.05, settings=settings))
    await first.start()
    sid = await submit(first, "a", "fail-once:recover")
    await eventually(lambda: "a" in first.wakes)
    await first.close()  # the heap dies with the host; the deadline is in storage

    second = ActorHost(host_config(tmp_path, idle_evict_s=0.05, settings=settings))
    await second.start()
    try:
        await eventually(lambda: "a" in second.wakes or "a" in second.active)
        await eventually(lambda: not second.active and not second.wakes)
        assert await status(second, "a", sid) == "done"
    finally:
        await second.close()


async def test_a_second_host_cannot_open_an_actor_another_holds(tmp_path: Path) -> None:
    one = ActorHost(host_config(tmp_path))
    two = ActorHost(host_config(tmp_path, recover_on_start=False))
    await one.start()
    await two.start()
    try:
        await submit(one, "a", "hello")
        with pytest.raises(ActorLocked, match="another process"):
            async with two.use("a"):
                pass
        with pytest.raises(ActorLocked):
            await two.inspect("a")
        assert not two.active
        await one.evict("a", force=True)
        async with two.use("a") as harness:  # free again
            assert await harness.conversation(1)
    finally:
        await one.close()
        await two.close()


async def test_unknown_and_invalid_actors_touch_no_file(tmp_path: Path) -> None:
    host = ActorHost(host_config(tmp_path))
    await host.start()
    try:
        with pytest.raises(UnknownActor):
            async with host.use("ghost"):
                pass
        with pytest.raises(UnknownActor):
            await host.inspect("ghost")
        for bad in ("", "a.b", "../x", "x" * 65, "a\n", "é"):
            with pytest.raises(InvalidActorId):
                async with host.use(bad, create=True):
                    pass
            with pytest.raises(InvalidActorId):
                check_actor_id(bad)
        assert not host.exists("ghost")
        assert files(tmp_path) == []
    finally:
        await host.close()


async def test_a_failed_request_that_created_an_actor_leaves_no_files(tmp_path: Path) -> None:
    host = ActorHost(host_config(tmp_path))
    await host.start()
    try:
        with pytest.raises(RuntimeError):
            async with host.use("fresh", create=True):
                raise RuntimeError("refused")
        await eventually(lambda: not host.active)
        assert files(tmp_path) == []
        # Once something is committed, a failing request removes nothing.
        with pytest.raises(RuntimeError):
            await _create_root_then_fail(host, "kept")
        assert host.exists("kept") and host.active == {"kept"}
    finally:
        await host.close()


async def _create_root_then_fail(host: ActorHost, actor: str) -> None:
    async with host.use(actor, create=True) as harness:
        await harness.root(agent=AGENT)
        raise RuntimeError("refused later")


async def test_closing_writes_nothing_and_the_next_host_finishes_the_work(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    data = tmp_path / "data"
    host = ActorHost(host_config(data))
    await host.start()
    sid = await submit(host, "a", f"gate:{gate}")
    await asyncio.sleep(0.1)
    before = outcomes(data / "a.sqlite")
    await host.close()
    assert outcomes(data / "a.sqlite") == before  # closing wrote no outcome
    with pytest.raises(HostClosed):
        async with host.use("a"):
            pass

    again = ActorHost(host_config(data))
    await again.start()
    try:
        await eventually(lambda: "a" in again.active)  # recovered: its work was due
        gate.touch()
        async with again.use("a") as harness:
            submission = await harness.submission(sid)
            assert submission is not None
            assert (await submission.wait(timeout=10)).status == "done"
    finally:
        await again.close()


def test_the_wake_heap_fires_each_actor_once_at_its_latest_time() -> None:
    clock = VirtualClock(start=1_000)
    fired: list[tuple[str, int]] = []
    heap = WakeHeap(clock, lambda actor: fired.append((actor, clock.now())))
    heap.set("a", 1_500)
    heap.set("b", 1_200)
    heap.set("a", 1_300)  # replaces a's earlier entry
    heap.set("c", 1_100)
    heap.discard("c")
    assert heap.pending() == {"a": 1_300, "b": 1_200} and len(heap) == 2
    clock.advance(150)
    assert fired == []
    clock.advance(100)
    assert fired == [("b", 1_250)]
    clock.advance(49)
    assert fired == [("b", 1_250)]  # a is due at 1_300, not at its replaced 1_500
    clock.advance(1)
    assert fired == [("b", 1_250), ("a", 1_300)]
    clock.advance(1_000)
    assert len(fired) == 2
    assert heap.pending() == {}
    heap.set("d", 3_000)
    heap.close()
    clock.advance(5_000)
    assert [a for a, _ in fired] == ["b", "a"]
