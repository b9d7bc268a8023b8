"""The generation's ``prepare`` phase: land a queued summary, plan the request (agent,
model, system prompt change, compaction need) and pin it in the ``request`` checkpoint;
a context too big to send waits for a compaction first (``_compact_first``). The plan and
pin are reused by the tool round's hand-over, which prepares the next round.

A pin that would write nothing but the checkpoint (no prompt change, no compaction to
start) is not committed: the phase hands the checkpoint to the request, sent in the
same phase, whose response commit is the phase's durable progress (one task row less
per run). The durable state stays ``prepare`` meanwhile; a crash before that commit
prepares again, as a crash before a committed pin does: the request has no effect of
its own, and the cutoff only grows."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, cast

from core.harness.builtin_documents import INBOX, LIVE
from core.harness.compaction_start import (
    compaction_need,
    context_tokens,
    in_flight_compaction,
    start_compaction,
)
from core.harness.context import ContextView
from core.harness.generation.end import _fail_run
from core.harness.generation.live import (
    _checkpoint_copy,
    _committed_value,
    _is_current,
    _live_section,
    _round,
    _with_round,
)
from core.harness.messages import Message, SystemMessage, message_to_json
from core.harness.prompt import PromptChange, plan_prompt, render_sections
from core.harness.registry import ResolvedAgent, SectionContext
from core.harness.runs import land_summaries, queued_summary
from core.jsonvalue import JsonObject, JsonValue
from core.readonly import readonly
from core.records import Task, Waiting
from core.session.transaction import Tx
from core.tasks.runtime import TaskRuntime

if TYPE_CHECKING:
    from core.harness.services import HarnessServices

__all__: list[str] = []  # the package's own: the hand-over reuses the plan and pin


@readonly(slots=False)
class _Plan:
    """What preparing a request decides: the pinned model and options, and the system
    prompt change to record (if any)."""

    model: str
    thinking: str
    max_tokens: int
    change: PromptChange | None
    compaction: Literal["blocking", "background"] | None
    seen: int | None
    """The newest entry of the context the plan was made on: the cutoff of a request
    pinned without a commit."""


async def _plan_request(h: HarnessServices, conv: int, extra: Message | None = None) -> _Plan | str:
    """Resolve the agent and plan the prompt; a string is the ``no_model`` detail.
    ``extra``: a message the commit this plan is for adds to the context (counted in
    the compaction decision)."""
    agent = await h.agent(conv)
    if agent.model is None:
        return "No model is configured for this conversation"
    info = h.models.info(agent.model)
    if info is None:
        return f"Model {agent.model} is not available"
    ctx = await h.context(conv)
    wanted = await _render(h, agent, conv, ctx)
    change = plan_prompt(ctx.sections, wanted, baseline=not ctx.prompted)
    tokens = context_tokens([*ctx.messages, extra] if extra is not None else ctx.messages)
    need = compaction_need(h.settings.compaction, tokens, info.context_window)
    seen = ctx.entries[-1].id if ctx.entries else None
    return _Plan(agent.model, agent.thinking, info.max_tokens, change, need, seen)


async def _pin_request(
    h: HarnessServices,
    tx: Tx,
    conv: int,
    plan: _Plan,
    by_task: int,
    attempt: int,
    *,
    overflowed: bool,
    round_: int,
) -> JsonObject:
    """Inside a commit: record the prompt change, start a background compaction if the
    context calls for one, and return the ``request`` checkpoint, whose cutoff is the
    newest entry the request will see."""
    if plan.compaction == "background":
        await start_compaction(tx, conv, reason="threshold")
    latest = await h.context(conv)
    seen = [e.id for e in latest.entries[-1:]] + [
        e.id for e in tx.entries if e.conversation_id == conv
    ]
    cutoff = max(seen) if seen else None  # entries this commit places (steers) included
    if plan.change is not None:
        entry = await tx.append_entry(
            conv,
            "system",
            message=message_to_json(SystemMessage(content=plan.change.text)),
            data=plan.change.data,
            by_task_id=by_task,
        )
        cutoff = entry.id
    return _request_checkpoint(plan, attempt, cutoff, overflowed=overflowed, round_=round_)


def _request_checkpoint(
    plan: _Plan, attempt: int, cutoff: int | None, *, overflowed: bool, round_: int
) -> JsonObject:
    checkpoint: JsonObject = {
        "phase": "request",
        "attempt": attempt,
        "model": plan.model,
        "thinking": plan.thinking,
        "max_tokens": plan.max_tokens,
        "options": {},
        "cutoff": cutoff,
    }
    if overflowed:
        checkpoint["overflowed"] = True
    return _with_round(checkpoint, round_)


async def _prepare_phase(h: HarnessServices, task: Task, rt: TaskRuntime) -> JsonObject | None:
    """Prepare the request. Returns the ``request`` checkpoint to send in this same phase
    when pinning it would have written nothing else (see the module docstring): it is
    not committed. ``None``: the phase committed its progress (the pin, a landed
    summary, a compaction to wait for, a failure)."""
    conv = rt.conversation_id
    cp = _checkpoint_copy(task)
    attempt = int(cast(int, cp.get("attempt", 1)))
    if await _summary_waits(h, conv, rt.task_id):

        async def land(tx: Tx, current: Task) -> JsonObject:
            if _is_current(await tx.doc(LIVE, conv), current.id):
                await land_summaries(tx, conv, h.settings)
            return {**cp, "landed": int(cast(int, cp.get("landed", 0))) + 1}

        await rt.commit(land)
        return None
    plan = await _plan_request(h, conv)
    if isinstance(plan, str):
        await _fail_run(h, rt, "no_model", plan)
        return None
    if plan.compaction == "blocking" and not cp.get("compacted"):
        # Too big to send: wait for a compaction of our own, then send whatever it did.
        await _compact_first(rt, cp, reason="threshold")
        return None
    overflowed = bool(cp.get("overflowed"))
    if plan.change is None and plan.compaction is None:
        # The pin would write the checkpoint alone: keep it in memory, its cutoff the
        # newest committed entry the plan saw (no commit places one before the request).
        return _request_checkpoint(
            plan, attempt, plan.seen, overflowed=overflowed, round_=_round(cp)
        )

    async def pin(tx: Tx, current: Task) -> JsonObject:
        return await _pin_request(
            h, tx, conv, plan, current.id, attempt, overflowed=overflowed, round_=_round(cp)
        )

    await rt.commit(pin)
    return None


async def _summary_waits(h: HarnessServices, conv: int, task_id: int) -> bool:
    """Whether a compaction summary is queued while this generation runs the run."""
    inbox = await _committed_value(h.session, INBOX, conv)
    if not queued_summary(inbox):
        return False
    live = await _committed_value(h.session, LIVE, conv)
    run = live.get("run") if isinstance(live, dict) else None
    return isinstance(run, dict) and run.get("generation") == task_id


async def _compact_first(rt: TaskRuntime, cp: JsonObject, *, reason: str) -> None:
    """Wait for a compaction — the conversation's one in flight, else one this
    generation owns — then prepare the request again (landing its summary first)."""

    async def compact(tx: Tx, current: Task) -> Waiting:
        conv = rt.conversation_id
        waited = await in_flight_compaction(tx, conv)
        if waited is not None:
            child_id = waited  # at most one compaction at a time: join it
        else:
            child = await start_compaction(tx, conv, reason=reason, owner=current.id)
            assert child is not None  # owned compactions always start
            child_id = child.id
        live = await tx.doc(LIVE, rt.conversation_id)
        _live_section(live, "generation").pop("partial", None)
        checkpoint: JsonObject = {"phase": "prepare", "attempt": cp.get("attempt", 1)}
        checkpoint["compacted"] = True
        if reason == "overflow":
            checkpoint["overflowed"] = True
        return Waiting(_with_round(checkpoint, _round(cp)), (child_id,))

    await rt.commit(compact)


async def _render(
    h: HarnessServices, agent: ResolvedAgent, conv: int, ctx: ContextView
) -> dict[str, str]:
    async def documents(definition: Any) -> JsonValue:
        return await h.session.document_value(definition, conv)

    section_ctx = SectionContext(conv, agent, documents)
    try:
        return await render_sections(agent, section_ctx)
    except Exception as e:
        # A failing section must not take the run down: keep what the model was told.
        h.report(e)
        return dict(ctx.sections)
