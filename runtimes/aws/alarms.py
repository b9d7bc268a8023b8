"""Wake-ups on AWS: one EventBridge Scheduler one-time schedule per actor.

Each parked actor with a durable deadline has exactly one schedule, named from a hash of
its id (schedule names allow 64 characters of ``[0-9a-zA-Z-_.]``), ``at(<UTC second>)``
with the flexible window off and deleted by the Scheduler after it fired once. Its
target is the actor function with :func:`wake_event` as input, which carries the exact
deadline in epoch ms (the expression has whole seconds, and the Scheduler a minute's
precision, so the wake handler treats "due within a minute" as due).

Re-arming is an upsert: ``UpdateSchedule``, ``CreateSchedule`` when it already fired and
was deleted (``ResourceNotFoundException``), ``UpdateSchedule`` again when a concurrent
create won (``ConflictException``). No deadline → the schedule is deleted. The timers
themselves live in the actor's state, so an early, late or duplicated wake is harmless.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from core import JsonObject
from runtimes.aws.resources import call, error_code

__all__ = ["WAKE_EVENT", "WakeSchedule", "schedule_name", "wake_event"]

WAKE_EVENT = "wake"


def schedule_name(actor: str) -> str:
    return "a-" + hashlib.sha256(actor.encode()).hexdigest()[:40]


def wake_event(actor: str, at: int) -> JsonObject:
    """The event a schedule delivers to the handler (and what a test fires by hand)."""
    return {"perdure": WAKE_EVENT, "actor": actor, "at": at}


def _at(ms: int) -> str:
    stamp = datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"at({stamp})"


@dataclass(frozen=True)
class WakeSchedule:
    """``scheduler`` is a boto3 ``scheduler`` client; ``group`` the schedule group;
    ``target_arn`` the actor function; ``role_arn`` the role the Scheduler invokes it
    with. ``now`` (epoch ms) keeps a deadline already past from becoming an ``at()`` in
    the past: it is armed for now."""

    scheduler: Any
    group: str
    target_arn: str
    role_arn: str
    now: Callable[[], int]

    async def arm(self, actor: str, wake: int | None) -> None:
        """Make ``actor``'s schedule say ``wake`` (``None``: no schedule)."""
        name = schedule_name(actor)
        if wake is None:
            try:
                await call(self.scheduler.delete_schedule, Name=name, GroupName=self.group)
            except Exception as e:
                if error_code(e) != "ResourceNotFoundException":
                    raise
            return
        request = self._request(name, actor, wake)
        try:
            await call(self.scheduler.update_schedule, **request)
            return
        except Exception as e:
            if error_code(e) != "ResourceNotFoundException":
                raise
        try:
            await call(self.scheduler.create_schedule, **request)
        except Exception as e:
            if error_code(e) != "ConflictException":
                raise
            await call(self.scheduler.update_schedule, **request)

    def armed(self, actor: str) -> int | None:
        """The deadline ``actor``'s schedule carries, if it has one (a blocking read:
        for tests and operators, not for the request path)."""
        try:
            out = self.scheduler.get_schedule(Name=schedule_name(actor), GroupName=self.group)
        except Exception as e:
            if error_code(e) == "ResourceNotFoundException":
                return None
            raise
        at = json.loads(out["Target"]["Input"]).get("at")
        return at if isinstance(at, int) else None

    def _request(self, name: str, actor: str, wake: int) -> dict[str, Any]:
        return {
            "Name": name,
            "GroupName": self.group,
            "ScheduleExpression": _at(max(wake, self.now())),
            "ScheduleExpressionTimezone": "UTC",
            "FlexibleTimeWindow": {"Mode": "OFF"},
            "ActionAfterCompletion": "DELETE",
            "Target": {
                "Arn": self.target_arn,
                "RoleArn": self.role_arn,
                "Input": json.dumps(wake_event(actor, wake)),
            },
        }
