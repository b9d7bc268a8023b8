"""The model's tools for recurring schedules, ``schedule`` and ``cancel_schedule``,
installed with ``remind`` by :func:`~core.harness.reminders.reminders_extension`.

``schedule`` creates the schedule in a commit of its own keyed by the call's op id
(``tool:<task id>:<call id>`` as the schedule's request id) and answers its id: the tool
is ``safe``, and a rerun after a crash finds the schedule it made instead of making a
second one. ``cancel_schedule`` marks the schedule's task for abort in the commit that
records its result; it reaches only schedules of the calling conversation.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from core.harness.events import note_abort
from core.harness.registry import ToolDefinition, define_tool
from core.harness.schedules import SCHEDULE, ScheduleArgs, create_schedule, schedule_view
from core.harness.tools import ToolContext, ToolResult
from core.records import Task
from core.session.transaction import Tx

__all__ = ["CancelScheduleArgs", "schedule_tools"]


class CancelScheduleArgs(BaseModel):
    model_config = ConfigDict(defer_build=True)

    id: int = Field(ge=1, description="The schedule's id, as the schedule tool answered it.")


async def _schedule(args: ScheduleArgs, ctx: ToolContext) -> ToolResult:
    now = ctx.now()
    args.cadence(now)  # a bad schedule is the model's error result, before any commit

    async def create(tx: Tx) -> Task:
        return await create_schedule(
            tx, ctx.conversation_id, args, now=now, request_id=f"tool:{ctx.op.id}"
        )

    task = await ctx.harness.session.commit(create)
    view = schedule_view(task, now)
    when = f"cron '{args.cron}' in {args.timezone}" if args.cron else f"every {args.every}"
    return ToolResult(
        f"Schedule {task.id} set ({when}): {args.message}\nNext: {', '.join(view.next)}",
        details=view.to_json(),
    )


def _live_schedule(ctx: ToolContext, schedule_id: int) -> Task | None:
    task = ctx.harness.session.tasks.get(schedule_id)
    if (
        task is None
        or task.kind != SCHEDULE
        or task.conversation_id != ctx.conversation_id
        or task.outcome is not None
        or task.abort_requested
    ):
        return None
    return task


async def _cancel(args: CancelScheduleArgs, ctx: ToolContext) -> ToolResult:
    if _live_schedule(ctx, args.id) is None:
        now = ctx.now()
        live = [
            schedule_view(t, now)
            for t in ctx.harness.session.tasks.values()
            if _live_schedule(ctx, t.id) is not None
        ]
        listed = "; ".join(f"{s.id}: {s.message}" for s in live) or "none"
        return ToolResult(
            f"No active schedule {args.id} in this conversation. Active schedules: {listed}",
            is_error=True,
        )

    async def mark(tx: Tx) -> None:
        task = _live_schedule(ctx, args.id)  # again: it may have ended meanwhile
        if task is not None:
            await note_abort(tx, task, "schedule")
            await tx.put_task(task.evolve(abort_requested=True))

    return ToolResult(f"Schedule {args.id} cancelled.", details={"id": args.id}, apply=mark)


def schedule_tools() -> list[ToolDefinition]:
    return [
        define_tool(
            "schedule",
            description=(
                "Set a recurring schedule: the message is sent to this conversation at "
                "every occurrence, even if the agent was stopped in between. Give 'cron' "
                "(five fields, read in 'timezone') or 'every' (an interval, at least 60 s). "
                "The answer gives the schedule's id and its next occurrences."
            ),
            parameters=ScheduleArgs,
            execute=_schedule,
            replay="safe",
        ),
        define_tool(
            "cancel_schedule",
            description="Cancel a recurring schedule of this conversation by its id.",
            parameters=CancelScheduleArgs,
            execute=_cancel,
            replay="safe",
        ),
    ]
