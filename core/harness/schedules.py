"""Recurring schedules: a message submitted to a conversation at every occurrence of a
cron expression (in a time zone) or of a fixed interval, by one durable timer task.

A schedule is a *background* task of its conversation (``perdure.schedule``) that waits
``waiting{until: next occurrence}``, like a reminder: it holds no invocation while it
waits, and the actor's one wake-up (``next_wake()``: the earliest deadline of reminders,
schedules and everything else) brings an evicted actor back in time. Its input is the
schedule as created (:class:`ScheduleArgs`, checked, plus the ``anchor`` an interval
counts from); its checkpoint ``{phase: fire, due, fired, skipped, last}``: the
occurrence it waits for, how many occurrences it submitted and dropped, and the
submission of the latest one.

**Exactly once.** When due, the one phase admits the occurrence's input with the request
id ``schedule:<task id>:<occurrence ms>`` *in the same commit* that moves the task to
its next occurrence (docs/design.md, invariant 19). A crash before that commit leaves
the task due and it fires again after the restart; a crash after it leaves it waiting
for the next occurrence; a wake delivered twice finds it waiting; and should the phase
ever run twice for one occurrence, the request id answers the first submission.

**Missed occurrences** (the actor was down, or its wake came late): of the occurrences
due by now only the latest can fire; ``catch_up: latest`` fires it, ``catch_up: none``
fires it only if it is at most :data:`LATE_GRACE_MS` old. The others count as skipped.

**Overlap.** ``overlap: skip`` drops an occurrence while the previous occurrence's input
is not settled yet (queued or being answered); ``queue`` submits it as a follow-up.

**End.** ``until`` (epoch ms) ends the schedule (``completed``) after its last
occurrence; aborting the task (:meth:`Harness.cancel_schedule`) cancels it.

The agent creates and cancels schedules with the ``schedule`` and ``cancel_schedule``
tools (in :func:`~core.harness.reminders.reminders_extension`, beside ``remind``);
applications with :meth:`Conversation.schedule`; :func:`schedule_view` is what the
HTTP API lists.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import asdict
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from core.errors import InvalidInput, RequestIdConflict
from core.harness.runs import SCHEDULE
from core.harness.submission import admit_input
from core.jsonvalue import JsonObject, JsonValue, json_equal
from core.readonly import readonly
from core.records import Completed, Task, Waiting
from core.session.transaction import Tx
from core.storage import TaskQuery
from core.tasks.definition import TaskDefinition, define_task
from core.tasks.runtime import TaskRuntime
from core.times import iso_time

if TYPE_CHECKING:
    from core.harness.cadence import Cadence
    from core.harness.services import HarnessServices

__all__ = [
    "LATE_GRACE_MS",
    "MAX_SCHEDULES",
    "SCHEDULE",
    "UPCOMING",
    "Schedule",
    "ScheduleArgs",
    "cadence_of",
    "create_schedule",
    "schedule_task",
    "schedule_view",
]

LATE_GRACE_MS = 120_000
"""How late an occurrence may fire under ``catch_up: none`` and still count as on time:
hosts deliver wakes a little late (a cold start, an EventBridge schedule's minute)."""
MAX_SCHEDULES = 100
"""Live schedules per conversation."""
UPCOMING = 3
"""How many next occurrences a listing shows."""
_MAX_MESSAGE_CHARS = 10_000


class ScheduleArgs(BaseModel):
    """A schedule as a client or the model asks for it: exactly one of ``cron`` and
    ``every``."""

    model_config = ConfigDict(defer_build=True, extra="forbid")

    message: str = Field(
        min_length=1,
        max_length=_MAX_MESSAGE_CHARS,
        description="What to tell the conversation at each occurrence.",
    )
    cron: str | None = Field(
        default=None,
        description="Five cron fields (minute hour day-of-month month day-of-week), "
        "e.g. '0 9 * * 1-5' for 09:00 on weekdays, read on the clock of 'timezone'.",
    )
    every: int | str | None = Field(
        default=None,
        description="An interval instead of cron: seconds, or '90s', '15m', '2h', '1d' "
        "(at least 60 s). Counted from now.",
    )
    timezone: str = Field(
        default="UTC", description="The IANA zone cron reads its clock in, e.g. 'Europe/Vienna'."
    )
    overlap: Literal["skip", "queue"] = Field(
        default="skip",
        description="skip: drop an occurrence while the previous one is still being "
        "answered; queue: submit it anyway, answered after the current work.",
    )
    catch_up: Literal["none", "latest"] = Field(
        default="latest",
        description="Occurrences missed while the agent was down: latest fires the most "
        "recent one once; none fires none of them.",
    )
    until: int | None = Field(
        default=None, ge=0, description="Epoch milliseconds after which it fires no more."
    )

    @model_validator(mode="after")
    def _checked(self) -> ScheduleArgs:
        if not self.message.strip():
            raise ValueError("a schedule needs a message")
        return self

    def cadence(self, anchor: int) -> Cadence:
        """The checked cadence (:class:`InvalidInput` naming the field)."""
        # Imported on first use: the harness imports this module for the schedule task,
        # and a recovering process with no schedule need not build the Cadence record
        # (docs/performance.md).
        from core.harness.cadence import Cadence

        return Cadence.of(cron=self.cron, every=self.every, timezone=self.timezone, anchor=anchor)

    def stored(self) -> JsonObject:
        """The fields that define the schedule (a retry with the same request id must
        name the same)."""
        return self.model_dump(mode="json")


def cadence_of(spec: JsonValue) -> Cadence:
    """The cadence of a stored schedule task's input."""
    assert isinstance(spec, dict)
    args = ScheduleArgs.model_validate(spec.get("args"))
    anchor = spec.get("anchor")
    assert isinstance(anchor, int)
    return args.cadence(anchor)


async def create_schedule(
    tx: Tx,
    conversation_id: int,
    args: ScheduleArgs,
    *,
    now: int,
    request_id: str | None = None,
) -> Task:
    """Inside a commit: the schedule's task, waiting for its first occurrence after
    ``now``. A ``request_id`` naming a schedule of this conversation already returns it
    (the same arguments) or raises :class:`RequestIdConflict` (others), before any write;
    :class:`InvalidInput` for a bad schedule, an ``until`` before the first occurrence,
    or more than :data:`MAX_SCHEDULES` live ones."""
    cadence = args.cadence(now)
    first = cadence.next_after(now)
    if first is None:
        raise InvalidInput("the cron expression has no next occurrence", field="cron")
    if args.until is not None and first > args.until:
        raise InvalidInput(
            f"until is before the first occurrence ({cadence.iso(first)})", field="until"
        )
    live = 0
    async for task in _schedules(tx, conversation_id):
        known = task.input if isinstance(task.input, dict) else {}
        if request_id is not None and known.get("request_id") == request_id:
            if not json_equal(known.get("args"), args.stored()):
                raise RequestIdConflict(
                    f"Request {request_id} already identifies schedule {task.id} "
                    "with other arguments"
                )
            return task
        live += task.outcome is None
    if live >= MAX_SCHEDULES:
        raise InvalidInput(
            f"a conversation can have at most {MAX_SCHEDULES} schedules", field="cron"
        )
    spec: JsonObject = {"args": args.stored(), "anchor": now, "request_id": request_id}
    created: Task = await tx.create_task(
        SCHEDULE,
        spec,
        conversation_id=conversation_id,
        background=True,
        checkpoint=_checkpoint(first, fired=0, skipped=0, last=None),
        until=first,
    )
    return created


async def _schedules(tx: Tx, conversation_id: int) -> AsyncIterator[Task]:
    cursor = None
    while True:
        page = await tx.scan_tasks(
            TaskQuery(conversation_id=conversation_id, kind=SCHEDULE, limit=500), cursor
        )
        for task in page.items:
            yield task
        if page.next is None:
            return
        cursor = page.next


def _checkpoint(due: int, *, fired: int, skipped: int, last: int | None) -> JsonObject:
    return {"phase": "fire", "due": due, "fired": fired, "skipped": skipped, "last": last}


def schedule_task(services: Callable[[], HarnessServices]) -> TaskDefinition:
    async def fire(task: Task, rt: TaskRuntime) -> None:
        checkpoint = task.checkpoint or {}
        due = checkpoint.get("due")
        assert isinstance(due, int)
        now = rt.now()
        if due > now:  # reopened before its time (a crash while it was reserved)
            await rt.sleep_until(due, dict(checkpoint))
            return
        spec = task.input if isinstance(task.input, dict) else {}
        args = ScheduleArgs.model_validate(spec.get("args"))
        cadence = cadence_of(spec)
        occurrence, missed = cadence.latest(due, now)
        on_time = now - occurrence <= LATE_GRACE_MS
        fires = on_time or args.catch_up == "latest"
        following = cadence.next_after(max(now, occurrence))
        ends = following is None or (args.until is not None and following > args.until)
        fired, skipped = _count(checkpoint, "fired"), _count(checkpoint, "skipped") + missed
        stored_last = checkpoint.get("last")
        last: int | None = stored_last if isinstance(stored_last, int) else None
        settings = services().settings

        async def body(tx: Tx, _current: Task) -> Waiting | Completed:
            nonlocal fired, skipped, last
            # Reads first: a commit reads no table after its first write.
            busy = False
            if fires and args.overlap == "skip" and isinstance(last, int):
                previous = await tx.submission(last)
                busy = previous is not None and previous.status not in ("done", "unanswered")
            if fires and not busy:
                record = await admit_input(
                    tx,
                    rt.conversation_id,
                    args.message,
                    request_id=f"schedule:{task.id}:{occurrence}",
                    when_busy="follow_up",
                    settings=settings,
                )
                fired, last = fired + 1, record.id
            else:
                skipped += 1
            if ends or following is None:
                return Completed({"fired": fired, "skipped": skipped, "last": last})
            return Waiting(
                _checkpoint(following, fired=fired, skipped=skipped, last=last),
                (),
                "all_settled",
                following,
            )

        await rt.commit(body)

    return define_task(SCHEDULE, phases={"fire": fire}, initial=lambda _input: {"phase": "fire"})


def _count(checkpoint: JsonObject, name: str) -> int:
    value = checkpoint.get(name)
    return value if isinstance(value, int) else 0


@readonly(slots=False)
class Schedule:
    """A schedule as callers see it: its arguments, ``status`` (``active``,
    ``cancelling``, or how it ended: ``completed`` after ``until``, ``aborted`` when
    cancelled), how many occurrences it ``fired`` and ``skipped``, the submission of the
    latest one, and the ``next`` occurrences in ISO-8601 in its zone (none once it
    ended; ``next_at`` is the first, in epoch ms)."""

    id: int
    conversation_id: int
    message: str
    cron: str | None
    every: int | str | None
    timezone: str
    overlap: str
    catch_up: str
    until: int | None
    status: str
    fired: int
    skipped: int
    last_submission: int | None
    next: tuple[str, ...]
    next_at: int | None
    created_at: int

    def to_json(self) -> JsonObject:
        """The JSON the HTTP API and the tools answer (``created_at_iso`` added)."""
        out: JsonObject = {name: value for name, value in asdict(self).items() if name != "next"}
        out["next"] = list(self.next)
        out["created_at_iso"] = iso_time(self.created_at)
        return out


def schedule_view(task: Task, now: int) -> Schedule:
    """The :class:`Schedule` a schedule task is, with its next :data:`UPCOMING`
    occurrences (from ``now`` on, when the due one is already past)."""
    spec = task.input if isinstance(task.input, dict) else {}
    args = ScheduleArgs.model_validate(spec.get("args"))
    checkpoint = task.checkpoint or {}
    status: str = "active" if task.outcome is None else task.outcome.kind
    if task.abort_requested and task.outcome is None:
        status = "cancelling"
    due = checkpoint.get("due")
    upcoming: list[int] = []
    if task.outcome is None and isinstance(due, int):
        cadence = cadence_of(spec)
        times = [due, *cadence.upcoming(max(due, now), UPCOMING - 1)]
        upcoming = [t for t in times if args.until is None or t <= args.until]
        shown = tuple(cadence.iso(t) for t in upcoming)
    else:
        shown = ()
    last = checkpoint.get("last")
    anchor = spec.get("anchor")
    return Schedule(
        id=task.id,
        conversation_id=task.conversation_id,
        message=args.message,
        cron=args.cron,
        every=args.every,
        timezone=args.timezone,
        overlap=args.overlap,
        catch_up=args.catch_up,
        until=args.until,
        status=status,
        fired=_count(checkpoint, "fired"),
        skipped=_count(checkpoint, "skipped"),
        last_submission=last if isinstance(last, int) else None,
        next=shown,
        next_at=upcoming[0] if upcoming else None,
        created_at=anchor if isinstance(anchor, int) else 0,
    )
