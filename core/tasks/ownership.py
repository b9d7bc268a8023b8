"""Ownership: the tree of live tasks, derived from the session's committed records.

A task's direct owner is its ``owner`` field, or — for an owner-less task — the task
that owns its conversation. Background tasks are boundaries: work below one is not
ordinary work of the tasks above it. The session keeps the records and indexes them by
these fields (``Session.owned_by``, ``Session.rootless_owned_by``); what the tree means
is decided here. ``staged`` is a transaction's staged records, which take precedence.
"""

from __future__ import annotations

from collections.abc import Iterable

from core.records import Completing, Outcome, Task, TaskState, Terminal
from core.session.session import Session
from core.session.transaction import Tx

__all__ = ["has_owned_live_work", "owned_live_work", "owner_of", "owners", "settle_state"]


def owner_of(session: Session, task: Task, staged: dict[int, Task] | None = None) -> Task | None:
    """The live task directly above ``task`` in the ownership tree, if any."""
    if task.owner is not None:
        parent_id: int | None = task.owner
    else:
        conv = session.cached_conversation(task.conversation_id)
        parent_id = conv.owner.task_id if conv is not None and conv.owner is not None else None
    if parent_id is None:
        return None
    parent = (staged or {}).get(parent_id) or session.tasks.get(parent_id)
    return None if parent is None or isinstance(parent.state, Terminal) else parent


def owners(session: Session, task: Task, staged: dict[int, Task] | None = None) -> Iterable[Task]:
    """The live owners of a non-background task, nearest first, up to and including
    the first background one (a background task is a boundary)."""
    if task.background:
        return
    parent = owner_of(session, task, staged)
    while parent is not None:
        yield parent
        if parent.background:
            return
        parent = owner_of(session, parent, staged)


def _children(session: Session, task_id: int) -> Iterable[int]:
    """Ids of committed live tasks whose direct owner (see :func:`owner_of`) is
    ``task_id``: by ``owner`` field, or owner-less in a conversation it owns."""
    yield from session.owned_by(task_id)
    yield from session.rootless_owned_by(task_id)


def owned_live_work(session: Session, task_id: int, staged: dict[int, Task] | None = None) -> bool:
    """Whether any live ordinary (non-background) work sits below ``task_id``.

    Work below a task passes through a live ordinary direct child (a background
    task is a boundary: :func:`owners` stops there), so direct children suffice."""
    staged = staged or {}
    me = staged.get(task_id) or session.tasks.get(task_id)
    if me is None or isinstance(me.state, Terminal):
        return False
    for child_id in _children(session, task_id):
        child = staged.get(child_id) or session.tasks[child_id]
        if child_id != task_id and not child.background and not isinstance(child.state, Terminal):
            return True
    for child in staged.values():
        if (
            child.id != task_id
            and child.id not in session.tasks
            and not child.background
            and not isinstance(child.state, Terminal)
            and (parent := owner_of(session, child, staged)) is not None
            and parent.id == task_id
        ):
            return True
    return False


def has_owned_live_work(session: Session, tx: Tx, task_id: int) -> bool:
    """Whether ordinary work owned by the task is live, counting ``tx``'s writes."""
    return owned_live_work(session, task_id, tx.tasks)


def settle_state(session: Session, tx: Tx, task: Task, outcome: Outcome) -> TaskState:
    """``completing`` while ordinary owned work is live, else ``terminal``."""
    if has_owned_live_work(session, tx, task.id):
        return Completing(outcome)
    return Terminal(outcome)
