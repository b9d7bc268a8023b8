"""The counter recovery demo: a durable ticker that survives being killed.

``perdure demo counter --db counter.sqlite`` counts to N, printing one tick per
interval. Kill it at any moment (Ctrl-C, ``kill -9``) and run it again: it carries on
from its last commit, printing every tick exactly once.

How: the ``demo.ticker`` task's checkpoint holds the next number. Each tick prints and
then records a memo ``printed-<n>``; a rerun of the same tick (after a crash) sees the
memo and does not print again. Between ticks the task *waits* (``waiting{until}``): no
invocation is held, and a restarted process wakes it when the time has come.

One window is left, and it is the lesson of the demo: a crash after the print but
before the memo commit prints that tick again on restart (at-least-once for an effect
outside storage). Effects that matter get an idempotency key the receiving side honours
— that is what the sandbox op log does for tools.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel

from core import Engine
from core.records import Task, Terminal
from core.storage import TaskQuery
from core.tasks import TaskRegistry, TaskRuntime, define_task
from runtimes.actor.clock import SystemClock
from runtimes.local.sqlite import open_sqlite_storage

__all__ = ["TICKER", "run_counter"]

_output: list[Callable[[str], None]] = [lambda line: print(line, flush=True)]


class _Count(BaseModel):
    to: int
    interval_ms: int


class _Tick(BaseModel):
    n: int


async def _tick(task: Task, rt: TaskRuntime) -> None:
    count = _Count.model_validate(task.input)
    n = _Tick.model_validate(task.checkpoint).n
    if await rt.memo(f"printed-{n}") is None:
        _output[0](f"tick {n}")
        await rt.memo(f"printed-{n}", True)
    if n >= count.to:
        await rt.complete(f"counted to {count.to}")
    else:
        await rt.sleep_until(rt.now() + count.interval_ms, {"phase": "tick", "n": n + 1})


TICKER = define_task(
    "demo.ticker",
    phases={"tick": _tick},
    initial=lambda _input: {"phase": "tick", "n": 1},
)


async def run_counter(
    db: Path, *, to: int = 10, interval_ms: int = 500, say: Callable[[str], None] = print
) -> str:
    """Count to ``to`` in the SQLite file ``db``, resuming a count already there."""
    storage = await open_sqlite_storage(db)
    engine = await Engine.open(storage, tasks=TaskRegistry([TICKER]), clock=SystemClock())
    try:
        found = await storage.scan_tasks(TaskQuery(kind=TICKER.name, order="desc", limit=1))
        task = found.items[0] if found.items else None
        if task is None:
            task = await engine.create_task(TICKER, {"to": to, "interval_ms": interval_ms})
            say(f"counting to {to} in {db} (task {task.id})")
        elif isinstance(task.state, Terminal):
            say(f"{db} already holds a finished count (task {task.id})")
        else:
            at = (task.checkpoint or {}).get("n")
            say(f"resuming the count in {db} at {at} (task {task.id}, was {task.status})")
        done = await engine.wait_for_task(task.id)
        outcome = done.outcome
        result = getattr(outcome, "result", None)
        return str(result if result is not None else outcome)
    finally:
        await engine.close()
