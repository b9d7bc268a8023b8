"""Compaction: summarizing older context so a conversation fits its model's window.

Nothing is deleted: a compaction appends a *summary entry* that is a head marker
(``head`` = the first entry it keeps), so the active context becomes the summary plus
the kept entries; the older entries stay in storage and in the transcript.

Thresholds (``CompactionSettings``; tokens estimated from the usage of the newest answer
plus about four characters per token for what came after it):

* above ``window - reserve`` a generation first runs a **blocking** compaction it owns
  (or waits for the one already summarizing), then sends its request whatever the
  outcome;
* above ``window - reserve - background`` a **background** compaction starts; its
  summary lands at the next boundary — the next post-tools boundary of a running run,
  which continues compacted, or at once when idle — or ends ``stale`` if another cut
  overtook it;
* a provider **context overflow** compacts once and retries the request;
* ``Conversation.compact(instructions)`` runs one by hand.

At most one automatic compaction per conversation is in flight: ``live["compaction"]``
notes it from its start until its summary has landed or ended stale — a summary queued
in the inbox still counts (``state: "queued"`` and its ``submission``). A background
compaction is not started while the note stands, and a generation that needs one
waits for the noted one instead of starting its own. Only ``compact()`` by hand starts
regardless (the user asked for it, with its own instructions); a summary it overtakes
ends stale. The ``usage`` ledger counts landed and stale compactions (``compactions``)
and ``live["stale_compaction"]`` explains the latest stale end.

Token estimates: the answers a summary kept carry no usage in the new range's context
(see :class:`~core.harness.context.ActiveRange`), so the first request after a landing
is estimated from its messages, not from the usage of the request before the cut.

The compaction task: ``select`` (choose the cut: keep about ``keep_recent`` tokens,
cutting at a user or assistant entry), ``summarize`` (model requests with no tools),
``retry`` (backoff on retryable errors). A summary request always fits the summarizer:
when the range is larger than ``window - reserve`` it is summarized incrementally, the
previous partial summary plus the next chunk per request; each chunk's summary is
checkpointed (``position``, ``summary``) with its usage, so a crash between chunks
resumes at the next chunk and nothing is summarized twice.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, cast

from core.harness.builtin_documents import LIVE

# When a compaction is needed and starting one live in compaction_start (every turn
# asks); they are this module's names too, as they were before the split.
from core.harness.compaction_start import (
    COMPACTION,
    compaction_need,
    context_tokens,
    estimate_tokens,
    in_flight_compaction,
    start_compaction,
)
from core.harness.context import ContextView, derive_context
from core.harness.events import note_event
from core.harness.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
    message_from_json,
    message_to_json,
)
from core.harness.models import ModelError, ModelInfo, ModelRequest, StreamDone
from core.harness.runs import add_usage, admit_write, count_stale, new_submission
from core.harness.settings import CompactionSettings
from core.jsonvalue import JsonObject, JsonValue
from core.records import (
    Aborted,
    Completed,
    Entry,
    ErrorInfo,
    Failed,
    Faulted,
    Orphaned,
    Task,
    Waiting,
)
from core.session.session import ensure_outside_commit
from core.session.transaction import Tx
from core.tasks.definition import TaskDefinition, define_task
from core.tasks.runtime import TaskRuntime

if TYPE_CHECKING:
    from core.harness.services import HarnessServices

__all__ = [
    "COMPACTION",
    "SUMMARY_PROMPT",
    "compaction_need",
    "compaction_task",
    "context_tokens",
    "estimate_tokens",
    "in_flight_compaction",
    "select_cut",
    "serialize",
    "settle_compaction",
    "start_compaction",
    "summary_budget",
    "summary_text",
]

SUMMARY_PROMPT = (
    "You compact conversations. Write a faithful, dense summary of the conversation below "
    "for the assistant that will continue it: the user's goals and constraints, decisions "
    "made, facts learned, tool results that still matter, open questions and the next "
    "steps. Do not address the user."
)
UPDATE_PROMPT = (
    "Update the previous summary with the part of the conversation that follows it: keep "
    "everything from the previous summary that still matters and add what this part adds."
)
RESULT_LIMIT = 2000


async def settle_compaction(
    tx: Tx, task: Task, *, state: str | None = None, reason: str | None = None
) -> None:
    """A compaction ended without a summary to land (failed, skipped, aborted, stale, or
    settled by the scheduler): clear its ``live`` note and note its end as a
    ``compaction`` event (``state``, ``reason``), so that every ``started`` event is
    followed by its end and no client shows a compaction running forever.

    ``state`` defaults to what the scheduler's outcome says (``aborted``, or ``failed``
    for a fault or an orphan; a completed task told its own end). A stale end is noted by
    :func:`~core.harness.runs.count_stale` instead (``state="stale"`` notes nothing)."""
    outcome = task.outcome
    if state is None and isinstance(outcome, Aborted):
        state = "aborted"
    elif state is None and isinstance(outcome, Faulted | Orphaned):
        state = "failed"
        reason = outcome.error.message if isinstance(outcome, Faulted) else outcome.reason
    if state is not None and state != "stale":
        fields: dict[str, JsonValue] = {"state": state, "task": task.id}
        if reason is not None:
            fields["reason"] = reason
        await note_event(tx, task.conversation_id, "compaction", **fields)
    live = await tx.doc(LIVE, task.conversation_id)
    value = live.value
    noted = value.get("compaction") if isinstance(value, dict) else None
    if isinstance(value, dict) and isinstance(noted, dict) and noted.get("task") == task.id:
        del value["compaction"]


def select_cut(view: ContextView, keep_recent_tokens: int) -> int | None:
    """The first entry to keep, or ``None`` when nothing is worth compacting.

    Walking back from the newest entry, keep about ``keep_recent_tokens``; then cut at
    the nearest user or assistant entry at or before that point (never at a tool result,
    which must stay with its call), provided something older remains to summarize.
    """
    candidates: list[Entry] = []
    total = 0
    reached = False
    for entry, message in zip(reversed(view.entries), reversed(_parsed(view)), strict=True):
        if entry.id == view.head or message is None:
            continue
        if isinstance(message, AssistantMessage) and message.stop_reason in ("aborted", "error"):
            continue
        if isinstance(message, SystemMessage):
            continue
        total += estimate_tokens(message)
        if total >= keep_recent_tokens:
            reached = True
        if reached and isinstance(message, UserMessage | AssistantMessage):
            candidates.append(entry)
            break
    if not candidates:
        return None
    cut = candidates[0].id
    older = [
        e
        for e in view.entries
        if e.id < cut and e.id != view.head and e.message is not None and e.kind != "system"
    ]
    return cut if older else None


def serialize(messages: Sequence[Message]) -> str:
    """The conversation as plain text for the summarizer (system prompts left out)."""
    lines: list[str] = []
    for m in messages:
        if isinstance(m, UserMessage):
            lines.append(f"[User]: {m.content}")
        elif isinstance(m, AssistantMessage):
            for block in m.content:
                if isinstance(block, ThinkingBlock):
                    lines.append(f"[Assistant thinking]: {block.thinking}")
                elif isinstance(block, TextBlock):
                    lines.append(f"[Assistant]: {block.text}")
            calls = [b for b in m.content if isinstance(b, ToolCall)]
            if calls:
                rendered = ", ".join(
                    f"{c.name}({', '.join(f'{k}={json.dumps(v)}' for k, v in c.arguments.items())})"
                    for c in calls
                )
                lines.append(f"[Assistant tool calls]: {rendered}")
        elif isinstance(m, ToolResultMessage):
            text = m.content
            if len(text) > RESULT_LIMIT:
                more = len(text) - RESULT_LIMIT
                text = f"{text[:RESULT_LIMIT]}\n[... {more} more characters truncated]"
            lines.append(f"[Tool result]: {text}")
    return "\n".join(lines)


def summary_text(summary: str) -> str:
    return (
        "The conversation history before this point was compacted into the following "
        f"summary:\n<summary>\n{summary}\n</summary>"
    )


def compaction_task(services: Callable[[], HarnessServices]) -> TaskDefinition:
    async def select(task: Task, rt: TaskRuntime) -> None:
        h = services()
        conv = rt.conversation_id
        view = await h.context(conv)
        cut = select_cut(view, h.settings.compaction.keep_recent_tokens)
        agent = await h.agent(conv)
        if cut is None or agent.model is None:
            reason = "nothing to compact" if cut is None else "no_model"

            async def skip(tx: Tx, current: Task) -> Completed:
                await settle_compaction(tx, current, state="skipped", reason=reason)
                return Completed({"skipped": reason})

            await rt.commit(skip)
            return
        upto = view.entries[-1].id
        checkpoint: JsonObject = {
            "phase": "summarize",
            "first_kept": cut,
            "upto": upto,
            "range": view.head,
            "attempt": 1,
            "model": agent.model,
            "position": 0,
            "requests": 0,
        }
        await rt.checkpoint(checkpoint)

    async def summarize(task: Task, rt: TaskRuntime) -> None:
        await _summarize(services(), task, rt)

    async def retry(task: Task, rt: TaskRuntime) -> None:
        cp = dict(task.checkpoint or {})
        await rt.checkpoint({**cp, "phase": "summarize"})

    return define_task(
        COMPACTION,
        phases={"select": select, "summarize": summarize, "retry": retry},
        initial=lambda _input: {"phase": "select"},
    )


def summary_budget(info: ModelInfo, settings: CompactionSettings) -> int:
    """The largest summary request, in estimated tokens: the summarizer's window minus
    the reserve (which also covers the summary it writes)."""
    return info.context_window - settings.reserve_tokens


def _chunk(older: Sequence[Message], position: int, room: int) -> tuple[str, int]:
    """The serialized messages from ``position`` that fit ``room`` characters, and the
    position after them. A single message too large on its own is cut to fit."""
    lines: list[str] = []
    used = 0
    end = position
    while end < len(older):
        piece = serialize([older[end]])
        if not piece:
            end += 1
            continue
        if used + len(piece) + 1 > room:
            if lines:
                break
            marker = "\n[... truncated to fit the summarizer]"
            piece = piece[: max(0, room - len(marker) - 1)] + marker
        lines.append(piece)
        used += len(piece) + 1
        end += 1
    return "\n".join(lines), end


def _prompt(summary: str | None, chunk: str, focus: str | None) -> str:
    if summary is None:
        text = f"<conversation>\n{chunk}\n</conversation>"
    else:
        text = (
            f"<previous-summary>\n{summary}\n</previous-summary>\n\n"
            f"<conversation>\n{chunk}\n</conversation>\n\n{UPDATE_PROMPT}"
        )
    if focus:
        text += f"\n\nAdditional focus: {focus}"
    return text


async def _summarize(h: HarnessServices, task: Task, rt: TaskRuntime) -> None:
    """One summary request: the whole range, or the next chunk of it on top of the
    summary so far. Each chunk's result is checkpointed; the last one lands."""
    conv = rt.conversation_id
    cp = dict(task.checkpoint or {})
    first_kept = int(cast(int, cp["first_kept"]))
    model = str(cp["model"])
    info = h.models.info(model)
    if info is None:
        await _end(rt, Failed(ErrorInfo(f"Model {model} is not available", {"reason": "no_model"})))
        return
    view = await h.context(conv, cutoff=cast(int, cp["upto"]))
    if "range" in cp and view.head != cp["range"]:
        # Another cut or a reset landed since the cut was chosen: this summary would
        # describe a context that no longer exists. Spend no further request on it.
        await _end_stale(rt, cp, view)
        return
    older = _messages_before(view, first_kept)
    value = task.input if isinstance(task.input, dict) else {}
    focus = value.get("instructions")
    focus = focus if isinstance(focus, str) and focus else None
    position = int(cast(int, cp.get("position", 0)))
    summary = cp.get("summary")
    summary = summary if isinstance(summary, str) else None
    settings = h.settings.compaction
    system = SystemMessage(content=SUMMARY_PROMPT)
    # Estimated tokens are ``chars // 4 + 1`` per message: what room is left, in
    # characters, for the chunk once the system prompt and the wrapper are counted.
    budget = summary_budget(info, settings) - estimate_tokens(system) - 1
    room = budget * 4 - len(_prompt(summary, "", focus))
    if room < 400:
        small = "The summarizer's window is too small for the summary so far"
        await _end(rt, Failed(ErrorInfo(small, {"reason": "window"})))
        return
    chunk, end = _chunk(older, position, room)
    request = ModelRequest(
        model=model,
        messages=[system, UserMessage(content=_prompt(summary, chunk, focus))],
        max_tokens=min(int(0.8 * settings.reserve_tokens), info.max_tokens),
        allow_deferred=False,
    )
    ensure_outside_commit("a summary request")
    final: AssistantMessage | None = None
    error: ModelError | None = None
    try:
        async for event in h.models.stream(request, rt.signal):
            if isinstance(event, StreamDone):
                final = event.message
                break
    except ModelError as e:
        error = e
    attempt = int(cast(int, cp.get("attempt", 1)))
    if error is not None:
        retry = h.settings.retry
        if error.retryable and retry.enabled and attempt <= retry.max_retries:
            until = rt.now() + retry.delay_ms(attempt, error.retry_after_ms)
            await rt.commit(
                lambda tx, cur: Waiting(
                    {**cp, "phase": "retry", "attempt": attempt + 1}, until=until
                )
            )
            return
        failed = Failed(ErrorInfo(f"Summarization failed: {error}", {"reason": "model_error"}))
        await _end(rt, failed)
        return
    if final is None:
        return  # cancelled
    text = final.text.strip()
    problem: str | None = None
    if final.stop_reason == "length":
        problem = "Summarization hit the token limit"
    elif final.tool_calls:
        problem = "Summarization attempted to call a tool"
    elif not text:
        problem = "Summarization produced no text"
    spent = _spent(cp) + final.usage
    requests = int(cast(int, cp.get("requests", 0))) + 1

    async def place(tx: Tx, current: Task) -> Completed | Failed | JsonObject:
        await add_usage(tx, conv, final.usage, model=final.model or model)
        if problem is not None:
            await settle_compaction(tx, current, state="failed", reason=problem)
            return Failed(ErrorInfo(problem, {"reason": "model_error"}))
        if end < len(older):  # more to summarize: checkpoint this chunk's summary
            return {
                **cp,
                "position": end,
                "summary": text,
                "attempt": 1,
                "requests": requests,
                "spent": spent.model_dump(),
            }
        return await _place_summary(tx, current, first_kept, text, spent, requests)

    await rt.commit(place)


