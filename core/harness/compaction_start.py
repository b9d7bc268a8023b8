"""When a conversation needs a compaction, and starting one: what every turn asks (a
generation's ``prepare`` plans the request's compaction need) and what a conversation's
``compact()`` does. The compaction task itself — choosing the cut, summarizing, landing
the summary — is :mod:`~core.harness.compaction`, which the harness imports when the
scheduler first meets a compaction task, not on every open (issue 36: a fresh Pyodide
isolate compiles every module it imports); its docstring describes the thresholds."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, cast

from core.harness.builtin_documents import LIVE
from core.harness.events import note_event
from core.harness.messages import AssistantMessage, Message, message_chars
from core.harness.settings import CompactionSettings
from core.jsonvalue import JsonObject, JsonValue
from core.records import Task
from core.session.transaction import Tx

__all__ = [
    "COMPACTION",
    "compaction_need",
    "context_tokens",
    "estimate_tokens",
    "in_flight_compaction",
    "start_compaction",
]

COMPACTION = "perdure.compaction"


def estimate_tokens(message: Message) -> int:
    """About four characters per token."""
    return message_chars(message) // 4 + 1


def context_tokens(messages: Sequence[Message]) -> int:
    """The newest answer's reported usage (the size of its request and response) plus
    estimates of what came after it; estimates of everything if no answer reported one."""
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if isinstance(m, AssistantMessage) and m.usage.total_tokens > 0:
            return m.usage.total_tokens + sum(estimate_tokens(x) for x in messages[i + 1 :])
    return sum(estimate_tokens(m) for m in messages)


def compaction_need(
    settings: CompactionSettings, tokens: int, window: int
) -> Literal["blocking", "background"] | None:
    """Which compaction, if any, a request of ``tokens`` into a ``window`` calls for."""
    if not settings.enabled:
        return None
    if tokens > window - settings.reserve_tokens:
        return "blocking"
    if tokens > window - settings.reserve_tokens - settings.background_tokens:
        return "background"
    return None


async def start_compaction(
    tx: Tx,
    conversation_id: int,
    *,
    reason: str,
    owner: int | None = None,
    instructions: str | None = None,
) -> Task | None:
    """Create a compaction task (owned by ``owner``, a generation that waits for it, or
    else by the conversation) and note it in ``live``. An automatic background
    compaction is not started while another one of the conversation is in flight or its
    summary waits to land."""
    live = await tx.doc(LIVE, conversation_id)
    value = live.value if isinstance(live.value, dict) else {}
    if owner is None and reason == "threshold" and await _pending(tx, value) is not None:
        return None
    data: JsonObject = {"reason": reason}
    if instructions:
        data["instructions"] = instructions
    task = await tx.create_task(
        COMPACTION, data, owner=owner, conversation_id=None if owner else conversation_id
    )
    value["compaction"] = {"task": task.id, "reason": reason, "state": "summarizing"}
    live.value = value
    await note_event(
        tx, conversation_id, "compaction", state="started", reason=reason, task=task.id
    )
    return task


async def _pending(tx: Tx, live: JsonValue) -> JsonObject | None:
    """The conversation's compaction note if that compaction is still in flight: its
    task is live, or its summary is queued to land."""
    noted = live.get("compaction") if isinstance(live, dict) else None
    if not isinstance(noted, dict):
        return None
    if isinstance(noted.get("submission"), int):
        return noted  # queued: cleared when the summary lands or ends stale
    task_id = noted.get("task")
    running = await tx.task(task_id) if isinstance(task_id, int) else None
    return noted if running is not None and running.live else None


async def in_flight_compaction(tx: Tx, conversation_id: int) -> int | None:
    """The id of the conversation's compaction that is still summarizing, if any (a
    generation that needs a compaction waits for it instead of starting another)."""
    live = await tx.doc(LIVE, conversation_id)
    noted = await _pending(tx, live.value)
    if noted is None or isinstance(noted.get("submission"), int):
        return None
    return cast(int, noted["task"])
