"""Waiting for an actor's due work to commit, so an invocation parks it between steps.

A Lambda invocation must return, so a wake parks its actor when the due work is done.
The work a deadline releases can be background work (a reminder's timer task, a
sub-agent) that the harness's idleness does not cover, and it runs through commits that
take I/O time (a DynamoDB write in a thread). Polling the event loop for it is a race
the I/O can lose (the actor was parked while its reminder ran, and the next invocation
asked the model again); this waits for the harness's own signals instead: a commit that
changes one of the tasks that can run now, or that task's end.
"""

from __future__ import annotations

import asyncio
from typing import Any

from core.harness import Harness
from core.session import CommitEvent

__all__ = ["due_tasks", "wait_for_due_commit", "wait_until_quiet"]

_RUNNABLE = frozenset({"running", "ready", "completing"})


def due_tasks(harness: Harness) -> set[int]:
    """The live tasks that can run now, run, or finish (and those marked for abort):
    what makes :meth:`~core.harness.Harness.next_wake` say "now"."""
    return {
        view.record.id
        for view in harness.inspect().tasks
        if view.state in _RUNNABLE or view.record.abort_requested
    }


async def wait_for_due_commit(harness: Harness, timeout_s: float) -> bool:
    """Wait until a commit changes one of :func:`due_tasks` (a step, a wait, its end).
    ``True`` when it did (or nothing is due), ``False`` when ``timeout_s`` passed first.
    Raises what the harness's :meth:`~core.harness.Harness.wait_for_task` raises when the
    session is poisoned or closed (no commit would come)."""
    due = due_tasks(harness)
    if not due:
        return True
    committed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def on_commit(event: CommitEvent) -> None:
        if not committed.done() and any(task.id in due for task in event.tasks):
            committed.set_result(None)

    # Subscribed before anything can run: the commit cannot slip in between.
    unsubscribe = harness.session.subscribe(on_commit)
    ends: list[asyncio.Future[Any]] = [
        asyncio.ensure_future(harness.wait_for_task(task_id)) for task_id in sorted(due)
    ]
    try:
        done, _ = await asyncio.wait(
            [committed, *ends], timeout=max(0.0, timeout_s), return_when=asyncio.FIRST_COMPLETED
        )
        for future in done:
            future.result()  # a poisoned or closed session raises here
        return bool(done)
    finally:
        unsubscribe()
        for future in (committed, *ends):
            future.cancel()
        await asyncio.gather(*ends, return_exceptions=True)


async def wait_until_quiet(harness: Harness, timeout_s: float) -> None:
    """Wait until the actor is idle or none of its tasks can run now — every live one
    waits for a later time or for a person's decision (a tool call pending approval,
    which holds nothing: docs/design.md invariant 18) — so the invocation can park it.
    Raises ``TimeoutError`` when ``timeout_s`` passed first, and what
    :func:`wait_for_due_commit` raises."""
    harness.resume()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not harness.engine.scheduler.idle() and due_tasks(harness):
        if not await wait_for_due_commit(harness, deadline - loop.time()):
            raise TimeoutError