def _spent(cp: JsonObject) -> Usage:
    spent = cp.get("spent")
    return Usage.model_validate(spent) if isinstance(spent, dict) else Usage()


async def _end(rt: TaskRuntime, outcome: Failed) -> None:
    async def end(tx: Tx, current: Task) -> Failed:
        await settle_compaction(tx, current, state="failed", reason=outcome.error.message)
        return outcome

    await rt.commit(end)


async def _end_stale(rt: TaskRuntime, cp: JsonObject, view: ContextView) -> None:
    first_kept = int(cast(int, cp["first_kept"]))
    start = view.entries[0].id if view.entries else None

    async def end(tx: Tx, current: Task) -> Completed:
        await settle_compaction(tx, current, state="stale")
        await count_stale(
            tx,
            current.conversation_id,
            task=current.id,
            first_kept=first_kept,
            range_start=start,
            spent=_spent(cp).model_dump(),
        )
        return Completed({"stale": True, "requests": cp.get("requests", 0)})

    await rt.commit(end)


def _messages_before(view: ContextView, first_kept: int) -> list[Message]:
    """The context messages that come from entries older than the cut (the previous
    summary, which opens the context, included)."""
    older = [
        (e, m)
        for e, m in zip(view.entries, _parsed(view), strict=True)
        if e.id < first_kept or e.id == view.head
    ]
    return derive_context(view.head, [e for e, _ in older], [m for _, m in older]).messages


