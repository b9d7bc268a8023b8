"""Recurring schedules: one timer task per schedule that submits its message at every
occurrence exactly once — across crashes, duplicate wakes and eviction — on the wall
clock of its zone across daylight-saving changes, with ``overlap`` and ``catch_up``."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from core import JsonObject
from core.errors import InvalidInput, RequestIdConflict, TaskNotFound
from core.faux import FauxModel, faux_message, faux_tool_call
from core.harness.cadence import Cadence
from core.harness.reminders import reminders_extension
from core.harness.schedules import LATE_GRACE_MS, SCHEDULE
from core.records import Aborted, Completed, SubmissionRecord, Waiting
from core.storage import SubmissionQuery
from core.testing.wrappers import CommitFault
from tests.core.harness.support import MODEL, Rig
from tests.core.support import settle, until

VIENNA = ZoneInfo("Europe/Vienna")


def ms(*args: int, tz: Any = UTC) -> int:
    return int(datetime(*args, tzinfo=tz).timestamp() * 1000)  # type: ignore[arg-type,misc]


def local(at: int) -> datetime:
    return datetime.fromtimestamp(at / 1000, VIENNA)


async def occurrences(h: Any, conversation_id: int = 1) -> list[SubmissionRecord]:
    page = await h.session.storage.scan_submissions(
        SubmissionQuery(conversation_id=conversation_id, limit=1000)
    )
    return [s for s in page.items if (s.request_id or "").startswith("schedule:")]


def occurrence_times(subs: list[SubmissionRecord]) -> list[int]:
    return [int((s.request_id or "").rsplit(":", 1)[1]) for s in subs]


def answering(rig: Rig) -> None:
    rig.faux = FauxModel(fallback=faux_message("noted"))


def poisoned(h: Any) -> Callable[[], bool]:
    return lambda: h.session.poisoned is not None


async def step_to(rig: Rig, h: Any, at: int) -> None:
    """Advance the virtual clock to ``at`` and let the due work settle."""
    rig.clock.set(at)
    await settle()
    await h.wait_for_idle()


# ---------------------------------------------------------------- the calendar


@pytest.mark.parametrize(
    ("start", "days"),
    [((2026, 3, 26), 6), ((2026, 10, 22), 6)],  # around 29 March and 25 October 2026
    ids=["spring-forward", "fall-back"],
)
async def test_a_daily_cron_fires_at_nine_local_on_the_days_around_a_dst_change(
    tmp_path: Path, start: tuple[int, int, int], days: int
) -> None:
    rig = Rig(tmp_path)
    answering(rig)
    rig.clock.set(ms(*start))
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    made = await root.schedule("Daily report", cron="0 9 * * *", timezone="Europe/Vienna")
    assert made.next[0] == f"{start[0]}-{start[1]:02d}-{start[2]:02d}T09:00:00+0" + (
        "1:00" if start[1] == 3 else "2:00"
    )
    for _ in range(days):
        due = h.next_wake()
        assert due is not None
        await step_to(rig, h, due)
    fired = occurrence_times(await occurrences(h))
    assert len(fired) == days
    assert [(local(t).hour, local(t).minute) for t in fired] == [(9, 0)] * days
    assert len({local(t).date() for t in fired}) == days  # one a day, none twice
    offsets = {local(t).utcoffset() for t in fired}
    assert len(offsets) == 2  # both sides of the change were crossed
    await h.close()


def test_the_calendar_across_the_gap_and_the_repeat_is_as_documented() -> None:
    def upcoming(cron: str, *start: int, n: int = 4) -> list[str]:
        cadence = Cadence.of(cron=cron, every=None, timezone="Europe/Vienna", anchor=ms(*start))
        return [cadence.iso(t) for t in cadence.upcoming(cadence.anchor, n)]

    # A fixed time in the spring gap fires at the first minute after it, once.
    assert upcoming("30 2 * * *", 2026, 3, 27)[1:3] == [
        "2026-03-28T02:30:00+01:00",
        "2026-03-29T03:00:00+02:00",
    ]
    # A fixed time in the autumn repeat fires once, at its first (summer-time) instance.
    assert upcoming("30 2 * * *", 2026, 10, 24)[1:3] == [
        "2026-10-25T02:30:00+02:00",
        "2026-10-26T02:30:00+01:00",
    ]
    # A wildcard hour follows the real clock: the repeated hour runs twice, the
    # skipped one not at all.
    assert upcoming("30 * * * *", 2026, 10, 24, 23) == [
        "2026-10-25T01:30:00+02:00",
        "2026-10-25T02:30:00+02:00",
        "2026-10-25T02:30:00+01:00",
        "2026-10-25T03:30:00+01:00",
    ]
    assert upcoming("30 * * * *", 2026, 3, 28, 23, n=3) == [
        "2026-03-29T00:30:00+01:00",
        "2026-03-29T01:30:00+01:00",
        "2026-03-29T03:30:00+02:00",
    ]


def test_the_latest_of_many_missed_occurrences_is_found_without_counting_them_all() -> None:
    cadence = Cadence.of(cron="*/5 * * * *", every=None, timezone="UTC", anchor=ms(2026, 1, 1))
    first = cadence.next_after(cadence.anchor)
    assert first is not None
    latest, missed = cadence.latest(first, ms(2026, 2, 1, 12, 7))
    assert latest == ms(2026, 2, 1, 12, 5)
    assert missed >= 1000  # counted up to the limit, then found backwards


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"cron": "0 9 * *"}, "cron"),
        ({"cron": "61 9 * * *"}, "cron"),
        ({"cron": "0 0 9 * * *"}, "cron"),  # six fields: seconds are not offered
        ({"cron": "0 9 * * *", "timezone": "Mars/Olympus"}, "timezone"),
        ({"every": 59}, "every"),
        ({"every": "30s"}, "every"),
        ({"every": "ten minutes"}, "every"),
        ({"cron": "0 9 * * *", "every": 3600}, "cron"),
        ({}, "cron"),
        ({"every": 3600, "until": 1}, "until"),
    ],
)
async def test_a_bad_schedule_is_refused_naming_its_field_and_writes_nothing(
    tmp_path: Path, kwargs: dict[str, Any], field: str
) -> None:
    rig = Rig(tmp_path)
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    before = rig.commits
    with pytest.raises(InvalidInput) as refused:
        await root.schedule("x", **kwargs)
    assert refused.value.field == field, refused.value
    assert rig.commits == before and h.schedules() == []
    await h.close()


# ---------------------------------------------------------------- exactly once


async def test_every_minute_for_ten_minutes_with_an_eviction_and_a_crash_submits_ten(
    tmp_path: Path,
) -> None:
    rig = Rig(tmp_path, "sqlite")
    answering(rig)
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    start = rig.clock.now()
    made = await root.schedule("tick", every=60)
    assert made.next_at == start + 60_000

    def occurrence(writes: Any) -> bool:
        return any((getattr(w, "request_id", None) or "").startswith("schedule:") for w in writes)

    for minute in range(1, 11):
        if minute == 4:  # evicted: closed with its deadline kept, reopened by the wake
            assert h.next_wake() == start + 4 * 60_000
            await h.close()
            rig.clock.set(start + 4 * 60_000)
            h = await rig.open()
            h.resume()
            await settle()
            await h.wait_for_idle()
            continue
        if minute == 7:  # the process dies right after the occurrence's commit
            await h.close()
            h = await rig.open(faults=[CommitFault("after", match=occurrence)])
            rig.clock.set(start + 7 * 60_000)
            h.resume()
            await until(poisoned(h))
            await rig.crash(h)
            h = await rig.open()  # the wake comes again: the occurrence is done
            h.resume()
            await h.wait_for_idle()
            continue
        await step_to(rig, h, start + minute * 60_000)
    subs = await occurrences(h)
    assert occurrence_times(subs) == [start + m * 60_000 for m in range(1, 11)]
    assert len({s.request_id for s in subs}) == 10
    (listed,) = h.schedules()
    assert listed.fired == 10 and listed.skipped == 0
    await h.close()


async def test_a_wake_delivered_twice_fires_the_occurrence_once(tmp_path: Path) -> None:
    rig = Rig(tmp_path, "sqlite")
    answering(rig)
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    made = await root.schedule("ping", every="5m")
    due = made.next_at
    assert due is not None
    await h.close()
    rig.clock.set(due)
    for _ in range(2):  # the host's alarm arrives twice: each opens the actor and resumes
        h = await rig.open()
        h.resume()
        await settle()
        await h.wait_for_idle()
        await h.close()
    h = await rig.open()
    assert occurrence_times(await occurrences(h)) == [due]
    assert h.next_wake() == due + 300_000
    await h.close()


# ---------------------------------------------------------------- overlap and catch-up


@pytest.mark.parametrize("overlap", ["skip", "queue"])
async def test_overlap_skip_drops_an_occurrence_while_the_previous_run_still_goes(
    tmp_path: Path, overlap: str
) -> None:
    rig = Rig(tmp_path)
    gate = asyncio.Event()

    async def slow(_request: Any, _state: Any) -> Any:
        await gate.wait()
        return faux_message("done at last")

    rig.faux = FauxModel([slow], fallback=faux_message("ok"))
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    start = rig.clock.now()
    await root.schedule("report", every=60, overlap=overlap)  # type: ignore[arg-type]
    rig.clock.set(start + 60_000)  # the first occurrence's run hangs on the model
    await until(lambda: rig.faux.state.call_count == 1)
    rig.clock.set(start + 120_000)  # the second comes while it still runs
    await until(lambda: h.schedules()[0].next_at == start + 180_000)
    await settle()
    gate.set()
    await h.wait_for_idle()
    fired = occurrence_times(await occurrences(h))
    (listed,) = h.schedules()
    if overlap == "skip":
        assert fired == [start + 60_000]
        assert listed.skipped == 1
    else:
        assert fired == [start + 60_000, start + 120_000]
        assert rig.faux.state.call_count == 2
    await h.close()


@pytest.mark.parametrize("catch_up", ["none", "latest"])
async def test_occurrences_missed_while_down_follow_catch_up(tmp_path: Path, catch_up: str) -> None:
    rig = Rig(tmp_path, "sqlite")
    answering(rig)
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    start = rig.clock.now()
    await root.schedule("hourly", every="1h", catch_up=catch_up)  # type: ignore[arg-type]
    await h.close()
    down_until = start + 5 * 3_600_000 + 30 * 60_000  # five occurrences missed
    rig.clock.set(down_until)
    h = await rig.open()
    h.resume()
    await settle()
    await h.wait_for_idle()
    fired = occurrence_times(await occurrences(h))
    assert fired == ([start + 5 * 3_600_000] if catch_up == "latest" else [])
    (listed,) = h.schedules()
    assert listed.next_at == start + 6 * 3_600_000
    assert listed.skipped == (4 if catch_up == "latest" else 5)
    await h.close()


async def test_catch_up_none_still_fires_an_occurrence_whose_wake_came_a_little_late(
    tmp_path: Path,
) -> None:
    rig = Rig(tmp_path)
    answering(rig)
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    made = await root.schedule("on time enough", every="1h", catch_up="none")
    assert made.next_at is not None
    await step_to(rig, h, made.next_at + LATE_GRACE_MS)
    assert occurrence_times(await occurrences(h)) == [made.next_at]
    await h.close()


# ---------------------------------------------------------------- life cycle


async def test_until_ends_the_schedule_after_its_last_occurrence(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    answering(rig)
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    start = rig.clock.now()
    made = await root.schedule("three times", every=60, until=start + 180_000)
    assert len(made.next) == 3
    for minute in (1, 2, 3):
        await step_to(rig, h, start + minute * 60_000)
    assert len(await occurrences(h)) == 3
    assert h.schedules() == [] and h.next_wake() is None
    task = await h.session.storage.task(made.id)
    assert task is not None and isinstance(task.outcome, Completed)
    await h.close()


async def test_a_request_id_makes_creation_idempotent_and_cancel_stops_it(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    answering(rig)
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    first = await root.schedule("daily", cron="0 9 * * *", request_id="s-1")
    again = await root.schedule("daily", cron="0 9 * * *", request_id="s-1")
    assert again.id == first.id and len(h.schedules()) == 1
    before = rig.commits
    with pytest.raises(RequestIdConflict):
        await root.schedule("daily", cron="0 10 * * *", request_id="s-1")
    assert rig.commits == before
    ended = await h.cancel_schedule(first.id)
    assert ended.status == "aborted" and ended.next == ()
    assert h.schedules() == [] and h.next_wake() is None
    task = await h.session.storage.task(first.id)
    assert task is not None and isinstance(task.outcome, Aborted)
    with pytest.raises(TaskNotFound):
        await h.cancel_schedule(first.id)
    # The request id still names the cancelled schedule: a late retry recreates nothing.
    assert (await root.schedule("daily", cron="0 9 * * *", request_id="s-1")).id == first.id
    assert h.schedules() == []
    await h.close()


async def test_the_model_creates_and_cancels_a_schedule_with_its_tools(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    rig.registry.install(reminders_extension())
    args: JsonObject = {"message": "stand-up", "cron": "0 9 * * 1-5", "timezone": "Europe/Vienna"}
    rig.faux = FauxModel(
        [
            faux_message(faux_tool_call("schedule", args)),
            faux_message("Scheduled."),
        ],
        fallback=faux_message("ok"),
    )
    h = await rig.open()
    root = await h.root(agent={"model": MODEL, "tools": ["schedule", "cancel_schedule"]})
    await (await root.submit("every weekday at nine, remind me of the stand-up")).wait()
    (made,) = h.schedules()
    assert made.message == "stand-up" and made.next[0].endswith("T09:00:00+01:00")
    result = rig.faux.state.requests[-1].messages[-1]
    assert f"Schedule {made.id} set" in str(result)
    rig.faux.respond(
        faux_message(faux_tool_call("cancel_schedule", {"id": made.id})),
        faux_message("Cancelled."),
    )
    await (await root.submit("cancel it")).wait()
    await until(lambda: h.schedules() == [])
    task = await h.engine.wait_for_task(made.id)
    assert task.kind == SCHEDULE and isinstance(task.outcome, Aborted)
    await h.close()


async def test_invariant_19_an_occurrence_commits_with_the_schedules_next_occurrence(
    tmp_path: Path,
) -> None:
    rig = Rig(tmp_path)
    answering(rig)
    h = await rig.open()
    events: list[Any] = []
    h.session.subscribe(events.append)
    root = await h.root(agent={"model": MODEL})
    made = await root.schedule("tick", every=60)
    assert made.next_at is not None
    for n in (1, 2):
        await step_to(rig, h, made.next_at + (n - 1) * 60_000)
    ids = {s.request_id for s in await occurrences(h)}
    first: dict[str | None, Any] = {}  # each occurrence's first commit: the one admitting it
    for event in events:
        for sub in event.submissions:
            if sub.request_id in ids:
                first.setdefault(sub.request_id, event)
    fired = list(first.values())
    assert len(fired) == 2
    for n, event in enumerate(fired, start=1):
        (task,) = [t for t in event.tasks if t.id == made.id]
        # The same commit moved the schedule on: it waits for the following occurrence.
        assert isinstance(task.state, Waiting)
        assert task.state.until == made.next_at + n * 60_000
        assert task.checkpoint is not None and task.checkpoint["last"] in {
            s.id for s in event.submissions
        }
    await h.close()


async def test_a_schedule_is_listed_among_the_timers_with_its_message(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    made = await root.schedule("Daily report", cron="0 9 * * *", timezone="Europe/Vienna")
    (timer,) = h.timers()
    assert timer["kind"] == SCHEDULE and timer["task"] == made.id
    assert timer["message"] == "Daily report" and timer["at"] == made.next_at
    await h.close()
