"""``perdure inspect``: an actor's live task graph, read locally or over HTTP, as a tree.

Two sources, same answer (the ``GET /v1/actors/{actor}/tasks`` model):

* ``--url``: ask the host serving the actor; nothing is opened here. Use this while a
  host is running, since it holds the actor's lock.
* ``--data``: open the actor's storage through :class:`ActorHost` (taking its lock, so
  never beside a live host) *without resuming it*: no task runs and nothing is written,
  except that opening turns tasks a crash left ``running`` into ``pending`` (and notes
  that ``restart`` event) — what any host opening the actor does first. Task kinds of
  extensions this process does not install show as ``blocked (missing_task)``.

Tool tasks show their tool and arguments, every task its age, deadlines in ISO-8601
with this terminal's zone; the header explains the scheduling state (``paused``: read
from storage, nothing runs).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any

from rich.text import Text
from rich.tree import Tree

from core import JsonValue
from core.harness import ModelError, ModelInfo, ModelRequest
from core.tasks import CancelSignal
from core.times import iso_time
from runtimes.actor import ActorConfig, check_actor_id
from runtimes.actor.api.schemas import TaskGraph, TaskNode
from runtimes.actor.api.taskgraph import task_graph_of
from runtimes.client import ActorClient, ApiError, ClientError
from runtimes.local.host import ActorHost, HostConfig

__all__ = ["TaskGraphUnavailable", "fetch_task_graph", "read_task_graph", "render_task_graph"]

_LOCAL = datetime.now().astimezone().tzinfo  # this terminal's zone, shown with its offset
_STATE_STYLE = {
    "running": "bold green",
    "ready": "cyan",
    "waiting": "yellow",
    "completing": "magenta",
    "blocked": "bold red",
}


class TaskGraphUnavailable(Exception):
    """The graph could not be read (the message says why)."""


async def read_task_graph(data_dir: Path, actor: str) -> TaskGraph:
    """The graph from the actor's storage in ``data_dir`` (see the module docstring).

    Raises ``UnknownActor`` / ``ActorLocked`` / ``InvalidActorId`` from the host.
    """
    # No model is ever called: the harness is opened but never resumed.
    config = HostConfig(
        data_dir=data_dir, actor=ActorConfig(models=_NoModels()), recover_on_start=False
    )
    host = ActorHost(config)
    try:
        return await host.look(actor, task_graph_of)
    finally:
        await host.close()


class _NoModels:
    """The models of a harness that is only looked at: it knows no model and refuses
    every request (none is ever made, since the harness is never resumed)."""

    def info(self, model_id: str) -> ModelInfo | None:
        return None

    def stream(self, request: ModelRequest, signal: CancelSignal) -> AsyncIterator[Any]:
        return self._refuse(request.model)

    def fetch(self, model_id: str, handle: JsonValue, signal: CancelSignal) -> AsyncIterator[Any]:
        return self._refuse(model_id)

    async def cancel_deferred(self, model_id: str, handle: JsonValue) -> None:
        return None

    async def _refuse(self, model_id: str) -> AsyncIterator[Any]:
        nothing: tuple[Any, ...] = ()
        for event in nothing:  # an async generator (iteration raises), yielding nothing
            yield event
        raise ModelError(f"the task view calls no model ({model_id})")


def fetch_task_graph(url: str, actor: str, token: str, *, timeout: float = 10.0) -> TaskGraph:
    """The graph from the host serving the actor at ``url`` (the typed client's
    :meth:`~runtimes.client.ActorClient.tasks`)."""
    check_actor_id(actor)

    async def fetch() -> dict[str, Any]:
        async with ActorClient(url, token, timeout=timeout) as client:
            return await client.tasks(actor)

    try:
        return TaskGraph.model_validate(asyncio.run(fetch()))
    except ApiError as error:
        raise TaskGraphUnavailable(f"{error.status}: {error.message}") from error
    except ClientError as error:
        raise TaskGraphUnavailable(str(error)) from error


_SCHEDULING = {
    "paused": (
        "paused: read from its storage, where nothing runs; the host that serves the "
        "actor next resumes these tasks"
    ),
    "running": "running: served by a live host",
    "closing": "closing: the host is shutting the actor down",
}


def render_task_graph(actor: str, graph: TaskGraph, *, now_ms: int | None = None) -> Tree:
    """Conversations, each with its tasks nested under their owners; tool tasks with
    their tool and arguments, every task with its age (``now_ms``: the clock to measure
    it by, default the system's) and times in ISO-8601 with their zone."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    tree = Tree(
        Text.assemble(
            ("actor ", "bold"),
            (actor, "bold cyan"),
            (f"  ({_SCHEDULING.get(graph.scheduling, graph.scheduling)})", "dim"),
        )
    )
    if not graph.tasks:
        tree.add(Text("no live tasks", style="dim"))
        return tree
    ids = {t.id for t in graph.tasks}
    children: dict[int | None, list[TaskNode]] = {}
    for task in graph.tasks:
        parent = task.owner if task.owner in ids else None
        children.setdefault(parent, []).append(task)
    conversations: dict[int, Tree] = {}
    for task in children.get(None, []):
        branch = conversations.get(task.conversation_id)
        if branch is None:
            branch = conversations[task.conversation_id] = tree.add(
                Text(f"conversation {task.conversation_id}", style="bold")
            )
        _add(branch, task, children, now)
    return tree


def _add(
    branch: Tree, task: TaskNode, children: dict[int | None, list[TaskNode]], now: int
) -> None:
    node = branch.add(_label(task, now))
    for child in children.get(task.id, []):
        _add(node, child, children, now)


def _label(task: TaskNode, now: int) -> Text:
    label = Text.assemble((f"#{task.id} ", "bold"), (task.kind, ""))
    if task.tool is not None:
        args = json.dumps(task.arguments or {}, ensure_ascii=False)
        args = args if len(args) <= 80 else args[:79] + "…"
        label.append(f" {task.tool} {args}", style="yellow")
    label.append("  ")
    label.append(task.state, style=_STATE_STYLE.get(task.state, ""))
    if task.started_at is not None:
        label.append(f" for {_age(now - task.started_at)}", style="dim")
    if task.status != task.state:
        label.append(f" (stored {task.status})", style="dim")
    if task.blocked_reason:
        label.append(f" ({task.blocked_reason})", style="red")
    if task.waiting_on:
        label.append(f" on {', '.join(f'#{i}' for i in task.waiting_on)}", style="yellow")
    if task.until is not None:
        label.append(f" until {iso_time(task.until, _LOCAL)}", style="yellow")
    if task.background:
        label.append(" [background]", style="dim")
    if task.abort_requested:
        label.append(" [abort requested]", style="bold red")
    return label


def _age(ms: int) -> str:
    seconds = max(0, ms) // 1000
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"
