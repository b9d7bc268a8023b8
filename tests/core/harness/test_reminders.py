"""Reminders: a background timer task that submits its message once when due — across
duplicate wakes, crashes and eviction — listed as a pending timer, cancelled by abort."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from core.faux import faux_message, faux_tool_call
from core.harness.reminders import REMINDER, reminders_extension
from core.records import Aborted, Completed, SubmissionRecord, Terminal
from core.storage import SubmissionQuery
from core.testing.wrappers import CommitFault
from core.times import iso_time
from tests.core.harness.support import MODEL, Rig, entries, kinds
from tests.core.support import settle, until


async def reminder_submissions(h: Any, conversation_id: int = 1) -> list[SubmissionRecord]:
    page = await h.session.storage.scan_submissions(
        SubmissionQuery(conversation_id=conversation_id)
    )
    return [s for s in page.items if (s.request_id or "").startswith("reminder:")]


async def test_a_reminder_waits_as_a_timer_then_submits_its_message_once(tmp_path: Path) -> None:
    rig = Rig(tmp_path, steps=[faux_message("Time to stretch!")])
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    start = rig.clock.now()
    task_id = (await root.remind("Remind me to stretch", after=3)).task
    assert h.timers() == [
        {
            "task": task_id,
            "kind": REMINDER,
            "conversation_id": root.id,
            "at": start + 3000,
            "at_iso": iso_time(start + 3000),
            "message": "Remind me to stretch",
        }
    ]
    assert h.next_wake() == start + 3000
    task = await h.session.storage.task(task_id)
    assert task is not None and task.background  # outside the conversation's idle
    await root.wait_for_idle()
    rig.clock.advance(2999)
    await settle()
    assert await reminder_submissions(h) == []
    rig.clock.advance(1)
    done = await h.engine.wait_for_task(task_id)
    (sub,) = await reminder_submissions(h)
    assert sub.request_id == f"reminder:{task_id}"
    assert done.state == Terminal(Completed({"submission": sub.id}))
    record = await (await h.submission(sub.id)).wait()  # type: ignore[union-attr]
    assert record.status == "done"
    assert kinds(await entries(h)) == ["user", "assistant"]
    assert h.timers() == []
    await h.close()


async def test_the_remind_tool_sets_the_timer_in_the_commit_of_its_result(tmp_path: Path) -> None:
    rig = Rig(
        tmp_path,
        steps=[
            faux_message(faux_tool_call("remind", {"message": "check the oven", "after": 5})),
            faux_message("I will remind you."),
            faux_message("The oven!"),
        ],
    )
    rig.registry.install(reminders_extension())
    h = await rig.open()
    events: list[Any] = []
    h.session.subscribe(events.append)
    root = await h.root(agent={"model": MODEL})
    start = rig.clock.now()
    await (await root.submit("remind me about the oven in 5 s")).wait()
    (timer,) = h.timers()
    assert timer["at"] == start + 5000 and timer["message"] == "check the oven"
    (together,) = [e for e in events if any(t.id == timer["task"] for t in e.tasks)]
    assert [x.kind for x in together.entries] == ["tool_result"]  # one commit for both
    # The model reads the time in ISO-8601 with its zone, not in epoch milliseconds.
    confirmation = together.entries[0].message["content"]  # type: ignore[index,call-overload]
    assert confirmation == f"Reminder set for {iso_time(start + 5000)} (in 5 s): check the oven"
    assert iso_time(start + 5000).endswith("Z")
    rig.clock.advance(5000)
    await h.engine.wait_for_task(timer["task"])  # type: ignore[arg-type]
    await root.wait_for_idle()
    assert kinds(await entries(h))[-2:] == ["user", "assistant"]
    assert (await entries(h))[-2].message["content"] == "check the oven"  # type: ignore[index,call-overload]
    await h.close()


async def test_a_crash_after_the_submission_landed_still_submits_once(tmp_path: Path) -> None:
    rig = Rig(tmp_path, "sqlite", steps=[faux_message("ok"), faux_message("again?")])

    def reminder_submission(writes: Any) -> bool:
        return any((getattr(w, "request_id", None) or "").startswith("reminder:") for w in writes)

    h = await rig.open(faults=[CommitFault("after", match=reminder_submission)])
    root = await h.root(agent={"model": MODEL})
    task_id = (await root.remind("ping", after=1)).task
    rig.clock.advance(1000)
    await until(lambda: h.session.poisoned is not None)  # the submission is on disk
    await rig.crash(h)

    h = await rig.open()  # the due timer fires again: a second delivery of the wake
    done = await h.engine.wait_for_task(task_id)
    assert isinstance(done.outcome, Completed)
    await (await h.conversation(1)).wait_for_idle()
    assert len(await reminder_submissions(h)) == 1
    assert kinds(await entries(h)) == ["user", "assistant"]
    assert rig.faux.state.call_count == 1
    await h.close()


async def test_a_reminder_due_while_the_actor_was_closed_fires_on_reopen(tmp_path: Path) -> None:
    rig = Rig(tmp_path, "sqlite", steps=[faux_message("late but here")])
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    start = rig.clock.now()
    task_id = (await root.remind("wake up", after=60)).task
    assert h.next_wake() == start + 60_000  # what an evicting host keeps in its timer heap
    await h.close()  # evicted
    rig.clock.advance(120_000)
    h = await rig.open()
    h.resume()
    await h.engine.wait_for_task(task_id)
    await (await h.conversation(1)).wait_for_idle()
    assert kinds(await entries(h)) == ["user", "assistant"]
    await h.close()


async def test_aborting_a_reminder_cancels_it_and_a_conversation_abort_does_not(
    tmp_path: Path,
) -> None:
    rig = Rig(tmp_path, steps=[faux_message("kept")])
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    cancelled = (await root.remind("never", after=10)).task
    kept = (await root.remind("still here", after=20)).task
    await root.abort()  # background tasks are outside the conversation's abort
    assert [t["task"] for t in h.timers()] == [cancelled, kept]
    assert await h.abort_task(cancelled) in ("marked", "terminal")
    done = await h.engine.wait_for_task(cancelled)
    assert isinstance(done.outcome, Aborted)
    assert [t["task"] for t in h.timers()] == [kept]
    rig.clock.advance(20_000)
    await h.engine.wait_for_task(kept)
    await root.wait_for_idle()
    subs = await reminder_submissions(h)
    assert [s.request_id for s in subs] == [f"reminder:{kept}"]
    await h.close()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"message": "x"}, "exactly one"),
        ({"message": "x", "at": 5, "after": 1}, "exactly one"),
        ({"message": "x", "after": -1}, "greater than 0"),
        ({"message": "   ", "after": 1}, "needs a message"),
        ({"message": "", "after": 1}, "at least 1 character"),
        ({"message": "x", "after": 10**9}, "less than or equal"),
        ({"message": "x", "at": 10**30}, "366 days ahead"),
    ],
)
async def test_bad_reminders_are_refused_with_nothing_written(
    tmp_path: Path, kwargs: dict[str, Any], message: str
) -> None:
    rig = Rig(tmp_path)
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    commits = rig.commits
    with pytest.raises(ValueError, match=message):
        await root.remind(**kwargs)
    assert rig.commits == commits and h.timers() == []
    await h.close()
