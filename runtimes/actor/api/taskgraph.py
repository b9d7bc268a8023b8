"""The task graph answer of ``GET /v1/actors/{actor}/tasks``.

Derived from ``harness.inspect()`` in this one module, so switching to a richer core
``harness.task_graph()`` later touches nothing else. Times are epoch ms with an ISO-8601
twin for people; a tool task names its tool and arguments (read from its round's
assistant entry).
"""

from __future__ import annotations

from core.harness import AssistantMessage, Harness
from core.harness.messages import message_from_json
from core.jsonvalue import JsonObject
from core.records import Task
from core.tasks import Inspection
from core.times import iso_time
from runtimes.actor.api.schemas import TaskGraph, TaskNode

__all__ = ["task_graph", "task_graph_of"]

_TOOL = "perdure.tool"


def task_graph(
    inspection: Inspection, calls: dict[int, tuple[str, JsonObject]] | None = None
) -> TaskGraph:
    """Every live task with its derived and stored state, owner, abort mark, phase and
    attempt (and, for tool tasks in ``calls``, the tool's name, arguments and replay)."""
    nodes = []
    for view in inspection.tasks:
        task = view.record
        tool, arguments = (calls or {}).get(task.id, (None, None))
        checkpoint = task.checkpoint or {}
        phase, attempt, replay = (checkpoint.get(k) for k in ("phase", "attempt", "replay"))
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
                until_iso=None if view.until is None else iso_time(view.until),
                blocked_reason=view.reason,
                started_at=task.started_at,
                started_at_iso=None if task.started_at is None else iso_time(task.started_at),
                tool=tool,
                arguments=arguments,
                phase=phase if isinstance(phase, str) else None,
                attempt=attempt if type(attempt) is int else None,
                replay=replay if isinstance(replay, str) and task.kind == _TOOL else None,
            )
        )
    return TaskGraph(scheduling=inspection.scheduling, tasks=nodes)


async def task_graph_of(harness: Harness) -> TaskGraph:
    """:func:`task_graph` of a harness, with its tool tasks' calls."""
    inspection = harness.inspect()
    calls: dict[int, tuple[str, JsonObject]] = {}
    for view in inspection.tasks:
        if view.record.kind == _TOOL:
            call = await _tool_call(harness, view.record)
            if call is not None:
                calls[view.record.id] = call
    return task_graph(inspection, calls)


async def _tool_call(harness: Harness, task: Task) -> tuple[str, JsonObject] | None:
    value = task.input if isinstance(task.input, dict) else {}
    assistant = value.get("assistant")
    if not isinstance(assistant, int):
        return None
    message = harness.cached_message(task.conversation_id, assistant)
    if message is None:  # not loaded yet: the round's entry is in the active context
        context = await harness.context(task.conversation_id)
        entry = next((e for e in context.entries if e.id == assistant), None)
        message = message_from_json(entry.message) if entry and entry.message else None
    if not isinstance(message, AssistantMessage):
        return None
    for call in message.tool_calls:
        if call.id == value.get("call_id"):
            # The intent's arguments (after hooks) when committed, else the model's.
            cp = task.checkpoint or {}
            arguments = cp.get("arguments")
            return call.name, dict(arguments if isinstance(arguments, dict) else call.arguments)
    return None
