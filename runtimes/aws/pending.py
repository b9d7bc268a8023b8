"""Wakes the Scheduler refused: recorded in DynamoDB, re-armed by the sweep.

Parking arms the actor's schedule before the lease is released (:mod:`runtimes.aws.host`).
When the Scheduler still refuses after a few tries (throttled, unavailable, a permission
gone), the actor would be released with no schedule and its deadline lost until the next
request. Instead the park records a *pending wake* — an item ``pk = "pending-wakes"``,
``sk = <actor>`` with the deadline and a token — while it still holds the lease, and then
releases it. The sweep (a ``{"perdure": "sweep"}`` event, sent by a rate schedule the
template creates) wakes every recorded actor through the ordinary wake path, whose park
arms the schedule; the record is deleted only if it still carries the token the sweep
read, so a park that failed again meanwhile keeps its newer record.

One partition holds them all: pending wakes exist only while the Scheduler fails, so
the partition stays small and a sweep is one query.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass
from typing import Any

from runtimes.aws.alarms import WakeSchedule
from runtimes.aws.resources import AwsResources, call, error_code

__all__ = ["ARM_ATTEMPTS", "PENDING_PK", "PendingWake", "PendingWakes", "arm_durably"]

_log = logging.getLogger("perdure.aws")

PENDING_PK = "pending-wakes"
ARM_ATTEMPTS = 3
ARM_BACKOFF_S = 0.05
"""Scheduler calls per arming, and the first pause between them (then 4x longer)."""


async def arm_durably(
    alarms: WakeSchedule, resources: AwsResources, actor: str, wake: int | None, now: int
) -> bool:
    """Arm ``actor``'s schedule for ``wake``, retrying a refusing Scheduler a few times;
    if it still refuses, record the wake for the sweep (``now`` when there is no
    deadline: a pending wake then only costs the sweep one look). Returns whether the
    schedule was armed. Call it while holding the lease (or for mail, which any holder
    takes): the record must exist before the actor is left alone."""
    for attempt in range(ARM_ATTEMPTS):
        try:
            await alarms.arm(actor, wake)
            return True
        except Exception as e:
            error = e
            if attempt + 1 < ARM_ATTEMPTS:
                await asyncio.sleep(ARM_BACKOFF_S * 4**attempt)
    _log.error("could not arm the wake of %r; recorded for the sweep", actor, exc_info=error)
    await PendingWakes(resources).record(actor, wake if wake is not None else now)
    return False


@dataclass(frozen=True)
class PendingWake:
    actor: str
    at: int
    token: str


class PendingWakes:
    def __init__(self, resources: AwsResources) -> None:
        self.resources = resources

    def _key(self, actor: str) -> dict[str, dict[str, str]]:
        return {"pk": {"S": self._pk}, "sk": {"S": actor}}

    @property
    def _pk(self) -> str:
        return f"{PENDING_PK}#{self.resources.prefix}"

    async def record(self, actor: str, at: int) -> PendingWake:
        """Record (or replace) ``actor``'s pending wake for ``at`` (epoch ms)."""
        wake = PendingWake(actor, at, uuid.uuid4().hex)
        item = {**self._key(actor), "at": {"N": str(at)}, "token": {"S": wake.token}}
        await call(self.resources.dynamodb.put_item, TableName=self.resources.table, Item=item)
        return wake

    async def listed(self) -> list[PendingWake]:
        request: dict[str, Any] = {
            "TableName": self.resources.table,
            "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": {":pk": {"S": self._pk}},
            "ConsistentRead": True,
        }
        found: list[PendingWake] = []
        while True:
            out = await call(self.resources.dynamodb.query, **request)
            for item in out["Items"]:
                found.append(PendingWake(item["sk"]["S"], int(item["at"]["N"]), item["token"]["S"]))
            if "LastEvaluatedKey" not in out:
                return found
            request["ExclusiveStartKey"] = out["LastEvaluatedKey"]

    async def clear(self, wake: PendingWake) -> bool:
        """Delete the record if it is still ``wake`` (not re-recorded since)."""
        try:
            await call(
                self.resources.dynamodb.delete_item,
                TableName=self.resources.table,
                Key=self._key(wake.actor),
                ConditionExpression="#t = :t",
                ExpressionAttributeNames={"#t": "token"},
                ExpressionAttributeValues={":t": {"S": wake.token}},
            )
        except Exception as e:
            if error_code(e) == "ConditionalCheckFailedException":
                return False
            raise
        return True
