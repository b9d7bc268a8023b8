"""The task graph: every live task as a JSON node, with its owner edge.

The one place a task becomes a graph node, for both readers of the graph:

* :func:`task_node` / :func:`live_task_graph` — from the task records alone, so a
  commit's changed tasks can be turned into nodes as they land:
  :meth:`Harness.task_graph <core.harness.harness.Harness.task_graph>` and its watch
  (:class:`~core.harness.watch.TaskGraphMount`);
* :func:`inspected_task_graph` — from the scheduler's :class:`~core.tasks.Inspection`
  (derived state, live waits, blocked reasons), with each tool task's call: what the
  task inspector shows (``GET /v1/actors/{actor}/tasks`` and ``perdure inspect``, whose
  schema is ``runtimes.actor.api.schemas.TaskGraph``).

Both share the record's own fields (:func:`_record_fields`). Times are epoch ms; the
inspected nodes carry an ISO-8601 twin for people.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from core.harness.context import ContextView
from core.harness.messages import AssistantMessage, Message, message_from_json
from core.harness.runs import TOOL
from core.jsonvalue import JsonObject, JsonValue
from core.records import Task
from core.tasks.scheduler import Inspection, TaskView
from core.times import iso_time

__all__ = [
    "GraphSource",
    "inspected_task_graph",
    "inspected_task_node",
    "live_task_graph",
    "task_node",
]


class GraphSource(Protocol):
    """What the inspected graph reads of the harness (the
    :class:`~core.harness.harness.Harness`, which satisfies it). Reads only."""

    def inspect(self) -> Inspection:
        """The scheduler's derivation of every live task; runs no task code."""
        ...

    def cached_message(self, conversation_id: int, entry_id: int) -> Message | None:
        """A committed entry's parsed message from the in-memory active range, or
        ``None`` (then read the context). Never reads the storage."""
        ...

    async def context(self, conversation_id: int, cutoff: int | None = None) -> ContextView:
        """The derived context of the conversation (may load and cache its range)."""
        ...


def _record_fields(task: Task) -> JsonObject:
    return {
        "id": task.id,
        "kind": task.kind,
        "status": task.status,
        "conversation_id": task.conversation_id,
        "owner": task.owner,
        "background": task.background,
        "abort_requested": task.abort_requested,
    }


def task_node(task: Task) -> JsonObject:
    """A task's node from its record: the record's fields, its checkpointed ``phase``,
    what it waits on (as stored), ``until`` and, once settled, its outcome's kind."""
    state = task.state
    node = _record_fields(task)
    checkpoint = task.checkpoint
    if checkpoint is not None:
        node["phase"] = checkpoint.get("phase")
    on = getattr(state, "on", None)
    if on:
        node["waiting_on"] = list(on)
    until = getattr(state, "until", None)
    if until is not None:
        node["until"] = until
    outcome = task.outcome
    if outcome is not None:
        node["outcome"] = outcome.kind
    return node


def live_task_graph(tasks: Iterable[Task]) -> JsonObject:
    """``{"tasks": {"<id>": node}}`` of the given (live) tasks."""
    return {"tasks": {str(t.id): task_node(t) for t in tasks}}


def inspected_task_node(view: TaskView, call: tuple[str, JsonObject] | None = None) -> JsonObject:
    """A task's node as the inspector shows it: the record's fields, the derived
    ``state`` and live waits, when it started, its phase and attempt and, for a tool
    task, ``call`` (its tool's name and arguments) and its crash ``replay`` class."""
    task = view.record
    tool, arguments = call if call is not None else (None, None)
    checkpoint = task.checkpoint or {}
    phase, attempt, replay = (checkpoint.get(k) for k in ("phase", "attempt", "replay"))
    node = _record_fields(task)
    node.update(
        {
            "state": view.state,
            "waiting_on": list(view.waiting_on),
            "until": view.until,
            "until_iso": None if view.until is None else iso_time(view.until),
            "blocked_reason": view.reason,
            "started_at": task.started_at,
            "started_at_iso": None if task.started_at is None else iso_time(task.started_at),
            "tool": tool,
            "arguments": arguments,
            "phase": phase if isinstance(phase, str) else None,
            "attempt": attempt if type(attempt) is int else None,
            "replay": replay if isinstance(replay, str) and task.kind == TOOL else None,
        }
    )
    return node


async def inspected_task_graph(source: GraphSource) -> JsonObject:
    """``{"scheduling": ..., "tasks": [node, ...]}``: every live task by id, as
    :func:`inspected_task_node` shows it, tool tasks with their calls."""
    inspection = source.inspect()
    nodes: list[JsonValue] = []
    for view in inspection.tasks:
        call = await _tool_call(source, view.record) if view.record.kind == TOOL else None
        nodes.append(inspected_task_node(view, call))
    return {"scheduling": inspection.scheduling, "tasks": nodes}


async def _tool_call(source: GraphSource, task: Task) -> tuple[str, JsonObject] | None:
    """The tool call a tool task runs, read from its round's assistant entry."""
    value = task.input if isinstance(task.input, dict) else {}
    assistant = value.get("assistant")
    if not isinstance(assistant, int):
        return None
    message = source.cached_message(task.conversation_id, assistant)
    if message is None:  # not loaded yet: the round's entry is in the active context
        context = await source.context(task.conversation_id)
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
