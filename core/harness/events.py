"""Harness events: what recovery, retries, compaction and aborts did, for people to see.

An event is noted *inside* the commit that makes it true (the recovery's own commit, the
retry's backoff commit, ...), into the conversation's ``events`` document, and reported
to the host's :class:`~core.telemetry.Telemetry` once that commit is durable.

Why durable (a document) and not live-only: a recovery happens right after a restart,
before any client has had a chance to reattach — a live-only notice would reach nobody.
As a document it is part of the committed view, so every watch (SSE, WebSocket,
long-poll) and the inspector see it whenever they attach, it costs no extra commit (it
rides in the commit that does the work), and it obeys invariant 2 (only committed state
is observable). It is bounded: the newest :data:`KEEP` events are kept; a fork starts
with none (``fork="initial"``). The document holds only facts the transcript does not:
entries still tell what the model saw.

The document value is ``{"next": n, "items": [event, ...]}``; each event is
``{"n", "kind", "at", "at_iso", ...}`` with ``n`` increasing per conversation. Kinds:

``restart``          the host opened storage a crash or eviction left with running work:
                     ``tasks`` (``[{task, kind, tool?}]``) are being recovered.
``tool_recovery``    one interrupted tool call after a restart: ``how`` is ``rerun``
                     (safe: run again), ``recovered`` (recoverable: the sandbox's op
                     log answered for ``op``) or ``interrupted`` (the model is told;
                     ``reason`` says why); ``tool``, ``call_id``, ``task``.
``request_resent``   a model request cut short by a restart is sent again (``partial``:
                     whether a streamed part was kept as an interrupted entry).
``retry``            a retryable model error: ``attempt`` (the next one), ``delay_ms``,
                     ``until`` (epoch ms) and ``until_iso``, ``error``.
``compaction``       ``state``: ``started`` (``reason``), then its end: ``landed``,
                     ``stale``, ``skipped`` (``reason``: nothing to compact, no model),
                     ``failed`` (``reason``) or ``aborted``.
``abort``            an abort took effect: ``scope`` says which path —
                     ``conversation`` (the conversation's abort: ``tasks`` tasks marked,
                     ``background``: whether background work was included),
                     ``submission`` (``submission``: a queued one ``withdrawn`` before it
                     started, or a placed one whose run's generation ``task`` was marked),
                     ``task`` (one task aborted by id: ``task``, ``task_kind``, ``tool``)
                     or ``timer`` (a pending reminder cancelled: ``task``).
``approval``         a tool call waits for a person's decision (``state: pending``,
                     ``expires_at`` if it expires) or that wait settled (``approved``,
                     ``denied``, ``expired``, ``withdrawn``); ``task``, ``tool``,
                     ``call_id``, ``note`` (see :mod:`core.harness.approvals`).
"""

from __future__ import annotations

from functools import partial
from typing import Any, cast

from core.harness.messages import AssistantMessage, message_from_json
from core.jsonvalue import JsonObject, JsonValue
from core.records import Task
from core.session.documents import DocDefinition, define_doc
from core.session.transaction import Tx
from core.times import iso_time

__all__ = [
    "EVENTS",
    "KEEP",
    "note_abort",
    "note_event",
    "note_restart",
    "note_retry",
    "summarize_recovery",
]

KEEP = 100

EVENTS: DocDefinition[Any] = define_doc(
    "events",
    scope="conversation",
    fork="initial",
    initial=lambda: {"next": 1, "items": []},
)


async def note_event(tx: Tx, conversation_id: int, kind: str, **fields: JsonValue) -> JsonObject:
    """Record an event in ``tx`` (its commit makes it visible) and report it to the
    session's telemetry once that commit is durable. Returns the event."""
    doc = await tx.doc(EVENTS, conversation_id)
    value = doc.value if isinstance(doc.value, dict) else {}
    n = int(cast(int, value.get("next", 1)))
    at = tx.now()
    event: JsonObject = {"n": n, "kind": kind, "at": at, "at_iso": iso_time(at), **fields}
    items = value.get("items")
    kept = [*(items if isinstance(items, list) else []), event][-KEEP:]
    doc.value = {"next": n + 1, "items": kept}
    tx.after_commit.append(partial(tx.session.telemetry.event, conversation_id, dict(event)))
    return event


async def note_retry(
    tx: Tx, conversation_id: int, task_id: int, attempt: int, until: int, error: str
) -> None:
    """A retryable model error: attempt ``attempt`` is sent at ``until``."""
    await note_event(
        tx,
        conversation_id,
        "retry",
        task=task_id,
        attempt=attempt,
        delay_ms=max(0, until - tx.now()),
        until=until,
        until_iso=iso_time(until),
        error=error[:500],
    )


async def note_restart(tx: Tx, interrupted: list[Task]) -> None:
    """The open-time reconciliation found ``interrupted`` tasks (a crash or eviction left
    them running): note one ``restart`` event per conversation naming them. Reads the
    tool calls' assistant entries, so it runs before the reconciliation's writes."""
    by_conversation: dict[int, list[JsonValue]] = {}
    await tx.prefetch_docs(EVENTS, {t.conversation_id for t in interrupted})
    for task in sorted(interrupted, key=lambda t: t.id):
        cp = task.checkpoint or {}
        item: JsonObject = {"task": task.id, "kind": _kind_name(task.kind)}
        if isinstance(cp.get("phase"), str):
            item["phase"] = cp["phase"]
        if task.kind == "perdure.tool" and isinstance(task.input, dict):
            item["tool"] = await _tool_name(tx, task.input)
        by_conversation.setdefault(task.conversation_id, []).append(item)
    for conversation_id, tasks in by_conversation.items():
        await note_event(tx, conversation_id, "restart", tasks=tasks)


async def note_abort(tx: Tx, task: Task, scope: str, **fields: JsonValue) -> None:
    """``task`` is being marked for abort in ``tx`` by the ``scope`` path (``task``,
    ``timer``, ``submission``): note it in the task's conversation, with its kind and,
    for a tool call, the tool's name."""
    detail: JsonObject = {"task": task.id, "task_kind": _kind_name(task.kind)}
    if task.kind == "perdure.tool" and isinstance(task.input, dict):
        detail["tool"] = await _tool_name(tx, task.input)
    await note_event(tx, task.conversation_id, "abort", scope=scope, tasks=1, **detail, **fields)


def _kind_name(kind: str) -> str:
    # The built-in kinds (``perdure.generation``, ``perdure.tool``, ...) by their short name.
    return kind.removeprefix("perdure.")


async def _tool_name(tx: Tx, value: JsonObject) -> str | None:
    assistant = value.get("assistant")
    entry = await tx.entry(assistant) if isinstance(assistant, int) else None
    message = message_from_json(entry.message) if entry is not None and entry.message else None
    if isinstance(message, AssistantMessage):
        for call in message.tool_calls:
            if call.id == value.get("call_id"):
                return call.name
    return None


def summarize_recovery(events: list[JsonObject]) -> str:
    """One line for people: ``search reran, book_seat recovered from the sandbox``."""
    parts: list[str] = []
    for event in events:
        if event.get("kind") == "tool_recovery":
            tool = str(event.get("tool"))
            how = event.get("how")
            if how == "rerun":
                parts.append(f"{tool} reran")
            elif how == "recovered":
                parts.append(f"{tool} recovered from the sandbox")
            else:
                parts.append(f"{tool} interrupted")
        elif event.get("kind") == "request_resent":
            parts.append("the model request was sent again")
    return ", ".join(parts)
