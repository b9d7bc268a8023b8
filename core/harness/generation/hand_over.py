"""The tool round handed over: the generation's ``tools`` phase (create again the calls
a restart lost, their tasks kept in memory; start the next call of a sequential round,
run ``after_tools`` observers, then the post-tools boundary and the
generation's next round, already prepared, in one commit), and the merged hand-over the
round's last tool result commit can carry instead (one commit less per round).

The same generation task goes on through every round of its run: a hand-over writes
its row once (its next checkpoint) where a successor task would write two rows (the
new task, and the current one terminal). Each checkpoint of a later round carries its
number (``round``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from core.harness.builtin_documents import INBOX, LIVE
from core.harness.context import ContextView
from core.harness.generation.live import (
    _checkpoint_copy,
    _is_current,
    _live_section,
    _round,
    _with_round,
    staged_value,
)
from core.harness.generation.prepare import _pin_request, _Plan, _plan_request
from core.harness.messages import AssistantMessage, Message, ToolResultMessage, message_from_json
from core.harness.runs import GENERATION, TOOL, post_tools_boundary
from core.jsonvalue import JsonObject, JsonValue
from core.records import Completed, Task, Terminal, Waiting
from core.session.transaction import Tx
from core.tasks.runtime import TaskRuntime

if TYPE_CHECKING:
    from core.harness.services import HarnessServices

__all__ = ["merge_hand_over", "plan_merged_hand_over"]


async def _tools_phase(h: HarnessServices, task: Task, rt: TaskRuntime) -> None:
    conv = rt.conversation_id
    cp = _checkpoint_copy(task)
    calls, started = _round_calls(cp)
    lost = await _lost_calls(h, conv, cp)
    if lost:
        await _create_again(h, rt, cp, lost)
        return
    if len(started) < len(calls):  # sequential round: start the next call

        async def next_call(tx: Tx, current: Task) -> Waiting:
            tool = await tx.create_task(
                TOOL,
                {"assistant": cp["assistant"], "call_id": calls[len(started)]},
                owner=current.id,
            )
            live = await tx.doc(LIVE, conv)
            slot = _live_section(live, "tools").get(calls[len(started)])
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

    # The next round's preparation happens here, so it starts at ``request`` and the
    # hand-over commit also pins its model and context: one commit less per round.
    plan = await _plan_request(h, conv)

    async def hand_over(tx: Tx, current: Task) -> JsonObject | Completed:
        following = await _hand_over(h, tx, current, plan)
        return following if following is not None else Completed({"entry": cp["assistant"]})

    await rt.commit(hand_over)


def _round_calls(cp: JsonObject) -> tuple[list[str], list[int]]:
    """A ``tools`` checkpoint's call ids and the ids of the tasks started for them."""
    calls = [str(c) for c in cast(list[JsonValue], cp.get("calls") or [])]
    started = [int(cast(int, t)) for t in cast(list[JsonValue], cp.get("tasks") or [])]
    return calls, started


async def _lost_calls(h: HarnessServices, conv: int, cp: JsonObject) -> list[int]:
    """Indexes of the round's calls whose task was kept in memory (the round checkpoint's
    ``unstored``: task id -> the policy the call started under) and is gone with the
    process that ran it: not live here, no result entry, no stored record."""
    unstored = cp.get("unstored")
    if not isinstance(unstored, dict):
        return []
    calls, started = _round_calls(cp)
    gone = [
        i
        for i, task_id in enumerate(started)
        if str(task_id) in unstored and task_id not in h.session.tasks
    ]
    if not gone:
        return []
    assistant = cast(int, cp["assistant"])
    # Only the entries after the round's assistant entry (the newest, at the end of the
    # id-ordered range): the merged hand-over asks this every round.
    answered: set[JsonValue] = set()
    for e in reversed((await h.context(conv)).entries):
        if e.id <= assistant:
            break
        if e.kind == "tool_result" and isinstance(e.data, dict):
            answered.add(e.data.get("call_id"))
    # A task kept in memory that ended without its result entry (a fault) was stored.
    return [
        i for i in gone if calls[i] not in answered and await h.session.task(started[i]) is None
    ]


async def _create_again(
    h: HarnessServices, rt: TaskRuntime, cp: JsonObject, lost: list[int]
) -> None:
    """Create the lost calls' tasks again, stored, under their ids (their op ids stay
    the same), at the intent they started with, marked ``lost``: their first invocation
    recovers them (invariant 7: a safe call runs again, an unsafe one is reported
    interrupted) instead of running them as new."""
    conv = rt.conversation_id
    calls, started = _round_calls(cp)
    assistant = cast(int, cp["assistant"])
    message = h.cached_message(conv, assistant)
    if message is None:
        entry = await h.session.storage.entry(assistant)
        message = message_from_json(entry.message) if entry is not None and entry.message else None
    by_id = {c.id: c for c in message.tool_calls} if isinstance(message, AssistantMessage) else {}
    unstored = dict(cast(JsonObject, cp["unstored"]))

    async def again(tx: Tx, current: Task) -> Waiting:
        for i in lost:
            policy = unstored.pop(str(started[i]))
            call = by_id.get(calls[i])
            intent: JsonObject = {
                "phase": "execute",
                "arguments": dict(call.arguments) if call is not None else {},
                "replay": policy,
                "attempt": 1,
                "lost": True,
            }
            await tx.create_task(
                TOOL,
                {"assistant": assistant, "call_id": calls[i]},
                owner=current.id,
                checkpoint=intent,
                again=started[i],
            )
        following: JsonObject = dict(cp)
        if unstored:
            following["unstored"] = unstored
        else:
            following.pop("unstored", None)
        recreated = {started[i] for i in lost}
        # A wait names tasks that exist: the calls created again, and any still live.
        return Waiting(
            following, tuple(t for t in started if t in recreated or t in h.session.tasks)
        )

    await rt.commit(again)


