"""The task graph answer of ``GET /v1/actors/{actor}/tasks``.

Derived from ``harness.inspect()`` in this one module, so switching to a richer core
``harness.task_graph()`` later touches nothing else. A tool task's call (name and
arguments) is read from its round's assistant entry, which is usually in memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from core.harness import AssistantMessage, Harness
from core.tasks import Inspection
from runtimes.actor.api.schemas import TaskGraph, TaskNode, ToolCallInfo

__all__ = ["task_graph", "tool_calls"]

_TOOL_TASK = "perdure.tool"


def task_graph(
    inspection: Inspection, calls: Mapping[int, ToolCallInfo] | None = None
) -> TaskGraph:
    """Every live task with its derived and stored state, owner, abort mark, phase and
    (``calls``, by task id) its tool call."""
    nodes = []
    for view in inspection.tasks:
        task = view.record
        checkpoint: Mapping[str, Any] = task.checkpoint or {}
        phase = checkpoint.get("phase")
        attempt = checkpoint.get("attempt")
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
                started_at=task.started_at,
                phase=phase if isinstance(phase, str) else None,
                attempt=attempt if type(attempt) is int else None,
                tool=(calls or {}).get(task.id),
            )
        )
    return TaskGraph(scheduling=inspection.scheduling, tasks=nodes)


async def tool_calls(harness: Harness, inspection: Inspection) -> dict[int, ToolCallInfo]:
    """The call of each live tool task, by task id (a task whose entry is gone is left
    out)."""
    out: dict[int, ToolCallInfo] = {}
    for view in inspection.tasks:
        task = view.record
        value = task.input if isinstance(task.input, dict) else {}
        assistant, call_id = value.get("assistant"), value.get("call_id")
        if task.kind != _TOOL_TASK or type(assistant) is not int or not isinstance(call_id, str):
            continue
        message = await harness.message(task.conversation_id, assistant)
        if not isinstance(message, AssistantMessage):
            continue
        call = next((c for c in message.tool_calls if c.id == call_id), None)
        if call is None:
            continue
        replay = (task.checkpoint or {}).get("replay")
        out[task.id] = ToolCallInfo(
            call_id=call.id,
            name=call.name,
            arguments=dict(call.arguments),
            replay=replay if isinstance(replay, str) else None,
        )
    return out
