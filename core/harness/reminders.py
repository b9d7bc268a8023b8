"""Reminders: a message submitted to a conversation later, by a durable timer task.

A reminder is a *background* task of its conversation (a conversation's abort and idle
leave it alone) created ``waiting{until: at}``: no invocation is held while it waits, and
``next_wake()`` brings an evicted actor back in time. When due, its one phase submits the
message with ``request_id = "reminder:<task id>"``, so a wake delivered twice, or a crash
between the submission and the task's completion, still submits exactly once. Aborting the
task cancels the reminder.

The agent sets reminders with the ``remind`` tool of :func:`reminders_extension` (hosts
install it beside the coding tools; the timer task itself is always built in, so pending
reminders fire whatever is installed); applications use :meth:`Conversation.remind`.
The extension also carries the recurring schedules' tools, ``schedule`` and
``cancel_schedule`` (:mod:`core.harness.schedule_tools`).
:func:`pending_timers` lists what is waiting for a time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, model_validator

from core.errors import InvalidInput
from core.harness.registry import Extension, define_extension, define_tool
from core.harness.runs import REMINDER, SCHEDULE
from core.harness.tools import ToolContext, ToolResult
from core.jsonvalue import JsonObject
from core.records import Task, Waiting
from core.session.transaction import Tx
from core.tasks.definition import TaskDefinition, define_task
from core.tasks.runtime import TaskRuntime
from core.times import iso_time

if TYPE_CHECKING:
    from core.harness.services import HarnessServices

__all__ = [
    "MAX_REMINDER_CHARS",
    "REMINDER",
    "RemindArgs",
    "pending_timers",
    "reminder_task",
    "reminders_extension",
    "start_reminder",
]

MAX_REMINDER_CHARS = 10_000
MAX_DELAY_S = 366 * 24 * 3600


class RemindArgs(BaseModel):
    """Exactly one of ``at`` (epoch milliseconds) and ``after`` (seconds from now)."""

    # Built when the tool's schema or a call first needs it, not at import (cold start).
    model_config = ConfigDict(defer_build=True)

    message: str = Field(
        min_length=1,
        max_length=MAX_REMINDER_CHARS,
        description="What to tell the conversation when the reminder fires.",
    )
    at: int | None = Field(default=None, ge=0, description="When, in epoch milliseconds.")
    after: float | None = Field(
        default=None, gt=0, le=MAX_DELAY_S, description="When, in seconds from now."
    )

    @model_validator(mode="after")
    def _one_time(self) -> RemindArgs:
        if (self.at is None) == (self.after is None):
            raise ValueError("give exactly one of 'at' and 'after'")
        if not self.message.strip():
            raise ValueError("a reminder needs a message")
        return self

    def due(self, now: int) -> int:
        """The due time; a reminder more than :data:`MAX_DELAY_S` ahead is refused (no
        host's timer reaches further: an alarm or a schedule wants a real date)."""
        at = self.at if self.at is not None else now + round((self.after or 0) * 1000)
        if at > now + MAX_DELAY_S * 1000:
            raise InvalidInput("a reminder can be set at most 366 days ahead", field="at")
        return at


async def start_reminder(tx: Tx, conversation_id: int, message: str, at: int) -> Task:
    """Create the reminder's timer task (inside a commit)."""
    return await tx.create_task(
        REMINDER,
        {"message": message, "at": at},
        conversation_id=conversation_id,
        background=True,
        checkpoint={"phase": "fire"},
        until=at,
    )


def reminder_task(services: Callable[[], HarnessServices]) -> TaskDefinition:
    async def fire(task: Task, rt: TaskRuntime) -> None:
        value = task.input if isinstance(task.input, dict) else {}
        conversation = await services().conversation(rt.conversation_id)
        submission = await conversation.submit(
            str(value.get("message")), request_id=f"reminder:{task.id}"
        )
        await rt.complete({"submission": submission.id})

    return define_task(REMINDER, phases={"fire": fire}, initial=lambda _input: {"phase": "fire"})


async def _remind(args: RemindArgs, ctx: ToolContext) -> ToolResult:
    at = args.due(ctx.now())

    async def create(tx: Tx) -> None:
        await start_reminder(tx, ctx.conversation_id, args.message, at)

    # The timer task commits with the tool result: a rerun after a crash sets it once.
    # The model reads the time: ISO-8601 with its zone (and how far off), not epoch ms.
    return ToolResult(
        f"Reminder set for {iso_time(at)} (in {_delay(at - ctx.now())}): {args.message}",
        details={"at": at, "at_iso": iso_time(at)},
        apply=create,
    )


def _delay(ms: int) -> str:
    seconds = max(0, round(ms / 1000))
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{round(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"


def reminders_extension() -> Extension:
    # Imported here, not at the top: the harness imports this module for the reminder
    # task, and a recovering process that installs no tools of its own should not pay
    # for the schedule tools' models (docs/performance.md).
    from core.harness.schedule_tools import schedule_tools

    return define_extension(
        "perdure.reminders",
        tools=[
            define_tool(
                "remind",
                description=(
                    "Set a reminder: the message is sent to this conversation when it is "
                    "due, even if the agent was stopped in between. Give 'after' (seconds "
                    "from now) or 'at' (epoch milliseconds). The confirmation gives the "
                    "time in ISO-8601 (UTC)."
                ),
                parameters=RemindArgs,
                execute=_remind,
                replay="safe",
            ),
            *schedule_tools(),
        ],
    )


def pending_timers(tasks: list[Task]) -> list[JsonObject]:
    """Live tasks waiting for a time, soonest first: reminders and recurring schedules
    (with their message) and the harness's own waits (retry backoff, deferred polls)."""
    timers: list[JsonObject] = []
    for task in tasks:
        state = task.state
        if not isinstance(state, Waiting) or state.until is None:
            continue
        timer: JsonObject = {
            "task": task.id,
            "kind": task.kind,
            "conversation_id": task.conversation_id,
            "at": state.until,
            "at_iso": iso_time(state.until),
        }
        if task.kind == REMINDER and isinstance(task.input, dict):
            timer["message"] = task.input.get("message")
        elif task.kind == SCHEDULE and isinstance(task.input, dict):
            # A recurring schedule waits for its next occurrence: shown with its message.
            args = task.input.get("args")
            timer["message"] = args.get("message") if isinstance(args, dict) else None
        timers.append(timer)
    timers.sort(key=lambda t: (t["at"], t["task"]))
    return timers
