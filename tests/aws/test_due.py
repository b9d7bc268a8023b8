"""The signal a Lambda wake waits on before it parks an actor: a commit of the work due
now (runtimes/aws/due.py), not a number of event-loop turns."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from core.tasks import TaskRuntime, define_task
from runtimes.aws.due import due_tasks, wait_for_due_commit
from tests.core.harness.support import Rig, extension


async def test_a_wake_waits_for_background_work_to_commit_and_not_longer(
    tmp_path: Path,
) -> None:
    gate = asyncio.Event()

    async def held(task: Any, rt: TaskRuntime) -> None:
        await gate.wait()  # background work whose commit takes I/O time
        await rt.complete("done")

    rig = Rig(tmp_path)
    rig.registry.install(extension("e", tasks=[define_task("t.bg", phases={"p": held})]))
    h = await rig.open()
    try:
        assert due_tasks(h) == set()
        assert await wait_for_due_commit(h, 0.01)  # nothing due: nothing to wait for
        task = await h.engine.create_task("t.bg", background=True)
        h.resume()
        await h.wait_for_idle()  # background: idleness does not cover it
        assert due_tasks(h) == {task.id}
        assert await wait_for_due_commit(h, 30)  # a step: it started running
        assert due_tasks(h) == {task.id}
        # It runs and commits nothing more: the wait times out instead of passing early.
        assert not await wait_for_due_commit(h, 0.2)
        waiting = asyncio.ensure_future(wait_for_due_commit(h, 30))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        gate.set()
        assert await asyncio.wait_for(waiting, 30)  # its commit ends the wait
        assert due_tasks(h) == set() and h.next_wake() is None
    finally:
        await h.close()
