"""Wakeups: which live tasks a drain must look at, and when the next timed wait ends.

The scheduler asks, after every commit that staged task writes, every invocation end
and every due timer, whether a drain has anything to do (:func:`decisions.quiet`).
Asking it of every live task would cost each commit the number of live tasks; what can
change the answer for a task is known (see :func:`decisions.needs_line`): a commit of
the task, the end of its invocation, a member of its wait settling, its ``until``
passing, or a change of definitions. So this keeps the tasks those *touched* and looks
only at them; anything not tracked task by task makes the next look cover every live
task. Timed waits are kept in a heap, pruned lazily, instead of being scanned for the
earliest ``until``.
"""

from __future__ import annotations

import heapq
from collections.abc import Container, Iterable, Mapping

from core.records import Outcome, Task, Waiting
from core.tasks import decisions

__all__ = ["Either", "Wakeups"]


class Wakeups:
    """The touched tasks and timed waits of one scheduler."""

    def __init__(self) -> None:
        self._touched: set[int] = set()
        self._everything = True  # the first look covers every live task
        self._untils: list[tuple[int, int]] = []
        """``(until, task_id)``; an entry counts while its task is live and still waits
        until then."""
        self._untils_loaded = False

    def touch(self, task_ids: Iterable[int]) -> None:
        """Look at these tasks at the next check."""
        self._touched.update(task_ids)

    def touch_all(self) -> None:
        """Look at every live task at the next check (open, resume, new definitions, a
        fired timer: what is not tracked task by task)."""
        self._everything = True

    def committed(self, task: Task) -> None:
        """A commit staged this live record: look at it, and keep its ``until``."""
        self._touched.add(task.id)
        state = task.state
        if isinstance(state, Waiting) and state.until is not None:
            heapq.heappush(self._untils, (state.until, task.id))

    def quiet(
        self,
        tasks: Mapping[int, Task],
        invoked: Container[int],
        now: int,
        outcomes: Mapping[int, Outcome],
    ) -> bool:
        """:func:`decisions.quiet` over the live ``tasks``, looking only at the touched
        ones: those that do not need the line are forgotten, the others stay."""
        if self._everything:
            self._everything = False
            self._touched = set(tasks)
        touched = self._touched
        seen: list[int] = []
        for task_id in touched:
            task = tasks.get(task_id)
            if task is not None and decisions.needs_line(task, invoked, now, tasks, outcomes):
                touched.difference_update(seen)
                return False
            seen.append(task_id)
        touched.clear()
        return True

    def earliest_until(self, tasks: Mapping[int, Task], now: int) -> tuple[int | None, bool]:
        """:func:`decisions.earliest_until` of the live ``tasks``, and whether some wait's
        time has come meanwhile (it is touched: the caller must check, since the timer
        armed for it may be cancelled now)."""
        heap = self._untils
        if not self._untils_loaded:
            self._untils_loaded = True
            for live in tasks.values():
                if isinstance(live.state, Waiting) and live.state.until is not None:
                    heapq.heappush(heap, (live.state.until, live.id))
        due = False
        while heap:
            until, task_id = heap[0]
            task = tasks.get(task_id)
            if task is not None and isinstance(task.state, Waiting) and task.state.until == until:
                if until > now:
                    break
                self._touched.add(task_id)
                due = True
            heapq.heappop(heap)
        return (heap[0][0] if heap else None), due


class Either(Container[int]):
    """Ids in either of two containers (the running invocations and those a commit is
    about to start), without building their union."""

    __slots__ = ("_a", "_b")

    def __init__(self, a: Container[int], b: Container[int]) -> None:
        self._a = a
        self._b = b

    def __contains__(self, item: object) -> bool:
        return item in self._a or item in self._b
