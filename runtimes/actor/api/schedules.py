"""The recurring schedules of a conversation (docs/design.md § The agent harness,
Schedules): create one, list the active ones with their next occurrences, cancel one.

A body is checked whole before the actor is opened — the fields by the strict model, the
calendar (cron expression, zone, interval) by the core's own check — so a refused
request opens nothing and writes nothing.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Path
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from core.errors import InvalidInput
from core.harness import Schedule, ScheduleArgs
from core.records import MAX_ID
from remote_env.json_body import UniqueKeysRoute
from runtimes.actor.api.errors import ApiError
from runtimes.actor.api.routes import API_ERRORS, ActorId, ConversationId, HostDep
from runtimes.actor.api.schemas import WHOLE, RequestId

__all__ = ["ScheduleBody", "ScheduleList", "ScheduleState", "router"]

router = APIRouter(prefix="/v1/actors/{actor}", responses=API_ERRORS, route_class=UniqueKeysRoute)

ScheduleId = Annotated[int, Path(ge=1, le=MAX_ID, description="the schedule's id")]


class ScheduleBody(BaseModel):
    """Exactly one of ``cron`` and ``every``."""

    model_config = ConfigDict(extra="forbid", strict=True)

    message: str = Field(min_length=1, max_length=10_000, pattern=r"\S")
    cron: str | None = Field(
        None,
        max_length=200,
        description="five fields (minute hour day-of-month month day-of-week) read on the "
        "clock of `timezone`, e.g. `0 9 * * 1-5`",
        examples=["0 9 * * *"],
    )
    every: Annotated[int, Field(ge=60), WHOLE] | str | None = Field(
        None,
        description="an interval instead: seconds (at least 60), or `90s`, `15m`, `2h`, `1d`",
    )
    timezone: str = Field(
        "UTC", min_length=1, max_length=64, description="an IANA zone, e.g. `Europe/Vienna`"
    )
    overlap: Literal["skip", "queue"] = Field(
        "skip", description="skip: drop an occurrence while the previous one is unanswered"
    )
    catch_up: Literal["none", "latest"] = Field(
        "latest", description="occurrences missed while down: fire the latest once, or none"
    )
    until: Annotated[int, Field(ge=0), WHOLE] | None = Field(
        None, description="epoch ms after which it fires no more"
    )
    request_id: RequestId | None = None

    def args(self) -> ScheduleArgs:
        """The core's arguments, their calendar checked (:class:`InvalidInput`)."""
        try:
            args = ScheduleArgs.model_validate(self.model_dump(exclude={"request_id"}))
        except ValidationError as e:
            raise InvalidInput(f"invalid schedule: {e.errors()[0]['msg']}") from None
        args.cadence(0)  # cron, zone and interval; `until` is checked against the clock later
        return args


class ScheduleState(BaseModel):
    id: int = Field(description="the schedule's id (its timer task)")
    conversation_id: int
    message: str
    cron: str | None
    every: int | str | None
    timezone: str
    overlap: str
    catch_up: str
    until: int | None
    status: str = Field(
        description="active, cancelling, or how it ended: completed (after `until`), aborted"
    )
    fired: int = Field(description="occurrences submitted")
    skipped: int = Field(description="occurrences dropped (overlap, or missed while down)")
    last_submission: int | None = Field(description="the submission of the latest occurrence")
    next: list[str] = Field(description="the next occurrences, ISO-8601 in the schedule's zone")
    next_at: int | None = Field(description="the next occurrence, epoch ms")
    created_at: int
    created_at_iso: str

    @classmethod
    def of(cls, schedule: Schedule) -> ScheduleState:
        return cls.model_validate(schedule.to_json())


class ScheduleList(BaseModel):
    schedules: list[ScheduleState] = Field(description="the active schedules, oldest first")


@router.post(
    "/conversations/{conversation_id}/schedules", status_code=201, response_model=ScheduleState
)
async def create_schedule(
    actor: ActorId, conversation_id: ConversationId, body: ScheduleBody, host: HostDep
) -> ScheduleState:
    """Submit ``message`` to the conversation at every occurrence of ``cron`` (in
    ``timezone``) or ``every`` interval, each exactly once, across evictions and restarts.
    ``422 invalid`` for a bad cron expression, an unknown zone, an interval under 60 s, or
    both or neither of ``cron`` and ``every``; a known ``request_id`` answers the schedule
    it created (with other arguments: ``422 request_id_conflict``)."""
    args = body.args()
    async with host.use(actor) as harness:
        conversation = await harness.conversation(conversation_id)
        schedule = await conversation.schedule(
            args.message,
            cron=args.cron,
            every=args.every,
            timezone=args.timezone,
            overlap=args.overlap,
            catch_up=args.catch_up,
            until=args.until,
            request_id=body.request_id,
        )
    return ScheduleState.of(schedule)


@router.get("/conversations/{conversation_id}/schedules", response_model=ScheduleList)
async def list_schedules(
    actor: ActorId, conversation_id: ConversationId, host: HostDep
) -> ScheduleList:
    """The conversation's active schedules, each with its next occurrences in ISO-8601 in
    its zone and how many occurrences it fired and skipped."""
    async with host.use(actor) as harness:
        await harness.conversation(conversation_id)  # 404 for an unknown conversation
        schedules = harness.schedules(conversation_id)
    return ScheduleList(schedules=[ScheduleState.of(s) for s in schedules])


@router.delete(
    "/conversations/{conversation_id}/schedules/{schedule_id}", response_model=ScheduleState
)
async def cancel_schedule(
    actor: ActorId, conversation_id: ConversationId, schedule_id: ScheduleId, host: HostDep
) -> ScheduleState:
    """Cancel an active schedule; answers it as it ended (``aborted``). An occurrence due
    at the same moment is submitted first or not at all. ``404 not_found`` when the
    conversation has no active schedule of that id."""
    async with host.use(actor) as harness:
        await harness.conversation(conversation_id)
        if not any(s.id == schedule_id for s in harness.schedules(conversation_id)):
            raise ApiError(
                404,
                "not_found",
                f"conversation {conversation_id} has no active schedule {schedule_id}",
            )
        finished, ended = await host.until_shutdown(harness.cancel_schedule(schedule_id))
    if not finished or ended is None:
        raise ApiError(503, "shutting_down", "the host is shutting down; the cancel is recorded")
    return ScheduleState.of(ended)
