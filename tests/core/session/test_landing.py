"""land_shielded: a commit's landing runs to its end whatever happens to the committer,
on the committer's stack while it does not suspend."""

from __future__ import annotations

import asyncio

import pytest

from core.session.landing import land_shielded


async def test_a_landing_that_does_not_suspend_finishes_on_the_callers_stack() -> None:
    steps: list[str] = []

    async def landing() -> None:
        steps.append("landed")

    before = len(asyncio.all_tasks())
    await land_shielded(landing())
    assert steps == ["landed"]
    assert len(asyncio.all_tasks()) == before  # no task of its own


async def test_a_suspended_landing_finishes_even_if_the_committer_is_cancelled() -> None:
    gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    steps: list[str] = []

    async def landing() -> None:
        steps.append("started")
        await gate
        steps.append("landed")

    committer = asyncio.ensure_future(land_shielded(landing()))
    await asyncio.sleep(0)
    assert steps == ["started"]
    committer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await committer
    gate.set_result(None)
    for _ in range(3):
        await asyncio.sleep(0)
    assert steps == ["started", "landed"]


async def test_a_landing_failure_reaches_the_committer() -> None:
    async def landing() -> None:
        await asyncio.sleep(0)
        raise ValueError("rejected")

    with pytest.raises(ValueError, match="rejected"):
        await land_shielded(landing())
