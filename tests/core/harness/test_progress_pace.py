"""The partial-commit budget streaming responses share (core.harness.live.ProgressPace)."""

from __future__ import annotations

from core.harness.live import ProgressPace, Throttle
from core.testing.clock import VirtualClock
from tests.core.support import settle


async def _stream(pace: ProgressPace | None, n: int, ms: int) -> tuple[int, ProgressPace | None]:
    """``n`` streams, each a throttle with a 100 ms interval and a 100 ms quiet start,
    every one changed every 10 ms for ``ms``: how many progress commits all made."""
    clock = VirtualClock()
    commits = 0

    async def commit() -> int:
        nonlocal commits
        commits += 1
        return 10

    made = [Throttle(clock, 100, commit, print, quiet_ms=100, pace=pace) for _ in range(n)]
    for _ in range(ms // 10):
        for t in made:
            t.changed(5)
        clock.advance(10)
        await settle()
    for t in made:
        await t.close()
    return commits, pace


async def test_a_few_streams_commit_at_their_own_interval() -> None:
    alone, _ = await _stream(None, 5, 1000)
    paced, pace = await _stream(ProgressPace(100), 5, 1000)
    # Five streams at 10 commits/s each fit the budget of 100/s: nothing changes.
    assert paced == alone
    assert 5 * 8 <= alone <= 5 * 10
    assert pace is not None and pace.streaming == 0  # closed throttles no longer count


async def test_many_streams_share_the_budget_and_their_windows_lengthen() -> None:
    alone, _ = await _stream(None, 200, 2000)
    paced, pace = await _stream(ProgressPace(100), 200, 2000)
    assert alone >= 200 * 18  # each at its own 100 ms interval: ~20 per stream
    # 200 streams share 100 commits/s: windows of 2 s each, the quiet start included,
    # so each stream commits once in its first 2 s instead of ~20 times.
    assert paced <= 200 * 1
    assert paced >= 1
    assert pace is not None and pace.streaming == 0


async def test_no_budget_keeps_every_window() -> None:
    pace = ProgressPace(0)
    assert pace.window_ms() == 0
    alone, _ = await _stream(None, 50, 500)
    paced, _ = await _stream(pace, 50, 500)
    assert paced == alone
