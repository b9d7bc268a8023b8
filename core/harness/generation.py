"""The generation task: one model request of a run, and what follows from its answer.

Phases (checkpoint ``phase``):

``prepare``  land a compaction summary queued for this run (this point is the
             post-tools boundary the run just passed); resolve the agent, render the
             system prompt and record what changed as a ``system`` entry, pin the
             model, thinking level and the context ``cutoff``; decide compaction: a
             context too big to send first waits for a compaction — the one already
             summarizing, or one the generation owns (``compacted`` marks that it
             did) —, a context in the background band starts a conversation-owned
             compaction in the pin commit (unless one is in flight).
``request``  stream from the model, committing partial output to ``live`` (throttled,
             and only once the response has streamed for a while or grown: a short
             response commits no partial); then one commit classifies the response:
             * an answer → assistant entry, the run's inputs ``done``, the final boundary
               (which may start the next run);
             * tool calls → assistant entry, one tool task per call (owned by this task),
               and ``waiting`` on them (``tools``);
             * a deferred response → ``waiting{until}`` then ``poll``;
             * a context overflow → an owned compaction, then ``prepare`` again; a
               second overflow (``overflowed``) is an ordinary error;
             * a retryable error → ``waiting{until}`` with exponential backoff, then
               ``retry``; otherwise the run's inputs end ``unanswered``.
``retry``    resend the request with the pinned model and options.
``poll``     fetch a deferred response.
``tools``    after the tool round: the post-tools boundary (steers join the run, a
             queued compaction summary lands) and, in the same commit, the run handed
             to a new generation task — already prepared, unless the boundary moved
             the context's start (then the successor prepares against the new range).

A crash at any point resumes at the last checkpoint: an interrupted request is sent again
(its committed partial stays in ``live`` and is not replayed), a backoff or poll time
is kept, and a tool round waits for its tool tasks.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, cast

from core.errors import InvalidJson, InvocationEnded, SessionClosed, TaskStateError
from core.harness.builtin_documents import INBOX, LIVE
from core.harness.compaction import (
    compaction_need,
    context_tokens,
    in_flight_compaction,
    start_compaction,
)
from core.harness.context import ContextView
from core.harness.events import note_event, note_retry
from core.harness.live import Throttle
from core.harness.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolResultMessage,
    message_from_json,
    message_to_json,
    servable_message,
)
from core.harness.models import (
    Deferred,
    ModelError,
    ModelRequest,
    StreamDone,
    StreamEvent,
    StreamStart,
    TextDelta,
    ToolCallDelta,
    ToolSpec,
)
from core.harness.partial import Partial, close_stream
from core.harness.prompt import PromptChange, plan_prompt, render_sections
from core.harness.registry import ResolvedAgent, SectionContext
from core.harness.runs import (
    GENERATION,
    TOOL,
    add_usage,
    final_boundary,
    land_summaries,
    post_tools_boundary,
    queued_summary,
    settle_run,
    withdraw_inputs,
)
from core.jsonvalue import JsonObject, JsonValue, dumps, json_copy
from core.records import (
    Aborted,
    Completed,
    ErrorInfo,
    Failed,
    Faulted,
    Orphaned,
    Task,
    Terminal,
    Waiting,
)
from core.session.documents import DocHandle
from core.session.session import ensure_outside_commit
from core.session.transaction import Tx
from core.tasks.definition import TaskDefinition, define_task
from core.tasks.runtime import TaskRuntime

if TYPE_CHECKING:
    from core.harness.services import HarnessServices

__all__ = [
    "generation_task",
    "merge_hand_over",
    "plan_merged_hand_over",
    "round_intent",
    "settle_generation",
]


def generation_task(services: Callable[[], HarnessServices]) -> TaskDefinition:
    async def prepare(task: Task, rt: TaskRuntime) -> None:
        await _prepare(services(), task, rt)

    async def request(task: Task, rt: TaskRuntime) -> None:
        await _request(services(), task, rt)

    async def retry(task: Task, rt: TaskRuntime) -> None:
        cp = _checkpoint(task)

        async def resend(tx: Tx, current: Task) -> JsonObject:
            live = await tx.doc(LIVE, rt.conversation_id)
            gen = _section(live, "generation")
            gen.pop("retry", None)
            return {**cp, "phase": "request"}

        await rt.commit(resend)

    async def poll(task: Task, rt: TaskRuntime) -> None:
        await _poll(services(), task, rt)

    async def tools(task: Task, rt: TaskRuntime) -> None:
        await _after_tools(services(), task, rt)

    async def abort(task: Task, rt: TaskRuntime) -> None:
        h = services()
        cp = task.checkpoint or {}
        if cp.get("phase") == "poll":
            try:
                await h.models.cancel_deferred(str(cp.get("model")), cp.get("handle"))
            except Exception as e:  # the run ends aborted either way
                h.report(e)

        async def settle(tx: Tx, current: Task) -> Aborted:
            await _end_run(h, tx, current, reason="aborted")
            return Aborted("aborted")

        await rt.commit(settle)

    return define_task(
        GENERATION,
        phases={
            "prepare": prepare,
            "request": request,
            "retry": retry,
            "poll": poll,
            "tools": tools,
        },
        initial=lambda _input: {"phase": "prepare", "attempt": 1},
        abort=abort,
    )


# --------------------------------------------------------------------------- prepare


@dataclass(frozen=True)
class _Plan:
    """What preparing a request decides: the pinned model and options, and the system
    prompt change to record (if any)."""

    model: str
    thinking: str
    max_tokens: int
    change: PromptChange | None
    compaction: Literal["blocking", "background"] | None


async def _plan(h: HarnessServices, conv: int, extra: Message | None = None) -> _Plan | str:
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
    return _Plan(agent.model, agent.thinking, info.max_tokens, change, need)


async def _pin(
    h: HarnessServices,
    tx: Tx,
    conv: int,
    plan: _Plan,
    by_task: int,
    attempt: int,
    *,
    overflowed: bool,
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
    return checkpoint


async def _prepare(h: HarnessServices, task: Task, rt: TaskRuntime) -> None:
    conv = rt.conversation_id
    cp = _checkpoint(task)
    attempt = int(cast(int, cp.get("attempt", 1)))
    if await _summary_waits(h, conv, rt.task_id):

        async def land(tx: Tx, current: Task) -> JsonObject:
            if _is_current(await tx.doc(LIVE, conv), current.id):
                await land_summaries(tx, conv, h.settings)
            return {**cp, "landed": int(cast(int, cp.get("landed", 0))) + 1}

        await rt.commit(land)
        return
    plan = await _plan(h, conv)
    if isinstance(plan, str):
        await _fail(h, rt, "no_model", plan)
        return
    if plan.compaction == "blocking" and not cp.get("compacted"):
        # Too big to send: wait for a compaction of our own, then send whatever it did.
        await _compact_first(rt, cp, reason="threshold")
        return

    async def pin(tx: Tx, current: Task) -> JsonObject:
        overflowed = bool(cp.get("overflowed"))
        return await _pin(h, tx, conv, plan, current.id, attempt, overflowed=overflowed)

    await rt.commit(pin)


async def _summary_waits(h: HarnessServices, conv: int, task_id: int) -> bool:
    """Whether a compaction summary is queued while this generation runs the run."""
    inbox = await h.session.document_value(INBOX, conv)
    if not queued_summary(inbox):
        return False
    live = await h.session.document_value(LIVE, conv)
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
        _section(live, "generation").pop("partial", None)
        checkpoint: JsonObject = {"phase": "prepare", "attempt": cp.get("attempt", 1)}
        checkpoint["compacted"] = True
        if reason == "overflow":
            checkpoint["overflowed"] = True
        return Waiting(checkpoint, (child_id,))

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


# --------------------------------------------------------------------------- request and poll


@dataclass
class _Response:
    final: AssistantMessage | None = None
    deferred: Deferred | None = None
    error: ModelError | None = None


async def _consume(
    h: HarnessServices, rt: TaskRuntime, stream: AsyncIterator[StreamEvent], partial: Partial
) -> _Response:
    conv = rt.conversation_id

    async def commit_partial() -> int:
        snapshot = message_to_json(partial.message("aborted"))

        async def write(tx: Tx, current: Task) -> None:
            live = await tx.doc(LIVE, conv)
            _section(live, "generation")["partial"] = snapshot

        try:
            await rt.commit(write)
        except (TaskStateError, InvocationEnded, SessionClosed):
            return 0  # aborted or closing: the outcome is someone else's to write
        return len(dumps(snapshot))

    progress = h.settings.progress
    throttle = Throttle(
        h.clock,
        progress.partial_interval_ms,
        commit_partial,
        h.report,
        quiet_ms=progress.partial_after_ms,
        quiet_bytes=progress.partial_after_bytes,
    )
    response = _Response()
    ensure_outside_commit("a model request")
    try:
        async for event in stream:
            if type(event) is TextDelta:  # most events: appended without the dispatch below
                partial.add_text(event.text)
                throttle.changed(partial.size)
                continue
            if isinstance(event, StreamStart):
                continue
            if isinstance(event, StreamDone):
                response.final = servable_message(event.message)
                break
            if isinstance(event, Deferred):
                response.deferred = event
                break
            partial.add(event)
            if not isinstance(event, ToolCallDelta):
                # Text and thinking are what watchers read as it streams; tool calls are
                # shown once the round commits, so their argument fragments commit nothing.
                throttle.changed(partial.size)
    except ModelError as e:
        response.error = e
    except Exception as e:  # an adapter bug is still a failed request, not a crashed run
        h.report(e)
        response.error = ModelError(f"{type(e).__name__}: {e}")
    finally:
        await throttle.close()
        await close_stream(stream, h.report)
    if response == _Response() and not rt.signal.cancelled:
        response.error = ModelError("the model stream ended without a final message")
    return response


async def _request(h: HarnessServices, task: Task, rt: TaskRuntime) -> None:
    conv = rt.conversation_id
    cp = _checkpoint(task)
    model = str(cp["model"])
    if h.models.info(model) is None:
        await _fail(h, rt, "no_model", f"Model {model} is not available")
        return
    await _keep_interrupted_partial(h, rt)
    ctx = await h.context(conv, cutoff=cast("int | None", cp.get("cutoff")))
    agent = await h.agent(conv)
    messages = ctx.messages
    for hooks in agent.hooks:
        if hooks.before_request is not None:
            try:
                replaced = await hooks.before_request(list(messages), rt)
            except Exception as e:
                h.report(e)
                continue
            if replaced is not None:
                messages = replaced
    request = ModelRequest(
        model=model,
        messages=messages,
        tools=[ToolSpec(t.name, t.description, t.schema()) for t in agent.tools.values()],
        thinking=cast(Any, cp.get("thinking", "off")),
        max_tokens=cast("int | None", cp.get("max_tokens")),
        options=cast(JsonObject, cp.get("options") or {}),
    )
    partial = Partial(model)
    response = await _consume(h, rt, h.models.stream(request, rt.signal), partial)
    await _classify(h, rt, cp, response, partial, offered={t.name for t in agent.tools.values()})


async def _keep_interrupted_partial(h: HarnessServices, rt: TaskRuntime) -> None:
    """A crash cut a request short after some of it was committed: keep that partial as an
    aborted assistant entry (the transcript shows what was seen; context leaves it out)
    before the request is sent again."""
    live = await h.session.document_value(LIVE, rt.conversation_id)
    gen = live.get("generation") if isinstance(live, dict) else None
    if not isinstance(gen, dict) or gen.get("task") != rt.task_id or "partial" not in gen:
        return

    async def keep(tx: Tx, current: Task) -> None:
        doc = await tx.doc(LIVE, rt.conversation_id)
        section = _section(doc, "generation")
        partial = section.pop("partial", None)
        if isinstance(partial, dict):
            message = message_from_json(partial)
            await tx.append_entry(
                rt.conversation_id,
                "assistant",
                message=message_to_json(message),
                data={"interrupted": "restart"},
                by_task_id=current.id,
            )
            await note_event(
                tx, rt.conversation_id, "request_resent", task=current.id, partial=True
            )

    await rt.commit(keep)


async def _poll(h: HarnessServices, task: Task, rt: TaskRuntime) -> None:
    cp = _checkpoint(task)
    model = str(cp["model"])
    if h.models.info(model) is None:
        await _fail(h, rt, "no_model", f"Model {model} is not available")
        return
    agent = await h.agent(rt.conversation_id)
    partial = Partial(model)
    response = await _consume(h, rt, h.models.fetch(model, cp.get("handle"), rt.signal), partial)
    await _classify(h, rt, cp, response, partial, offered={t.name for t in agent.tools.values()})


async def _classify(
    h: HarnessServices,
    rt: TaskRuntime,
    cp: JsonObject,
    response: _Response,
    partial: Partial,
    offered: set[str],
) -> None:
    conv = rt.conversation_id
    attempt = int(cast(int, cp.get("attempt", 1)))
    deferred = response.deferred
    if deferred is not None:
        previous = cast("int | None", cp.get("poll_at"))
        poll_at = rt.now() + max(1, deferred.poll_after_ms)
        if previous is not None and poll_at <= previous:
            poll_at = previous + 1  # poll times strictly increase

        async def wait(tx: Tx, current: Task) -> Waiting:
            live = await tx.doc(LIVE, conv)
            gen = _section(live, "generation")
            gen.pop("partial", None)
            gen["deferred"] = {"poll_at": poll_at}
            checkpoint = {
                **cp,
                "phase": "poll",
                "handle": deferred.handle,
                "poll_at": poll_at,
            }
            return Waiting(checkpoint, until=poll_at)

        await rt.commit(wait)
        return
    error = response.error
    if error is not None and error.context_overflow and not cp.get("overflowed"):
        await _compact_first(rt, cp, reason="overflow")  # compact, then retry once
        return
    if error is not None:
        retry = h.settings.retry
        if error.retryable and retry.enabled and attempt <= retry.max_retries:
            until = rt.now() + retry.delay_ms(attempt, error.retry_after_ms)

            async def backoff(tx: Tx, current: Task) -> Waiting:
                live = await tx.doc(LIVE, conv)
                gen = _section(live, "generation")
                gen.pop("partial", None)
                gen["retry"] = {"at": until, "attempt": attempt + 1, "error": str(error)}
                await note_retry(tx, conv, current.id, attempt + 1, until, str(error))
                return Waiting({**cp, "phase": "retry", "attempt": attempt + 1}, until=until)

            await rt.commit(backoff)
            return
        message = partial.message("error", str(error))
        await _fail(h, rt, "model_error", str(error), message)
        return
    final = response.final
    if final is None:
        return  # the stream stopped because the invocation is being cancelled
    final = final.model_copy(update={"model": final.model or str(cp.get("model"))})
    calls = final.tool_calls
    if calls and final.stop_reason != "error":
        await _tool_round(h, rt, final, offered)
    else:
        await _answer(h, rt, final)


async def _answer(h: HarnessServices, rt: TaskRuntime, message: AssistantMessage) -> None:
    conv = rt.conversation_id

    async def answer(tx: Tx, current: Task) -> Completed:
        entry = await tx.append_entry(
            conv, "assistant", message=message_to_json(message), by_task_id=current.id
        )
        await add_usage(tx, conv, message.usage, model=message.model)
        live = await tx.doc(LIVE, conv)
        if _is_current(live, current.id):
            settle_run(tx, conv, live, answer=entry.id)
            await final_boundary(tx, conv, h.settings)
        return Completed({"entry": entry.id})

    await rt.commit(answer)


async def _tool_round(
    h: HarnessServices, rt: TaskRuntime, message: AssistantMessage, offered: set[str]
) -> None:

    conv = rt.conversation_id
    agent = await h.agent(conv)
    calls = message.tool_calls
    sequential = h.settings.tool_execution == "sequential" or any(
        agent.tools[c.name].execution_mode == "sequential" for c in calls if c.name in agent.tools
    )

    async def round_(tx: Tx, current: Task) -> Waiting:
        entry = await tx.append_entry(
            conv, "assistant", message=message_to_json(message), by_task_id=current.id
        )
        await add_usage(tx, conv, message.usage, model=message.model)
        live = await tx.doc(LIVE, conv)
        _section(live, "generation").pop("partial", None)
        slots = _section(live, "tools")
        slots.clear()
        runnable: list[str] = []
        for call in calls:
            if call.name in offered:
                runnable.append(call.id)
                slots[call.id] = {"name": call.name, "status": "pending"}
                continue
            # The model called a tool it was not offered: answer at once, no task.
            result = ToolResultMessage(
                tool_call_id=call.id,
                tool_name=call.name,
                content=f"[error] Tool {call.name} is not available",
                is_error=True,
            )
            await tx.append_entry(
                conv,
                "tool_result",
                message=message_to_json(result),
                data={
                    "call_id": call.id,
                    "diagnostics": [
                        {
                            "code": "tool_unavailable",
                            "message": f"Tool {call.name} is not available",
                            "severity": "error",
                        }
                    ],
                },
                by_task_id=current.id,
            )
        started: list[int] = []
        by_id = {c.id: c for c in calls}
        for call_id in runnable[: 1 if sequential else len(runnable)]:
            call = by_id[call_id]
            tool = await tx.create_task(
                TOOL,
                {"assistant": entry.id, "call_id": call_id},
                owner=current.id,
                checkpoint=round_intent(agent, call),
            )
            started.append(tool.id)
            cast(JsonObject, slots[call_id])["task"] = tool.id
        checkpoint: JsonObject = {
            "phase": "tools",
            "assistant": entry.id,
            "calls": cast(JsonValue, runnable),
            "tasks": cast(JsonValue, started),
            "sequential": sequential,
        }
        return Waiting(checkpoint, tuple(started))

    await rt.commit(round_)


# --------------------------------------------------------------------------- after tools


def round_intent(agent: ResolvedAgent, call: ToolCall) -> JsonObject | None:
    """The first checkpoint of a tool task, staged by the generation's round commit.

    A ``safe`` tool of an agent without ``before_tool`` hooks starts at its intent —
    ``execute`` with the model's arguments and the policy — so the call runs without
    an intent commit of its own. The invocation reserved in that commit (``fresh``)
    still runs the whole ``call`` phase (resolution, validation); any later one is a
    recovery and reruns it only if it is still safe (invariant 7). Hooks could block
    or rewrite the call, and recovery does not rerun them: with hooks, and for every
    other tool, the task starts at a bare ``call``."""
    tool = agent.tools.get(call.name)
    if tool is None or tool.replay != "safe":
        return None
    if any(hooks.before_tool is not None for hooks in agent.hooks):
        return None
    try:
        arguments = json_copy(dict(call.arguments), "tool arguments")
    except InvalidJson:
        return None
    return {"phase": "execute", "arguments": arguments, "replay": "safe", "attempt": 1}


async def _after_tools(h: HarnessServices, task: Task, rt: TaskRuntime) -> None:
    conv = rt.conversation_id
    cp = _checkpoint(task)
    calls = [str(c) for c in cast(list[JsonValue], cp.get("calls") or [])]
    started = [int(cast(int, t)) for t in cast(list[JsonValue], cp.get("tasks") or [])]
    if len(started) < len(calls):  # sequential round: start the next call

        async def next_call(tx: Tx, current: Task) -> Waiting:
            tool = await tx.create_task(
                TOOL,
                {"assistant": cp["assistant"], "call_id": calls[len(started)]},
                owner=current.id,
            )
            live = await tx.doc(LIVE, conv)
            slot = _section(live, "tools").get(calls[len(started)])
            if isinstance(slot, dict):
                slot["task"] = tool.id
            return Waiting({**cp, "tasks": [*started, tool.id]}, (tool.id,))

        await rt.commit(next_call)
        return
    agent = await h.agent(conv)
    observers = [hk.after_tools for hk in agent.hooks if hk.after_tools is not None]
    if observers:
        results = _round_results(await h.context(conv), set(calls))
        for observe in observers:
            try:
                await observe(results, rt)  # type: ignore[arg-type]
            except Exception as e:
                h.report(e)

    # The successor's preparation happens here, so it starts at ``request`` and the
    # hand-over commit also pins its model and context: one commit less per round.
    plan = await _plan(h, conv)

    async def hand_over(tx: Tx, current: Task) -> Completed:
        await _hand_over(h, tx, current, plan)
        return Completed({"entry": cp["assistant"]})

    await rt.commit(hand_over)


async def _hand_over(h: HarnessServices, tx: Tx, current: Task, plan: _Plan | str) -> None:
    """Inside a commit: the post-tools boundary of the generation ``current`` and the
    run handed to its successor (already prepared unless the boundary moved the start
    of the context or the plan says it must compact first)."""
    conv = current.conversation_id
    live = await tx.doc(LIVE, conv)
    if _is_current(live, current.id):
        await post_tools_boundary(tx, conv, h.settings)
        # A summary placed here starts a new context range: the plan made is void.
        moved = any(e.head is not None for e in tx.entries if e.conversation_id == conv)
        start = None
        if not moved and not isinstance(plan, str) and plan.compaction != "blocking":
            start = await _pin(h, tx, conv, plan, current.id, 1, overflowed=False)
        successor = await tx.create_task(
            GENERATION, {}, conversation_id=conv, checkpoint=start, continues=current
        )
        _section(live, "run")["generation"] = successor.id
        value = cast(JsonObject, live.value)
        value["generation"] = {"task": successor.id}
        value.pop("tools", None)


# --------------------------------------------------------------------------- merged hand-over
#
# The last tool of a round may carry the hand-over in its own result commit: one commit
# less per round. It is an optimisation with a fallback: whenever anything is unusual
# the generation is woken as before and its ``tools`` phase hands over.


def _round_closes(h: HarnessServices, tool: Task, staged: dict[int, Task] | None) -> Task | None:
    """The generation waiting on ``tool``'s round, if ``tool`` settling ends that round
    and nothing else needs the generation's ``tools`` phase: every other call of the
    round settled (and none left to start), no other live work owned by it, no abort
    mark, no time wait, and its definition is the registry's current one."""
    gen = h.session.tasks.get(tool.owner) if tool.owner is not None else None
    if staged is not None and gen is not None:
        gen = staged.get(gen.id, gen)
    if gen is None or gen.kind != GENERATION or gen.abort_requested:
        return None
    state = gen.state
    if not isinstance(state, Waiting) or state.until is not None or tool.id not in state.on:
        return None
    cp = state.checkpoint
    if cp.get("phase") != "tools":
        return None
    calls = cp.get("calls")
    tasks = cp.get("tasks")
    if not isinstance(calls, list) or not isinstance(tasks, list) or len(tasks) < len(calls):
        return None  # a sequential round still has calls to start
    scheduler = h.engine.scheduler
    if scheduler.closing or not scheduler.enabled:
        return None
    definition = scheduler.source.task(gen.kind)
    if definition is None or definition.version != gen.version:
        return None
    # Committed live tasks the generation owns (session index) or awaits, with this commit's writes.
    for other_id in h.session.owned_by(gen.id) | {i for i in state.on if i in h.session.tasks}:
        if other_id == tool.id:
            continue
        other = h.session.tasks[other_id]
        live = staged.get(other_id, other) if staged is not None else other
        if not isinstance(live.state, Terminal):
            return None
    return gen


