"""The Clock port: the virtual clock for tests and the system clock of the local host."""

from __future__ import annotations

import asyncio
import time

import pytest

from core.testing.clock import VirtualClock
from runtimes.actor.clock import SystemClock


def test_the_virtual_clock_fires_due_timers_in_deadline_order_and_only_when_told() -> None:
    clock = VirtualClock(start=1000)
    fired: list[str] = []
    clock.call_at(1300, lambda: fired.append("c"))
    clock.call_at(1100, lambda: fired.append("a"))
    clock.call_at(1100, lambda: fired.append("b"))
    cancelled = clock.call_at(1200, lambda: fired.append("never"))
    cancelled.cancel()
    assert clock.next_timer == 1100
    assert clock.advance(99) == 0 and fired == []
    assert clock.advance(1) == 2 and fired == ["a", "b"]
    assert clock.advance(500) == 1 and fired == ["a", "b", "c"]
    assert clock.now() == 1600 and clock.next_timer is None
    with pytest.raises(ValueError, match="backwards"):
        clock.set(10)


def test_a_virtual_clock_that_never_advances_does_not_keep_cancelled_timers() -> None:
    # A harness on a virtual clock sets and cancels a progress timer per response; a
    # 50,000-message run kept every one (and what its callback held) until time moved.
    import gc
    import weakref

    class Payload:
        pass

    clock = VirtualClock(start=0)
    kept = clock.call_at(10**9, lambda: None)
    refs = []
    for _ in range(10_000):
        payload = Payload()
        refs.append(weakref.ref(payload))
        clock.call_at(10**9, lambda p=payload: print(p)).cancel()  # type: ignore[misc]
    del payload
    gc.collect()
    assert all(ref() is None for ref in refs)  # callbacks let go at cancel
    assert len(clock._timers) < 200  # the heap is rebuilt once most of it is cancelled
    assert clock.next_timer == 10**9 and clock.set(10**9) == 1
    kept.cancel()  # after firing: harmless


async def test_the_system_clock_uses_wall_time_and_loop_timers() -> None:
    clock = SystemClock()
    before = time.time() * 1000
    assert abs(clock.now() - before) < 1000
    fired = asyncio.Event()
    start = time.monotonic()
    clock.call_at(clock.now() + 30, fired.set)
    await asyncio.wait_for(fired.wait(), 2)
    assert time.monotonic() - start >= 0.025
    cancelled = asyncio.Event()
    clock.call_at(clock.now() + 10, cancelled.set).cancel()
    await asyncio.sleep(0.05)
    assert not cancelled.is_set()
