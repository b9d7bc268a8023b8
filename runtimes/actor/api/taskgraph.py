"""The task graph answer of ``GET /v1/actors/{actor}/tasks``.

Derived from ``harness.inspect()`` in this one function, so switching to a richer core
``harness.task_graph()`` later touches nothing else.
"""

from __future__ import annotations

from core.tasks import Inspection
from runtimes.actor.api.schemas import TaskGraph, TaskNode

__all__ = ["task_graph"]


def task_graph(inspection: Inspection) -> TaskGraph:
    """Every live task with its derived and stored state, owner and abort mark."""
    nodes = []
    for view in inspection.tasks:
        task = view.record
        nodes.append(
            TaskNode(
                id=task.id,
                kind=task.kind,
                conversation_id=task.conversation_id,
                state=view.state,
                status=task.status,
                owner=task.owner,
                background=task.background,
                abort_requested=task.abort_requested,
                waiting_on=list(view.waiting_on),
                until=view.until,
                blocked_reason=view.reason,
            )
        )
    return TaskGraph(scheduling=inspection.scheduling, tasks=nodes)
