"""The generation's ``request`` and ``poll`` phases: build the model request, consume
its stream (partial output committed through a throttle), and classify the response in
one commit: an answer, a tool round (one tool task per call, staged at its intent by
``round_intent`` where that is safe), a deferred poll, a retry backoff, a compaction on
overflow, or a failure."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from core.errors import InvocationEnded, SessionClosed, TaskStateError
from core.harness.builtin_documents import LIVE
from core.harness.events import note_event, note_retry
from core.harness.generation.end import _fail_run
from core.harness.generation.live import (
    _checkpoint_copy,
    _committed_value,
    _is_current,
    _live_section,
    _round,
    _with_round,
    append_message,
)
from core.harness.generation.prepare import _compact_first
from core.harness.live import Throttle
from core.harness.messages import (
    AssistantMessage,
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
from core.harness.registry import ResolvedAgent
from core.harness.runs import TOOL, add_run_usage, add_usage, final_boundary, settle_run
from core.harness.tool_sources import refresh_listings
from core.jsonvalue import JsonObject, JsonValue, dumps
from core.records import Completed, Task, Waiting
from core.session.session import ensure_outside_commit
from core.session.transaction import Tx
from core.tasks.runtime import TaskRuntime

if TYPE_CHECKING:
    from core.harness.services import HarnessServices

__all__ = ["round_intent"]


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
            _live_section(live, "generation")["partial"] = snapshot

        try:
            await rt.commit(write)
        except (TaskStateError, InvocationEnded, SessionClosed):
            return 0  # aborted or closing: the outcome is someone else's to write
        return len(dumps(snapshot))

    ensure_outside_commit("a model request")
    progress = h.settings.progress
    throttle = Throttle(
        h.clock,
        progress.partial_interval_ms,
        commit_partial,
        h.report,
        quiet_ms=progress.partial_after_ms,
        quiet_bytes=progress.partial_after_bytes,
        pace=h.progress_pace,
    )
    response = _Response()
    add_text, changed = partial.add_text, throttle.changed  # looked up once, used per delta
    try:  # from here on the throttle is closed whatever happens (it counts as streaming)
        async for event in stream:
            if type(event) is TextDelta:  # most events: appended without the dispatch below
                changed(add_text(event.text))
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
    nothing = response.final is None and response.deferred is None and response.error is None
    if nothing and not rt.signal.cancelled:
        response.error = ModelError("the model stream ended without a final message")
    return response


async def _request_phase(h: HarnessServices, task: Task, rt: TaskRuntime) -> None:
    await _send_request(h, rt, _checkpoint_copy(task))


async def _send_request(h: HarnessServices, rt: TaskRuntime, cp: JsonObject) -> None:
    """Send the request the ``request`` checkpoint ``cp`` pins (committed, or held in
    memory by ``prepare``) and commit what its response calls for: that commit moves the
    task on from ``cp`` (the retry, poll and overflow checkpoints carry its pin)."""
    conv = rt.conversation_id
    model = str(cp["model"])
    if h.models.info(model) is None:
        await _fail_run(h, rt, "no_model", f"Model {model} is not available")
        return
    await _keep_interrupted_partial(h, rt)
    agent = await h.agent(conv)
    if agent.sources and await refresh_listings(h, rt, agent):
        agent = await h.agent(conv)  # the tools of the listings just committed
    ctx = await h.context(conv, cutoff=cast("int | None", cp.get("cutoff")))
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
    live = await _committed_value(h.session, LIVE, rt.conversation_id)
    gen = live.get("generation") if isinstance(live, dict) else None
    if not isinstance(gen, dict) or gen.get("task") != rt.task_id or "partial" not in gen:
        return

    async def keep(tx: Tx, current: Task) -> None:
        doc = await tx.doc(LIVE, rt.conversation_id)
        section = _live_section(doc, "generation")
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


async def _poll_phase(h: HarnessServices, task: Task, rt: TaskRuntime) -> None:
    cp = _checkpoint_copy(task)
    model = str(cp["model"])
    if h.models.info(model) is None:
        await _fail_run(h, rt, "no_model", f"Model {model} is not available")
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
            gen = _live_section(live, "generation")
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
                gen = _live_section(live, "generation")
                gen.pop("partial", None)
                gen["retry"] = {"at": until, "attempt": attempt + 1, "error": str(error)}
                await note_retry(tx, conv, current.id, attempt + 1, until, str(error))
                return Waiting({**cp, "phase": "retry", "attempt": attempt + 1}, until=until)

            await rt.commit(backoff)
            return
        message = partial.message("error", str(error))
        await _fail_run(h, rt, "model_error", str(error), message)
        return
    final = response.final
    if final is None:
        return  # the stream stopped because the invocation is being cancelled
    if not final.model:
        final = final.model_copy(update={"model": str(cp.get("model"))})
    calls = final.tool_calls
    if calls and final.stop_reason != "error":
        await _tool_round(h, rt, final, offered, _round(cp))
    else:
        await _answer(h, rt, final)


async def _answer(h: HarnessServices, rt: TaskRuntime, message: AssistantMessage) -> None:
    conv = rt.conversation_id

    async def answer(tx: Tx, current: Task) -> Completed:
        entry = await append_message(h, tx, conv, "assistant", message, by_task_id=current.id)
        await add_usage(tx, conv, message.usage, model=message.model)
        live = await tx.doc(LIVE, conv)
        if _is_current(live, current.id):
            await settle_run(tx, conv, live, answer=entry.id)
            await final_boundary(tx, conv, h.settings)
        return Completed({"entry": entry.id})

    await rt.commit(answer)


async def _tool_round(
    h: HarnessServices,
    rt: TaskRuntime,
    message: AssistantMessage,
    offered: set[str],
    round_number: int,
) -> None:
    conv = rt.conversation_id
    agent = await h.agent(conv)
    calls = message.tool_calls
    sequential = h.settings.tool_execution == "sequential" or any(
        agent.tools[c.name].execution_mode == "sequential" for c in calls if c.name in agent.tools
    )

    async def round_(tx: Tx, current: Task) -> Waiting:
        entry = await append_message(h, tx, conv, "assistant", message, by_task_id=current.id)
        live = await tx.doc(LIVE, conv)
        # The usage waits in the run, in ``live`` (written here anyway), for the run's end:
        # the ledger is written once a run, not once a round (docs/performance.md).
        model = message.model
        pending = bool(model) and _is_current(live, current.id)
        if not (pending and add_run_usage(live, message.usage, model=cast(str, model))):
            await add_usage(tx, conv, message.usage, model=model)
        _live_section(live, "generation").pop("partial", None)
        slots = _live_section(live, "tools")
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
            await append_message(
                h,
                tx,
                conv,
                "tool_result",
                result,
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
        unstored: JsonObject = {}
        by_id = {c.id: c for c in calls}
        first = runnable[: 1 if sequential else len(runnable)]
        intents = [round_intent(agent, by_id[call_id]) for call_id in first]
        # A round whose every started call starts at its intent keeps those tasks in
        # memory: after a crash nothing else it waits on can hold it back from creating
        # them again (docs/design.md, "Tasks kept in memory").
        keep = all(intent is not None for intent in intents)
        for call_id, intent in zip(first, intents, strict=True):
            call = by_id[call_id]
            tool = await tx.create_task(
                TOOL,
                {"assistant": entry.id, "call_id": call_id},
                owner=current.id,
                checkpoint=intent,
            )
            started.append(tool.id)
            slot = cast(JsonObject, slots[call_id])
            slot["task"] = tool.id
            if intent is not None:  # it runs right after this commit
                slot["status"] = "running"
            if keep:
                # Its intent is this checkpoint's (the call, and the policy noted here):
                # the tools phase creates it again if a crash loses it.
                assert intent is not None
                tx.leave_unstored(tool.id)
                unstored[str(tool.id)] = intent["replay"]
        checkpoint: JsonObject = {
            "phase": "tools",
            "assistant": entry.id,
            "calls": cast(JsonValue, runnable),
            "tasks": cast(JsonValue, started),
            "sequential": sequential,
        }
        if unstored:
            checkpoint["unstored"] = unstored
        return Waiting(_with_round(checkpoint, round_number), tuple(started))

    await rt.commit(round_)


def round_intent(agent: ResolvedAgent, call: ToolCall) -> JsonObject | None:
    """The first checkpoint of a tool task, staged by the generation's round commit.

    A ``safe`` or ``unsafe`` tool of an agent without ``before_tool`` hooks starts at
    its intent — ``execute`` with the model's arguments (final: no hook can rewrite
    them) and the policy — so the call runs without an intent commit of its own
    (invariant 4 holds: the round commit is durable before the call starts). The
    invocation reserved in that commit (``fresh``) still runs the whole ``call`` phase
    (resolution, validation); any later one is a recovery and applies invariant 7: a
    safe call reruns, an unsafe one is reported ``interrupted`` (also when the crash
    came before it started: from outside, a call between its intent and its effect
    looks the same). Hooks could block or rewrite the call, and recovery does not rerun
    them; a ``recoverable`` call's recovery asks the environment about an op it may not
    have issued yet; a call that may need a decision asks in its ``call`` phase: those
    start at a bare ``call``."""
    tool = agent.tools.get(call.name)
    if tool is None or tool.replay == "recoverable" or tool.approval != "never":
        return None
    if any(hooks.before_tool is not None for hooks in agent.hooks):
        return None
    # The arguments are the round's assistant entry's (JSON-gated with it); the commit
    # copies the checkpoint it stages.
    arguments: JsonObject = dict(call.arguments)
    return {"phase": "execute", "arguments": arguments, "replay": tool.replay, "attempt": 1}
