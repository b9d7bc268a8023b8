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
