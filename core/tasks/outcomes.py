"""KnownOutcomes: the outcomes of settled tasks that live waits may still ask about.

Readiness is derived synchronously (:mod:`core.tasks.decisions`), so the outcomes a
``fail_fast`` wait needs must be in memory. A missing outcome reads as completed
(:func:`decisions.failed`), so only failures and outcomes a live wait names are kept,
and the map is pruned to the members of live waits once it passes 4,096 entries.
"""

from __future__ import annotations

from core.records import Completed, Outcome, Task, Terminal, Waiting
from core.session.session import Session

__all__ = ["KnownOutcomes"]

_PRUNE_AT = 4096


class KnownOutcomes(dict[int, Outcome]):
    """Outcomes by task id, as :mod:`core.tasks.decisions` reads them."""

    def settled(self, session: Session, task: Task) -> None:
        """A commit made ``task`` terminal (the session has adopted it)."""
        assert isinstance(task.state, Terminal)
        outcome = task.state.outcome
        if session.waiting_on(task.id) or not isinstance(outcome, Completed):
            self.remember(session, task.id, outcome)

    def remember(self, session: Session, task_id: int, outcome: Outcome) -> None:
        self[task_id] = outcome
        if len(self) > _PRUNE_AT:  # amortized: one scan of the live tasks per 4,096
            wanted = {
                m
                for t in session.tasks.values()
                if isinstance(t.state, Waiting)
                for m in t.state.on
            }
            for task_id in [k for k in self if k not in wanted]:
                del self[task_id]

    async def prefetch(self, session: Session) -> None:
        """Load the outcomes of settled members of live ``fail_fast`` waits (after a
        reopen they are not in memory)."""
        for task in list(session.tasks.values()):
            state = task.state
            if not isinstance(state, Waiting) or state.policy != "fail_fast":
                continue
            for member in state.on:
                if member in session.tasks or member in self:
                    continue
                rec = await session.task(member)
                if rec is not None and isinstance(rec.state, Terminal):
                    self.remember(session, member, rec.state.outcome)
