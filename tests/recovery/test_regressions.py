"""Defects the recovery tests found, each reproduced on its own.

1. A poisoned session left its waiters hanging. An uncertain storage failure in a task's
   commit (an I/O error, a full disk) poisons the session, so no submission can settle
   and no task can end in it any more; yet ``Submission.wait()``, ``wait_for_idle()``,
   ``wait_for_task()`` and ``Conversation.wait_for_idle()`` waited forever, and a host
   long-polling a submission never learned it had to reopen the actor. Now the session
   tells its poison listeners, and the scheduler and the harness fail every waiter with
   ``SessionPoisoned`` (and refuse new waits the same way).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from core.errors import SessionPoisoned
from core.harness import HarnessSettings
from core.harness.settings import CompactionSettings
from core.records import Entry
from core.storage.port import Write
from core.testing.wrappers import CommitFault
from tests.recovery.support import MODEL, World


def _answer(writes: list[Write]) -> bool:
    """The commit of a final answer (not of the tool round's assistant entry)."""
    return any(
        isinstance(w, Entry)
        and w.kind == "assistant"
        and isinstance(w.message, dict)
        and w.message.get("stop_reason") == "stop"
        for w in writes
    )


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
async def test_waiters_fail_when_the_session_is_poisoned(tmp_path: Path, backend: str) -> None:
    world = World(tmp_path, backend)  # type: ignore[arg-type]
    world.call("slow")  # the run waits on a tool, so every waiter is waiting in time
    h = await world.open([CommitFault("during", match=_answer)])
    root = await h.root(agent={"model": MODEL})
    sub = await root.submit("go")
    waits = [
        asyncio.ensure_future(sub.wait()),
        asyncio.ensure_future(h.wait_for_idle()),
        asyncio.ensure_future(root.wait_for_idle()),
    ]
    await asyncio.sleep(0.01)
    assert not any(w.done() for w in waits)
    world.gate.set()  # the tool ends; the next answer commit fails uncertainly
    done, pending = await asyncio.wait(waits, timeout=5)
    assert not pending, "a waiter still hangs on a poisoned session"
    for w in done:
        assert isinstance(w.exception(), SessionPoisoned), w.exception()
    # New waits are refused at once, not parked.
    with pytest.raises(SessionPoisoned):
        await asyncio.wait_for(sub.wait(), 1)
    with pytest.raises(SessionPoisoned):
        await asyncio.wait_for(h.wait_for_idle(), 1)
    live = next(t.id for t in h.session.tasks.values() if t.live)
    with pytest.raises(SessionPoisoned):
        await asyncio.wait_for(h.wait_for_task(live), 1)
    await world.crash()

    # The reopened actor answers and settles the input exactly once.
    h = await world.open()
    record = await asyncio.wait_for((await h.submission(sub.id)).wait(), 5)  # type: ignore[union-attr]
    assert record.status == "done"
    await world.settle()
    assert not await world.problems(settled=True)
    await world.close()


async def test_an_aborted_compaction_clears_its_live_note(tmp_path: Path) -> None:
    """Found by the schedules (abort during a manual compaction, SQLite): 'conversation 1
    notes a finished compaction'. A task without an abort handler was aborted through
    the runtime's ``abort()`` commit, which skips the scheduler's settle hooks; the
    compaction's hook is what clears its note in ``live``, so the note outlived the task
    (and a stale note is read by the next automatic compaction's one-at-a-time check).
    The scheduler now settles such a task itself, hooks included."""
    world = World(tmp_path, "memory")
    world.settings = HarnessSettings(compaction=CompactionSettings(keep_recent_tokens=5))
    world.hold_summaries = True  # the summary request hangs until aborted
    h = await world.open()
    root = await h.root(agent={"model": MODEL})
    for n in range(3):
        await (await root.submit(f"something to compact {n}")).wait()
    task_id = await root.compact()
    await asyncio.sleep(0.01)
    assert (await root.live())["compaction"]["task"] == task_id  # type: ignore[index]
    assert world.faux.state.requests[-1].tools == []  # the summary request is in flight
    assert await root.abort() >= 1
    task = await h.wait_for_task(task_id)
    assert task.outcome is not None and task.outcome.kind == "aborted"
    assert "compaction" not in (await root.live())  # type: ignore[operator]
    await world.settle()
    assert not await world.problems(settled=True)
    await world.close()


def test_the_shrunk_schedule_that_found_the_compaction_note() -> None:
    """The schedule hypothesis found (shrunk, replayed step by step on SQLite)."""
    from tests.recovery.test_schedules import SqliteSchedule

    s = SqliteSchedule()
    s.start(tools="parallel", steering="one-at-a-time", follow_ups="one-at-a-time", tight=True)
    s.submit(0, "follow_up", None, 0, 0, None, ["quick"])
    s.fork(0, 0)
    s.script("answer", ["quick"])
    s.remind(0, 118)
    s.storage_fault("after", 2)
    s.submit(0, "follow_up", None, 0, 600, "retryable", ["quick"])
    s.submit(0, "follow_up", None, 0, 0, None, ["quick"])
    s.script("answer", ["quick"])
    s.script("answer", ["quick"])
    s.compact(0)
    s.abort(2, False)
    s.remind(2, 1)
    s.fork(7, 1000)
    s.crash_and_reopen(True)
    s.always_consistent()
    s.teardown()  # settles, then the full check (it failed here)
