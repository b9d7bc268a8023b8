"""Acceptance first (runtimes.actor.pacing): answering work waits while a submission is
being accepted, never longer than ``max_defer_s``, and at most ``batch`` model requests
start per loop iteration."""

from __future__ import annotations

import asyncio

import pytest

from core.testing import VirtualClock
from runtimes.actor.memory import MemoryHost
from runtimes.actor.pacing import AcceptFirst
from runtimes.actor.testing import KIT_AGENT, kit_config


async def _iterations(n: int) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def test_a_turn_does_not_suspend_when_nothing_is_being_accepted() -> None:
    turn = AcceptFirst().turn()
    with pytest.raises(StopIteration):
        turn.send(None)  # it returned without yielding to the loop


async def test_a_turn_waits_while_a_submission_is_accepted() -> None:
    pacer = AcceptFirst(max_defer_s=60)
    with pacer.accepting():
        waiter = asyncio.ensure_future(pacer.turn())
        await _iterations(5)
        assert not waiter.done()
        assert pacer.waiting == 1
    await _iterations(3)
    assert waiter.done()
    assert pacer.waiting == 0


async def test_acceptances_never_hold_answering_work_longer_than_max_defer() -> None:
    pacer = AcceptFirst(max_defer_s=0.02)
    loop = asyncio.get_running_loop()
    with pacer.accepting():  # held throughout: only the bound lets it go
        asked = loop.time()
        await asyncio.wait_for(pacer.turn(), timeout=5)
        assert loop.time() - asked >= 0.02


async def test_at_most_a_batch_of_turns_starts_per_loop_iteration() -> None:
    pacer = AcceptFirst(batch=2)
    turns = [asyncio.ensure_future(pacer.turn()) for _ in range(5)]
    await asyncio.sleep(0)  # each runs its first step in this iteration
    assert sum(t.done() for t in turns) == 2
    await _iterations(10)
    assert all(t.done() for t in turns)


async def test_a_cancelled_wait_does_not_hold_up_the_others() -> None:
    pacer = AcceptFirst(max_defer_s=60)
    with pacer.accepting():
        first = asyncio.ensure_future(pacer.turn())
        second = asyncio.ensure_future(pacer.turn())
        await _iterations(2)
        first.cancel()
    await _iterations(3)
    assert first.cancelled()
    assert second.done() and not second.cancelled()


async def test_the_pools_model_requests_wait_for_an_acceptance_to_end() -> None:
    host = MemoryHost(kit_config(), clock=VirtualClock())
    host.pacer.max_defer_s = 60
    await host.start()
    try:
        async with host.use("a", create=True) as harness:
            root = await harness.root(agent=dict(KIT_AGENT))
            with host.accepting():
                submission = await root.submit("hello")
                await _iterations(20)
                assert host.pacer.waiting == 1  # its generation's model request
                assert (await submission.status()).status != "done"
            assert (await submission.wait(timeout=5)).status == "done"
    finally:
        await host.close()