def _parsed(view: ContextView) -> Sequence[Message | None]:
    """The parsed message of each of ``view``'s entries: the view's own when it has
    them (the harness's range parsed each entry once), else parsed here."""
    if view.parsed is not None:
        return view.parsed
    return [None if e.message is None else message_from_json(e.message) for e in view.entries]


async def _place_summary(
    tx: Tx, task: Task, first_kept: int, summary: str, spent: Usage, requests: int
) -> Completed:
    """Blocking compactions (owned by a generation) land at once; others go through the
    inbox as a write, so they are placed at the next boundary — or now, if nothing runs.
    Until it has landed (or ended stale) the ``live`` note keeps it in flight."""
    conv = task.conversation_id
    draft: JsonObject = {
        "kind": "compaction",
        "message": message_to_json(UserMessage(content=summary_text(summary))),
        "data": {"reason": _reason(task)},
        "head": first_kept,
    }
    record = await new_submission(tx, conv, "write", f"compaction:{task.id}")
    live = await tx.doc(LIVE, conv)
    value = live.value if isinstance(live.value, dict) else {}
    noted = value.get("compaction")
    if not isinstance(noted, dict) or noted.get("task") == task.id:
        # (A compaction started by hand meanwhile holds the note: it stays in flight.)
        value["compaction"] = {
            "task": task.id,
            "reason": _reason(task),
            "state": "queued",
            "submission": record.id,
            "usage": spent.model_dump(),
        }
    live.value = value
    sub = await admit_write(tx, record, draft, at_once=task.owner is not None)
    out: JsonObject = {"submission": sub.id, "requests": requests}
    if sub.entry is not None:
        out["entry"] = sub.entry
    return Completed(out)


def _reason(task: Task) -> str:
    value = task.input if isinstance(task.input, dict) else {}
    reason = value.get("reason")
    return reason if isinstance(reason, str) else "manual"
