"""The single alarm: the time to arm, redundant re-arms skipped, the crash-loop bound."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from runtimes.cloudflare.alarm import (
    HEARTBEAT_MS,
    AlarmFailures,
    AlarmGuard,
    AlarmReport,
    AlarmSlot,
    SqlFailureStore,
    alarm_time,
    backoff_ms,
)
from tests.cloudflare.standin import DurableObjectHome

NOW = 1_800_000_000_000


@pytest.fixture
def home(tmp_path: Path) -> Iterator[DurableObjectHome]:
    home = DurableObjectHome(tmp_path / "do.sqlite")
    yield home
    home.close()


def test_alarm_time_is_the_earliest_deadline_or_a_heartbeat_while_tasks_run() -> None:
    assert alarm_time(None, NOW, running=False) is None
    assert alarm_time(NOW, NOW, running=False) == NOW  # due, nobody working: fire now
    assert alarm_time(NOW - 5, NOW, running=False) == NOW  # overdue is "now", not the past
    assert alarm_time(NOW + 60_000, NOW, running=False) == NOW + 60_000
    # Running: the heartbeat, unless a deadline comes first.
    assert alarm_time(NOW, NOW, running=True) == NOW + HEARTBEAT_MS
    assert alarm_time(None, NOW, running=True) == NOW + HEARTBEAT_MS
    assert alarm_time(NOW + 5_000, NOW, running=True) == NOW + 5_000
    assert alarm_time(NOW + 3_600_000, NOW, running=True) == NOW + HEARTBEAT_MS
    assert alarm_time(NOW, NOW, running=True, heartbeat_ms=10) == NOW + 10


async def test_the_slot_arms_deletes_and_skips_what_would_not_change(
    home: DurableObjectHome,
) -> None:
    slot = AlarmSlot(home.open())
    assert await slot.arm(NOW + 60_000, NOW, running=False) == NOW + 60_000
    assert (home.alarm, home.alarm_sets) == (NOW + 60_000, 1)
    await slot.arm(NOW + 60_000, NOW + 10, running=False)  # unchanged: no call
    assert home.alarm_sets == 1
    await slot.arm(NOW + 30_000, NOW, running=False)  # a sooner deadline is armed exactly
    assert (home.alarm, home.alarm_sets) == (NOW + 30_000, 2)
    # A heartbeat: armed once, then kept while the armed one is still ahead and sooner.
    await slot.arm(NOW, NOW, running=True)
    assert (home.alarm, home.alarm_sets) == (NOW + 30_000, 2)
    await slot.arm(NOW + 1_000, NOW + 1_000, running=True)
    assert home.alarm_sets == 2
    await slot.arm(NOW + 31_000, NOW + 31_000, running=True)  # the armed one has passed
    assert (home.alarm, home.alarm_sets) == (NOW + 61_000, 3)
    # Nothing left to wake for: an alarm due within a heartbeat is left to fire (its
    # delivery only looks); with keep_near=False (parking, a discarded actor) it goes.
    await slot.arm(None, NOW + 32_000, running=False)
    assert (home.alarm, home.alarm_sets, home.alarm_deletes) == (NOW + 61_000, 3, 0)
    await slot.arm(None, NOW + 32_000, running=False, keep_near=False)
    assert (home.alarm, home.alarm_deletes) == (None, 1)
    # A new isolate reads what is armed before deciding (no duplicate setAlarm).
    await AlarmSlot(home.open()).arm(None, NOW, running=False)
    assert home.alarm_sets == 3
    home.alarm = NOW + 5
    fresh = AlarmSlot(home.open())
    await fresh.arm(NOW + 5, NOW, running=False)
    assert home.alarm_sets == 3
    fresh.consumed()  # the alarm fired: workerd cleared it
    await fresh.arm(NOW + 5, NOW, running=False)
    assert home.alarm_sets == 4
    # An alarm further out than a heartbeat is deleted: it could wake a fresh isolate.
    await fresh.arm(NOW + 3_600_000, NOW, running=False)
    await fresh.arm(None, NOW, running=False)
    assert (home.alarm, home.alarm_sets, home.alarm_deletes) == (None, 5, 2)


def test_backoff_doubles_from_two_seconds_and_is_capped() -> None:
    assert [backoff_ms(n) for n in (1, 2, 3, 4)] == [2_000, 4_000, 8_000, 16_000]
    assert backoff_ms(30) == 300_000


async def _deliver(
    home: DurableObjectHome, guard: AlarmGuard, work: Callable[[], Awaitable[None]]
) -> bool:
    home.alarm = None  # workerd clears the alarm as it delivers it
    return await guard.run(work, NOW)


def _guard(home: DurableObjectHome, reports: list[AlarmReport], **kw: int) -> AlarmGuard:
    storage = home.open()
    return AlarmGuard(SqlFailureStore(storage.sql), AlarmSlot(storage), reports.append, **kw)


async def test_a_failing_alarm_backs_off_reports_and_gives_up(home: DurableObjectHome) -> None:
    reports: list[AlarmReport] = []
    guard = _guard(home, reports, max_failures=3)

    async def fails() -> None:
        raise RuntimeError("model endpoint is down")

    for attempt in (1, 2):
        assert not await _deliver(home, guard, fails)
        assert home.alarm == NOW + backoff_ms(attempt)
    assert not await _deliver(home, guard, fails)
    assert [(r.attempt, r.gave_up) for r in reports] == [(1, False), (2, False), (3, True)]
    assert reports[-1].error == "RuntimeError: model endpoint is down"
    assert home.alarm is None  # given up: nothing re-arms it
    ran: list[int] = []

    async def works() -> None:
        ran.append(1)

    assert not await _deliver(home, guard, works)  # a stray delivery after giving up does nothing
    assert ran == []
    # The record survives an eviction; a request resets it, and the next alarm runs.
    guard = _guard(home, reports, max_failures=3)
    assert guard.failures.gave_up and guard.failures.count == 3
    guard.reset()
    assert await _deliver(home, guard, works)
    assert ran == [1] and guard.failures == AlarmFailures()


async def test_attempts_that_die_with_their_isolate_count_towards_the_bound(
    home: DurableObjectHome,
) -> None:
    reports: list[AlarmReport] = []

    class IsolateLost(BaseException):
        """Out of memory: the handler never returns and no ``except Exception`` runs."""

    async def kills_the_isolate() -> None:
        raise IsolateLost

    for _ in range(4):
        guard = _guard(home, reports, max_failures=4)  # a new isolate per delivery
        with pytest.raises(IsolateLost):
            await _deliver(home, guard, kills_the_isolate)
    assert reports == []
    ran: list[int] = []

    async def work() -> None:
        ran.append(1)

    guard = _guard(home, reports, max_failures=4)
    assert not await _deliver(
        home, guard, work
    )  # the fifth delivery is refused: the loop is bounded
    assert ran == []
    assert len(reports) == 1 and reports[0].gave_up and reports[0].attempt == 4
    assert "did not return" in reports[0].error


async def test_a_success_clears_the_count(home: DurableObjectHome) -> None:
    reports: list[AlarmReport] = []
    guard = _guard(home, reports, max_failures=2)
    calls = 0

    async def flaky() -> None:
        nonlocal calls
        calls += 1
        if calls % 2:
            raise OSError("transient")

    for _ in range(5):  # fail, succeed, fail, succeed, ...: never two in a row, never gives up
        await _deliver(home, guard, flaky)
    assert not any(r.gave_up for r in reports)
    assert guard.failures.count == 1
