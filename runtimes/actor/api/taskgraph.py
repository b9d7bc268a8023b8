"""The task graph answer of ``GET /v1/actors/{actor}/tasks``.

The graph is built in core (:meth:`Harness.inspected_task_graph`, from
:mod:`core.harness.task_graph`, the one task-graph builder); this module only gives it
the API's schema. Times are epoch ms with an ISO-8601 twin for people; a tool task
names its tool and arguments (read from its round's assistant entry).
"""

from __future__ import annotations

from core.harness import Harness
from runtimes.actor.api.schemas import TaskGraph

__all__ = ["task_graph_of"]


async def task_graph_of(harness: Harness) -> TaskGraph:
    """Every live task of ``harness`` with its derived and stored state, owner, abort
    mark, phase and attempt (and, for tool tasks, the tool's name, arguments and replay)."""
    return TaskGraph.model_validate(await harness.inspected_task_graph())
