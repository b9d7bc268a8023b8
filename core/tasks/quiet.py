"""Whether a scheduler drain would be empty, decided without taking the line.

A drain reserves runnable tasks and stages what ownership implies (abort marks, held
outcomes settling); every commit that changes a task kicks one, although the commit
itself has usually reserved its successors already (eager reservation). Reading the
committed live tasks outside the line is sound here: task state changes only by
commits, each of which kicks again, and time waits arm the scheduler's timer.
"""

from __future__ import annotations

from collections.abc import Callable, Container

from core.records import Completing, Task, Waiting

__all__ = ["quiet"]


def quiet(
    tasks: dict[int, Task],
    invoked: Container[int],
    ready: Callable[[Task, int, dict[int, Task]], bool],
    now: int,
) -> bool:
    """True if a drain's reservation commit could stage nothing: every live task is
    being invoked or waits, not yet ready, on an ``all_settled`` wait. Conservative:
    abort marks, held outcomes and ``fail_fast`` waits always take the line.
    ``ready(task, now, tasks)`` is the scheduler's readiness of a waiting task."""
    for task in tasks.values():
        state = task.state
        if task.abort_requested or isinstance(state, Completing):
            return False
        if isinstance(state, Waiting):
            if state.policy != "all_settled":
                return False
            if task.id not in invoked and ready(task, now, tasks):
                return False
        elif task.id not in invoked:
            return False  # pending, or running without an invocation
    return True