async def plan_merged_hand_over(
    h: HarnessServices, tool: Task, result: Message
) -> _Plan | str | None:
    """Before ``tool``'s result commit: the successor's plan if that commit can hand the
    round over (see :func:`merge_hand_over`), else ``None``."""
    gen = _round_closes(h, tool, None)
    if gen is None:
        return None
    agent = await h.agent(gen.conversation_id)
    if any(hk.after_tools is not None for hk in agent.hooks):
        return None  # observers see the round's results from the generation's phase
    plan = await _plan(h, gen.conversation_id, extra=result)
    if isinstance(plan, _Plan) and plan.compaction is not None:
        # Starting a compaction reads tables (is one in flight?), which the result commit,
        # past its first write, may not: the generation's ``tools`` phase hands over.
        return None
    return plan


async def merge_hand_over(h: HarnessServices, tx: Tx, tool: Task, plan: _Plan | str) -> bool:
    """Inside ``tool``'s result commit (which settles it): if the round still closes
    with it, stage the generation's hand-over and its completion, as its ``tools``
    phase would have committed them. Returns whether it did."""
    gen = _round_closes(h, tool, tx.tasks)
    if gen is None:
        return False
    inbox = (await tx.doc(INBOX, gen.conversation_id)).value
    if isinstance(inbox, dict) and inbox.get("items"):
        # Items wait for this boundary (a steer, a write, a summary to land): placing them
        # reads tables (the context range's start), which this commit, past its first
        # write, may not. The generation's own ``tools`` phase hands over instead.
        return False
    await _hand_over(h, tx, gen, plan)
    assistant = cast(JsonObject, gen.checkpoint)["assistant"]
    # Its only owned live work is ``tool``, settled by this same commit: terminal now.
    done = Terminal(Completed({"entry": assistant}))
    await tx.put_task(gen.evolve(state=done, ended_at=tx.now()))
    return True