async def _hand_over(
    h: HarnessServices, tx: Tx, current: Task, plan: _Plan | str
) -> JsonObject | None:
    """Inside a commit: the post-tools boundary of the generation ``current`` and the
    checkpoint its next model round starts from (already prepared unless the boundary
    moved the start of the context or the plan says it must compact first); ``None``
    if ``current`` no longer runs the run (it completes).

    The same task goes on with the run: one task row per round instead of a successor
    inserted and the current one written terminal (docs/performance.md, "The rows a
    round writes"). Its round number (``round``) tells the rounds apart."""
    conv = current.conversation_id
    live = await tx.doc(LIVE, conv)
    if not _is_current(live, current.id):
        return None
    await post_tools_boundary(tx, conv, h.settings)
    # A summary placed here starts a new context range: the plan made is void.
    moved = any(e.head is not None for e in tx.entries if e.conversation_id == conv)
    round_ = _round(current.checkpoint or {}) + 1
    following: JsonObject = _with_round({"phase": "prepare", "attempt": 1}, round_)
    if not moved and not isinstance(plan, str) and plan.compaction != "blocking":
        following = await _pin_request(
            h, tx, conv, plan, current.id, 1, overflowed=False, round_=round_
        )
    value = cast(JsonObject, live.value)
    value["generation"] = {"task": current.id}  # the round's retry or poll notes go
    value.pop("tools", None)
    return following


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
    """Before ``tool``'s result commit: the next round's plan if that commit can hand the
    round over (see :func:`merge_hand_over`), else ``None``."""
    gen = _round_closes(h, tool, None)
    if gen is None:
        return None
    if await _lost_calls(h, gen.conversation_id, cast(JsonObject, gen.checkpoint)):
        # A restart lost calls of this round (kept in memory) while another one, stored,
        # held the round open: the generation's ``tools`` phase creates them again.
        return None
    agent = await h.agent(gen.conversation_id)
    if any(hk.after_tools is not None for hk in agent.hooks):
        return None  # observers see the round's results from the generation's phase
    # A plan that starts a compaction rides along too (see merge_hand_over): the round
    # that crosses the threshold costs no commit more than any other.
    return await _plan_request(h, gen.conversation_id, extra=result)


async def merge_hand_over(h: HarnessServices, tx: Tx, tool: Task, plan: _Plan | str) -> bool:
    """Inside ``tool``'s result commit (which settles it): if the round still closes
    with it, stage the generation's hand-over and its completion, as its ``tools``
    phase would have committed them. Returns whether it did."""
    gen = _round_closes(h, tool, tx.tasks)
    if gen is None:
        return False
    inbox = await staged_value(tx, INBOX, gen.conversation_id)
    if isinstance(inbox, dict) and inbox.get("items"):
        # Items wait for this boundary (a steer, a write, a summary to land): placing them
        # reads tables (the context range's start), which this commit, past its first
        # write, may not. The generation's own ``tools`` phase hands over instead.
        return False
    if isinstance(plan, _Plan) and plan.compaction == "background":
        live = (await tx.doc(LIVE, gen.conversation_id)).value
        if isinstance(live, dict) and live.get("compaction") is not None:
            # Whether the noted compaction is still in flight is a table read (its task),
            # which this commit may no longer make: the ``tools`` phase hands over. With
            # no note, starting one reads nothing.
            return False
    following = await _hand_over(h, tx, gen, plan)
    state = gen.state
    assert isinstance(state, Waiting)
    if following is not None:
        # Still waiting on the round, now at its next checkpoint: the scheduler reserves
        # it in this commit, which settles the last of ``state.on``.
        await tx.put_task(gen.evolve(state=Waiting(following, state.on, state.policy)))
        return True
    assistant = cast(JsonObject, gen.checkpoint)["assistant"]
    # Its only owned live work is ``tool``, settled by this same commit: terminal now.
    done = Terminal(Completed({"entry": assistant}))
    await tx.put_task(gen.evolve(state=done, ended_at=tx.now()))
    return True


def _round_results(ctx: ContextView, calls: set[str]) -> list[ToolResultMessage]:
    return [m for m in ctx.messages if isinstance(m, ToolResultMessage) and m.tool_call_id in calls]
