"""WaiterRegistry: waits by key, settled or failed by whoever owns the registry, and failed
by the session that handed it out when an uncertain storage failure poisons it."""

from __future__ import annotations

import asyncio

import pytest

from core.errors import SessionClosed, SessionPoisoned
from core.session import Session, WaiterRegistry
from core.storage import MemoryState, MemoryStorage
from core.testing.clock import VirtualClock
from core.testing.wrappers import CommitFault, FaultyStorage


async def test_settle_resolves_every_wait_on_the_key_and_only_those() -> None:
    registry: WaiterRegistry[int, str] = WaiterRegistry()
    a1 = asyncio.ensure_future(registry.wait(1))
    a2 = asyncio.ensure_future(registry.wait(1))
    b = asyncio.ensure_future(registry.wait(2))
    await asyncio.sleep(0)
    assert registry and sorted(registry.waited()) == [1, 2]
    registry.settle(1, "one")
    assert await a1 == "one" and await a2 == "one"
    assert not b.done() and registry.waited() == [2]
    b.cancel()  # cancelling a wait cancels only the wait, and leaves no trace
    with pytest.raises(asyncio.CancelledError):
        await b
    assert not registry and registry.waited() == []


async def test_fail_all_gives_each_waiter_its_own_copy_of_the_error() -> None:
    registry: WaiterRegistry[int, None] = WaiterRegistry()
    waits = [asyncio.ensure_future(registry.wait(k)) for k in (1, 1, 2)]
    await asyncio.sleep(0)
    registry.fail_all(SessionClosed("closed"))
    errors = await asyncio.gather(*waits, return_exceptions=True)
    assert all(isinstance(e, SessionClosed) for e in errors)
    assert len({id(e) for e in errors}) == 3
    assert not registry


async def test_a_wait_with_a_deadline_times_out_on_the_clock() -> None:
    clock = VirtualClock()
    registry: WaiterRegistry[int, int] = WaiterRegistry()
    wait = asyncio.ensure_future(
        registry.wait(7, clock=clock, deadline=clock.now() + 1000, expired="too slow")
    )
    await asyncio.sleep(0)
    clock.advance(999)
    await asyncio.sleep(0)
    assert not wait.done()
    clock.advance(1)
    with pytest.raises(TimeoutError, match="too slow"):
        await wait
    assert not registry


async def test_a_poisoned_session_fails_the_registries_it_handed_out() -> None:
    storage = FaultyStorage(MemoryStorage(MemoryState()), [CommitFault("during", nth=1)])
    session = await Session.open(storage, VirtualClock())
    registry: WaiterRegistry[int, None] = session.waiters()
    wait = asyncio.ensure_future(registry.wait(1))
    await asyncio.sleep(0)
    with pytest.raises(SessionPoisoned):
        await session.commit(lambda tx: tx.ensure_root())
    with pytest.raises(SessionPoisoned):
        await asyncio.wait_for(wait, 5)  # a registry the session forgot would time out
