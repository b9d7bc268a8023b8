"""The tool task: one tool call, with its intent committed before its effect.

Phases:

``call``     resolve the tool among the agent's current tools, validate the arguments
             with its pydantic model, run the ``before_tool`` hooks (the first block
             wins; a raising hook blocks), validate again, then commit the *intent*
             (``execute{arguments, replay}``) — and only then run the tool, run the
             ``after_tool`` hooks and commit the result entry with the outcome.
``execute``  entered after a crash interrupted a call between its intent and its
             result (or first, by the invocation reserved in the round commit, for a
             safe call whose intent that commit recorded: see ``round_intent``).
             After a crash the call runs again only if both the recorded policy and
             the current declaration are ``safe``; a ``recoverable`` call asks the execution
             environment about its op id and, if the op finished or is still running,
             issues it again under the same id (the environment answers with the recorded
             result instead of running it twice); anything else is reported to the model
             as ``interrupted``, with whatever output was committed.
``approval`` a call whose tool asks for a decision (``define_tool(approval=...)``) parks
             after its hooks, before its intent (see :mod:`core.harness.approvals`);
             this phase runs once it is decided or expired: approve commits the intent
             and runs the tool, deny (or the expiry) gives the model the denial.

Results are bounded (50 KiB / 2,000 lines by default, the head kept) and carry
diagnostics: tool_unavailable, invalid_arguments, blocked, interrupted, aborted,
tool_error, truncated, denied.

Size: just over 600 lines because the phases of one call (call, execute, approval) and
its abort share the ``_Call`` helpers; the approval's bookkeeping is in ``approvals.py``.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from pydantic import BaseModel, ValidationError

from core.errors import InvalidJson, InvocationEnded, SessionClosed, TaskStateError
from core.harness.approvals import (
    APPROVAL_PHASE,
    denial,
    needs_approval,
    note_approval,
    park,
    show,
)
from core.harness.builtin_documents import LIVE
from core.harness.events import note_event
from core.harness.generation.hand_over import merge_hand_over, plan_merged_hand_over
from core.harness.generation.live import append_message
from core.harness.generation.request import round_intent
from core.harness.live import Throttle
from core.harness.messages import (
    AssistantMessage,
    ToolCall,
    ToolResultMessage,
    message_from_json,
)
from core.harness.registry import Block, ResolvedAgent, ToolDefinition
from core.harness.runs import TOOL
from core.harness.tools import Diagnostic, ToolContext, ToolResult, bound_output
from core.jsonvalue import JsonObject, json_copy, json_equal, scrub_text
from core.records import Aborted, Completed, ErrorInfo, Failed, Task
from core.session.session import ensure_outside_commit
from core.session.transaction import Tx
from core.tasks.definition import TaskDefinition, define_task
from core.tasks.runtime import TaskRuntime
from core.times import iso_time

if TYPE_CHECKING:
    from core.env import ExecutionEnv
    from core.harness.services import HarnessServices

__all__ = ["round_intent", "settle_tool", "tool_task"]

INTERRUPTED = "Tool {name} was interrupted and may have partially run"
_LOST = " (the execution environment lost the operation when it restarted)"
_UNREACHABLE = " (the execution environment could not be reached: {error})"


def tool_task(services: Callable[[], HarnessServices]) -> TaskDefinition:
    async def call(task: Task, rt: TaskRuntime) -> None:
        await _call(services(), task, rt)

    async def execute(task: Task, rt: TaskRuntime) -> None:
        # Started at its intent by the round commit: a first call. One created again
        # after a crash lost it (``lost``) is a recovery.
        if rt.fresh and not (task.checkpoint or {}).get("lost"):
            await _call(services(), task, rt)
        else:
            await _recover(services(), task, rt)

    async def approval(task: Task, rt: TaskRuntime) -> None:
        await _decided(services(), task, rt)

    async def abort(task: Task, rt: TaskRuntime) -> None:
        await _abort(services(), task, rt)

    return define_task(
        TOOL,
        phases={"call": call, "execute": execute, APPROVAL_PHASE: approval},
        abort=abort,
    )


# --------------------------------------------------------------------------- the call


class _Call:
    """One tool call as a phase sees it."""

    def __init__(
        self, h: HarnessServices, task: Task, rt: TaskRuntime, call: ToolCall, agent: ResolvedAgent
    ):
        self.h = h
        self.task = task
        self.rt = rt
        self.call = call
        self.agent = agent
        self.tool = agent.tools.get(call.name)
        self.output = ""
        approval = (task.checkpoint or {}).get("approval")
        # The call's approval record (with its decision), kept into the outcome.
        self.approval: JsonObject | None = approval if isinstance(approval, dict) else None
        self._throttle: Throttle | None = None  # made by the first output reported
        self._stopped = False

    @functools.cached_property
    def op_id(self) -> str:
        # core.env (a dozen records) loads with the first tool call, not at import: the
        # path from process start to a recovered generation's first request skips it.
        from core.env import OP_ID_PATTERN

        raw = f"{self.task.id}:{self.call.id}"
        if OP_ID_PATTERN.fullmatch(raw):
            return raw
        # Provider call ids may use characters op ids cannot carry; keep them unique.
        return f"{self.task.id}:{hashlib.sha256(self.call.id.encode()).hexdigest()[:32]}"

    def context(self, attempt: int) -> ToolContext:
        from core.env import OpRef  # see op_id

        env: ExecutionEnv | None = self.h.env_for(self.rt.conversation_id, self.agent.cwd)
        return ToolContext(
            harness=self.h,
            runtime=self.rt,
            call_id=self.call.id,
            tool_name=self.call.name,
            op=OpRef(self.op_id, attempt),
            env=env,
            report_output=self._on_output,
        )

    def _on_output(self, text: str) -> None:
        limit = self.h.settings.max_output_bytes * 2
        self.output = (self.output + text)[-limit:]
        if self._stopped:
            return  # reported after the call returned: its result commit has it or not
        if self._throttle is None:
            h = self.h
            interval = h.settings.progress.output_interval_ms
            self._throttle = Throttle(h.clock, interval, self._commit_output, h.report)
        self._throttle.changed()

    async def _commit_output(self) -> int:
        snapshot = self.output

        async def write(tx: Tx, current: Task) -> None:
            slot = await _slot(tx, current, self.call.id)
            if slot is not None:
                slot["output"] = snapshot

        try:
            await self.rt.commit(write)
        except (TaskStateError, InvocationEnded, SessionClosed):
            return 0
        return len(snapshot)

    async def stop_output(self) -> None:
        self._stopped = True
        if self._throttle is not None:
            await self._throttle.close()

    async def finish(
        self,
        result: ToolResult,
        diagnostics: list[Diagnostic],
        *,
        failed: bool = False,
        aborted: bool = False,
        event: JsonObject | None = None,
        settled: str | None = None,
    ) -> None:
        """Commit the result entry, the slot and the outcome (and ``event``, a
        ``tool_recovery`` event's fields; ``settled``, the state of an ``approval``
        event this commit settles) in one commit."""
        await self.stop_output()
        limits = self.tool
        content, cut = bound_output(
            scrub_text(result.content),
            limits.max_output_bytes if limits else None,
            limits.max_output_lines if limits else None,
        )
        if limits is None:
            content, cut = bound_output(
                scrub_text(result.content),
                self.h.settings.max_output_bytes,
                self.h.settings.max_output_lines,
            )
        if cut is not None:
            diagnostics = [*diagnostics, cut]
        try:
            details = json_copy(result.details, f"details of tool {self.call.name}")
        except InvalidJson as e:
            details = None
            content = (
                f"{content}\n[error] Tool {self.call.name} returned details that are not JSON: {e}"
            )
            diagnostics = [*diagnostics, Diagnostic("tool_error", str(e))]
            failed = True
        message = ToolResultMessage(
            tool_call_id=self.call.id,
            tool_name=self.call.name,
            content=content,
            is_error=result.is_error or failed or aborted,
            details=details,
        )
        conv = self.rt.conversation_id
        # The last call of a round hands the run over in its own result commit.
        plan = None if aborted else await plan_merged_hand_over(self.h, self.task, message)

        async def record(tx: Tx, current: Task) -> Completed | Failed | Aborted:
            entry = await append_message(
                self.h,
                tx,
                conv,
                "tool_result",
                message,
                data={"call_id": self.call.id, "diagnostics": [d.to_json() for d in diagnostics]},
                by_task_id=current.id,
            )
            slot = await _slot(tx, current, self.call.id)
            if slot is not None:
                slot["status"] = "done"
                slot.pop("output", None)
            if result.apply is not None and not aborted:
                applied = result.apply(tx)
                if inspect.isawaitable(applied):
                    await applied
            outcome: JsonObject = {"entry": entry.id}
            if self.approval is not None:
                # Kept with the outcome: a repeated decision is answered from it.
                outcome["approval"] = self.approval
                await show(tx, current, None)
                if settled is not None:
                    await note_approval(tx, current, self.approval, settled)
            if event is not None:
                await note_event(tx, conv, "tool_recovery", **event)
            if plan is not None:
                await merge_hand_over(self.h, tx, current, plan)
            if aborted:
                return Aborted("aborted", outcome)
            if failed:
                return Failed(ErrorInfo(content[:500], {"entry": entry.id}), outcome)
            return Completed(outcome)

        await self.rt.commit(record)


async def _load(h: HarnessServices, task: Task, rt: TaskRuntime) -> _Call | None:
    value = task.input if isinstance(task.input, dict) else {}
    assistant = cast(int, value.get("assistant"))
    # The round's assistant entry is usually in the context range in memory: no read.
    message = h.cached_message(rt.conversation_id, assistant)
    if message is None:
        entry = await h.session.storage.entry(assistant)
        message = message_from_json(entry.message) if entry is not None and entry.message else None
    call_id = value.get("call_id")
    call = None
    if isinstance(message, AssistantMessage):
        call = next((c for c in message.tool_calls if c.id == call_id), None)
    if call is None:
        raise LookupError(f"tool task {task.id} names no call of its assistant entry")
    return _Call(h, task, rt, call, await h.agent(rt.conversation_id))


async def _call(h: HarnessServices, task: Task, rt: TaskRuntime) -> None:
    c = await _load(h, task, rt)
    assert c is not None
    tool = c.tool
    if tool is None:
        text = f"Tool {c.call.name} is not available"
        await c.finish(
            ToolResult(f"[error] {text}", is_error=True), [Diagnostic("tool_unavailable", text)]
        )
        return
    arguments: JsonObject = dict(c.call.arguments)
    # The call's arguments passed the JSON gate when its assistant entry was appended.
    args = _validate(tool, arguments, gated=True)
    if isinstance(args, str):
        await c.finish(
            ToolResult(f"[error] {args}", is_error=True), [Diagnostic("invalid_arguments", args)]
        )
        return
    hooked = [hooks.before_tool for hooks in c.agent.hooks if hooks.before_tool is not None]
    ctx = c.context(1) if hooked else None
    for before_tool in hooked:
        assert ctx is not None
        try:
            decision = await before_tool(c.call.model_copy(update={"arguments": arguments}), ctx)
        except Exception as e:  # a hook that fails blocks the call: never run unchecked
            h.report(e)
            decision = Block(f"A before_tool hook failed: {type(e).__name__}: {e}")
        if isinstance(decision, Block):
            await c.finish(
                ToolResult(f"[error] {decision.reason}", is_error=True),
                [Diagnostic("blocked", decision.reason)],
            )
            return
        if isinstance(decision, dict):
            arguments = dict(decision)
    if hooked:  # a hook may have rewritten them: checked again (unchanged, they passed)
        args = _validate(tool, arguments)
        if isinstance(args, str):
            await c.finish(
                ToolResult(f"[error] {args}", is_error=True),
                [Diagnostic("invalid_arguments", args)],
            )
            return
    # Arguments a hook handed back are detached from it; the entry's are not shared
    # with anyone who could change them.
    stored = json_copy(arguments, "tool arguments") if hooked else arguments
    if needs_approval(tool, args, h.report):
        await _ask(c, tool, cast(JsonObject, stored))
        return
    cp = task.checkpoint or {}
    if (
        cp.get("phase") == "execute"
        and cp.get("replay") == tool.replay
        and json_equal(cp.get("arguments"), stored)
    ):
        # This very intent (final arguments, the tool's policy) is durable since the
        # round commit (``round_intent``): invariant 4 holds without a commit of its
        # own, and a crash from here on applies the policy (invariant 7).
        await _run(c, tool, args, 1)
        return

    async def intent(tx: Tx, current: Task) -> JsonObject:
        slot = await _slot(tx, current, c.call.id)
        if slot is not None:
            slot["status"] = "running"
        return {"phase": "execute", "arguments": stored, "replay": tool.replay, "attempt": 1}

    await rt.commit(intent)
    await _run(c, tool, args, 1)


async def _ask(c: _Call, tool: ToolDefinition, stored: JsonObject) -> None:
    """Park the call until a person decides (or its expiry): no intent yet, nothing ran."""

    async def ask(tx: Tx, current: Task) -> None:
        await park(tx, current, tool, c.call.id, stored)

    await c.rt.commit(ask)


async def _decided(h: HarnessServices, task: Task, rt: TaskRuntime) -> None:
    """The ``approval`` phase: a decision was recorded, or the call expired undecided."""
    c = await _load(h, task, rt)
    assert c is not None
    cp = task.checkpoint or {}
    approval: JsonObject = dict(c.approval or {})
    if "decision" not in approval:  # woken by its expiry, with no decision
        now = rt.now()
        approval.update(decision="deny", by="expiry", decided_at=now, decided_at_iso=iso_time(now))
    c.approval = approval
    if approval["decision"] != "approve":
        expired = approval.get("by") == "expiry"
        text = denial(c.call.name, approval)
        await c.finish(
            ToolResult(f"[denied] {text}", is_error=True),
            [Diagnostic("denied", text)],
            settled="expired" if expired else None,  # a person's: noted when decided
        )
        return
    tool = c.tool
    arguments = cast(JsonObject, cp.get("arguments"))
    if tool is None:
        text = f"Tool {c.call.name} is not available"
        await c.finish(
            ToolResult(f"[error] {text}", is_error=True), [Diagnostic("tool_unavailable", text)]
        )
        return
    args = _validate(tool, arguments, gated=True)
    if isinstance(args, str):
        await c.finish(
            ToolResult(f"[error] {args}", is_error=True), [Diagnostic("invalid_arguments", args)]
        )
        return

    async def intent(tx: Tx, current: Task) -> JsonObject:
        slot = await _slot(tx, current, c.call.id)
        if slot is not None:
            slot["status"] = "running"
        # The approval rides along: recovery (invariant 7) and the outcome keep it.
        return {
            "phase": "execute",
            "arguments": arguments,
            "replay": tool.replay,
            "attempt": 1,
            "approval": approval,
        }

    await rt.commit(intent)
    await _run(c, tool, args, 1)


def _validate(
    tool: ToolDefinition, arguments: JsonObject, *, gated: bool = False
) -> BaseModel | str:
    # The JSON gate first (unless the arguments are known to have passed it: an entry's,
    # a checkpoint's): pydantic's str fields take lone surrogates, and a hook may hand
    # back arguments that never went through an entry.
    if not gated:
        try:
            json_copy(arguments, "arguments")
        except InvalidJson as e:
            return f"Invalid arguments for tool {tool.name}: {e}"
    try:
        return tool.parameters.model_validate(arguments)
    except ValidationError as e:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'arguments'}: {err['msg']}"
            for err in e.errors()
        )
        return f"Invalid arguments for tool {tool.name}: {problems}"


async def _run(c: _Call, tool: ToolDefinition, args: BaseModel, attempt: int) -> None:
    from core.env import EnvUnavailable, OpLost  # see _Call.op_id

    ctx = c.context(attempt)
    diagnostics: list[Diagnostic] = []
    failed = False
    ensure_outside_commit(f"tool {tool.name}")
    if tool.replay != "safe":
        # Invariant 4 on a storage that defers durability: the intent committed above
        # must be durable, not only applied, before an effect that may not run twice.
        await c.h.session.flush()
    span = c.h.session.telemetry.span(
        f"tool {tool.name}",
        {
            "perdure.task.id": c.task.id,
            "perdure.tool.name": tool.name,
            "perdure.tool.call_id": c.call.id,
            "perdure.op.id": c.op_id,
            "perdure.op.attempt": attempt,
        },
    )
    try:
        with span:
            produced = await tool.execute(args, ctx)
        result = produced if isinstance(produced, ToolResult) else ToolResult(str(produced))
    except asyncio.CancelledError:
        raise
    except OpLost:
        # The environment restarted while the op ran: whether it took effect is unknown.
        text = INTERRUPTED.format(name=tool.name) + _LOST
        prefix = f"{c.output}\n" if c.output else ""
        result = ToolResult(f"{prefix}[error] {text}", is_error=True)
        diagnostics.append(Diagnostic("interrupted", text))
        failed = True
    except EnvUnavailable as e:
        # The request may have reached the sandbox before the link failed: an op-backed
        # tool's effect is then unknown, not failed (a "tool_error" would invite a rerun).
        if tool.replay == "safe":
            text = f"{type(e).__name__}: {e}"
            diagnostics.append(Diagnostic("tool_error", text))
        else:
            text = INTERRUPTED.format(name=tool.name) + _UNREACHABLE.format(error=e)
            diagnostics.append(Diagnostic("interrupted", text))
        prefix = f"{c.output}\n" if c.output else ""
        result = ToolResult(f"{prefix}[error] {text}", is_error=True)
        failed = True
    except Exception as e:
        message = f"{type(e).__name__}: {e}"
        prefix = f"{c.output}\n" if c.output else ""
        result = ToolResult(f"{prefix}[error] {message}", is_error=True)
        diagnostics.append(Diagnostic("tool_error", message))
        failed = True
    for hooks in c.agent.hooks:
        if hooks.after_tool is None:
            continue
        try:
            replaced = await hooks.after_tool(c.call, result, ctx)
        except Exception as e:
            c.h.report(e)
            continue
        if replaced is not None:
            result = replaced
    await c.finish(result, diagnostics, failed=failed)


# --------------------------------------------------------------------------- recovery


async def _recover(h: HarnessServices, task: Task, rt: TaskRuntime) -> None:
    c = await _load(h, task, rt)
    assert c is not None
    cp = task.checkpoint or {}
    recorded = cp.get("replay")
    attempt = int(cast(int, cp.get("attempt", 1))) + 1
    current = c.tool.replay if c.tool is not None else "unsafe"  # a missing tool is unsafe
    args = _validate(c.tool, cast(JsonObject, cp.get("arguments"))) if c.tool else None
    rerun = False
    note = ""
    event: JsonObject = {"task": task.id, "tool": c.call.name, "call_id": c.call.id}
    if c.tool is not None and isinstance(args, BaseModel):
        if recorded == current == "safe":
            rerun = True
            event["how"] = "rerun"
        elif recorded == current == "recoverable":
            env = c.context(attempt).env_or_none
            state = (await env.op_status(c.op_id)).state if env is not None else "unknown"
            rerun = state in ("done", "running")
            event.update(how="recovered", op=c.op_id, op_state=state)
            if state == "lost":
                note = _LOST
            elif state == "unknown":
                note = " (the execution environment has no record of the operation)"
    if rerun:
        assert c.tool is not None and isinstance(args, BaseModel)

        async def again(tx: Tx, current_task: Task) -> JsonObject:
            slot = await _slot(tx, current_task, c.call.id)
            if slot is not None:
                slot.update({"status": "running", "output": ""})
            await note_event(tx, rt.conversation_id, "tool_recovery", **event)
            return {**cp, "attempt": attempt}

        await rt.commit(again)
        await _run(c, c.tool, args, attempt)
        return
    committed_output = await _slot_output(h, rt.conversation_id, c.call.id)
    text = INTERRUPTED.format(name=c.call.name) + note
    prefix = f"{committed_output}\n" if committed_output else ""
    event.update(how="interrupted", reason=_why_interrupted(recorded, current, c, args, note))
    await c.finish(
        ToolResult(f"{prefix}[error] {text}", is_error=True),
        [Diagnostic("interrupted", text)],
        failed=True,
        event=event,
    )


def _why_interrupted(
    recorded: object, current: str, c: _Call, args: BaseModel | str | None, note: str
) -> str:
    """Why a recovery reported the call interrupted instead of running it again."""
    if c.tool is None:
        return "the tool is no longer available"
    if not isinstance(args, BaseModel):
        return "its recorded arguments no longer validate"
    if note:
        return note.strip(" ()")
    if recorded != current:
        return f"its replay policy changed from {recorded} to {current}"
    return f"replay policy {current}: it may have partly run, so it is not run again"


# --------------------------------------------------------------------------- abort


async def _abort(h: HarnessServices, task: Task, rt: TaskRuntime) -> None:
    try:
        c = await _load(h, task, rt)
    except LookupError:
        await rt.abort("aborted")
        return
    assert c is not None
    cp = task.checkpoint or {}
    if cp.get("phase") == "execute" and cp.get("replay") == "recoverable":
        env = c.context(1).env_or_none
        if env is not None:
            try:
                await env.cancel(c.op_id)  # stop the sandbox command, not just our wait
            except Exception as e:
                h.report(e)
    output = await _slot_output(h, rt.conversation_id, c.call.id)
    text = f"Tool {c.call.name} was aborted"
    settled = None
    if c.approval is not None and "decision" not in c.approval:
        # Aborting the run withdraws the question: the tool never ran.
        now = rt.now()
        c.approval = {
            **c.approval,
            "decision": "withdrawn",
            "by": "abort",
            "decided_at": now,
            "decided_at_iso": iso_time(now),
        }
        text += " while it waited for approval (the approval was withdrawn)"
        settled = "withdrawn"
    result = ToolResult(f"{output}\n[error] {text}" if output else f"[error] {text}", is_error=True)
    ctx = c.context(1)
    for hooks in c.agent.hooks:
        if hooks.on_abort is None:
            continue
        try:
            replaced = await hooks.on_abort(c.call, result, ctx)
        except Exception as e:
            h.report(e)
            continue
        if replaced is not None:
            result = replaced
    await c.finish(result, [Diagnostic("aborted", text)], aborted=True, settled=settled)


async def settle_tool(h: HarnessServices, tx: Tx, task: Task) -> None:
    """The scheduler settled a tool task (fault, orphan): close its slot. The next
    request sees a synthesized "result unavailable" for the call."""
    value = task.input if isinstance(task.input, dict) else {}
    call_id = value.get("call_id")
    if isinstance(call_id, str):
        slot = await _slot(tx, task, call_id)
        if slot is not None:
            slot["status"] = "done"


# --------------------------------------------------------------------------- live slots


async def _slot(tx: Tx, task: Task, call_id: str) -> JsonObject | None:
    live = await tx.doc(LIVE, task.conversation_id)
    value = live.value
    slots = value.get("tools") if isinstance(value, dict) else None
    slot = slots.get(call_id) if isinstance(slots, dict) else None
    return slot if isinstance(slot, dict) and slot.get("task") == task.id else None


async def _slot_output(h: HarnessServices, conversation_id: int, call_id: str) -> str:
    live = await h.session.document_value(LIVE, conversation_id)
    slots = live.get("tools") if isinstance(live, dict) else None
    slot = slots.get(call_id) if isinstance(slots, dict) else None
    output = slot.get("output") if isinstance(slot, dict) else None
    return output if isinstance(output, str) else ""