def _round_results(ctx: ContextView, calls: set[str]) -> list[ToolResultMessage]:
    return [m for m in ctx.messages if isinstance(m, ToolResultMessage) and m.tool_call_id in calls]


# --------------------------------------------------------------------------- failures


async def _fail(
    h: HarnessServices,
    rt: TaskRuntime,
    reason: str,
    detail: str,
    message: AssistantMessage | None = None,
) -> None:
    conv = rt.conversation_id

    async def fail(tx: Tx, current: Task) -> Failed:
        if message is not None:
            await tx.append_entry(
                conv, "assistant", message=message_to_json(message), by_task_id=current.id
            )
            await add_usage(tx, conv, message.usage, model=message.model)
        live = await tx.doc(LIVE, conv)
        if _is_current(live, current.id):
            settle_run(tx, conv, live, reason=reason, detail=detail)
            # Queued input still gets its turn: a failed run must not strand it.
            await final_boundary(tx, conv, h.settings)
        return Failed(ErrorInfo(detail, {"reason": reason}))

    await rt.commit(fail)


async def _end_run(
    h: HarnessServices, tx: Tx, task: Task, *, reason: str, detail: str | None = None
) -> None:
    """End the run of a generation that did not answer: keep its committed partial as an
    aborted assistant entry, settle the run's inputs unanswered."""
    conv = task.conversation_id
    live = await tx.doc(LIVE, conv)
    gen = _section(live, "generation")
    partial = gen.get("partial") if gen.get("task") == task.id else None
    if isinstance(partial, dict):
        message = message_from_json(partial)
        await tx.append_entry(
            conv, "assistant", message=message_to_json(message), by_task_id=task.id
        )
    if _is_current(live, task.id):
        settle_run(tx, conv, live, reason=reason, detail=detail)
        if h.cancelled(conv, tx):
            # The conversation's owner is being aborted: queued input goes with it.
            await withdraw_inputs(tx, conv)
        await final_boundary(tx, conv, h.settings)


async def settle_generation(h: HarnessServices, tx: Tx, task: Task) -> None:
    """Scheduler-written outcome of a generation (fault, orphan): clean its run up."""
    outcome = task.outcome
    if isinstance(outcome, Faulted):
        await _end_run(h, tx, task, reason="faulted", detail=outcome.error.message)
    elif isinstance(outcome, Orphaned):
        await _end_run(h, tx, task, reason=outcome.reason)
    elif isinstance(outcome, Aborted):
        await _end_run(h, tx, task, reason="aborted")


# --------------------------------------------------------------------------- helpers


def _checkpoint(task: Task) -> JsonObject:
    cp = task.checkpoint
    assert cp is not None
    return dict(cp)


def _section(live: DocHandle, key: str) -> JsonObject:
    value = live.value
    if not isinstance(value, dict):
        value = {}
        live.value = value
    section = value.get(key)
    if not isinstance(section, dict):
        section = {}
        value[key] = section
    return section


def _is_current(live: DocHandle, task_id: int) -> bool:
    """Whether ``task_id`` is the generation of the conversation's current run."""
    value = live.value
    run = value.get("run") if isinstance(value, dict) else None
    return isinstance(run, dict) and run.get("generation") == task_id
