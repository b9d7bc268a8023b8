"""The per-actor mailbox: submissions that arrived while another invocation held the lease.

A mailed submission is one DynamoDB item ``sk = "mail#<request_id>"`` holding the
submission's (already validated) JSON body, put with ``attribute_not_exists`` — so the
same request id mailed twice is one item — and a ``gc_at`` attribute (seconds) for the
table's TTL to collect a mailbox nobody drained (a garbage sweep, never a timer).

Every mailed body carries a request id (the caller's, else the mailing invocation's
id), so draining is at-least-once but answered once: the holder submits each item
through the API — where the core dedupes request ids across the direct and the mailbox
paths — and deletes it only after that submission was committed.

A mailed submission has no id yet: it is answered (and, polled by its request id,
read) in the shape every host answers a submission with, ``id`` null and ``status``
``mailed`` (:func:`mailed_accepted`, :func:`mailed_state`).

The TTL attribute is ``gc_at``, never the head's ``expires_at``: that is the lease
expiry in ms (0 once released), and TTL on it would delete the head and reset the
fencing epoch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from core import JsonObject
from runtimes.aws.keys import ActorKeys
from runtimes.aws.resources import AwsResources, call, error_code

__all__ = ["MAIL_TTL_MS", "Mail", "Mailbox", "mailed_accepted", "mailed_state"]

MAIL_TTL_MS = 7 * 24 * 3600 * 1000
"""How long an undrained mail item is kept before TTL may collect it."""

_PREFIX = "mail#"


@dataclass(frozen=True)
class Mail:
    request_id: str
    body: JsonObject


def mailed_accepted(body: JsonObject, request_id: str) -> JsonObject:
    """What a ``POST`` of a submission that was mailed is answered: the fields every host
    answers a submission with, ``id`` null until the actor's holder admits it."""
    conversation = body.get("conversation_id")
    return {
        "id": None,
        "conversation_id": conversation if isinstance(conversation, int) else 1,
        "type": body.get("type"),
        "status": "mailed",
        "request_id": request_id,
    }


def mailed_state(mail: Mail) -> JsonObject:
    """What a poll of a mailed submission by its request id is answered: a submission's
    state, ``status`` ``mailed``, with nothing settled yet."""
    return {
        **mailed_accepted(mail.body, mail.request_id),
        "entry_id": None,
        "answer": None,
        "reason": None,
        "detail": None,
    }


@dataclass(frozen=True)
class Mailbox:
    resources: AwsResources

    def _pk(self, actor: str) -> str:
        return ActorKeys(actor, self.resources.prefix).pk

    async def post(self, actor: str, body: JsonObject, *, request_id: str, now: int) -> bool:
        """Mail ``body`` (its ``request_id`` must be set to ``request_id``); ``False``
        when that request id was already mailed (nothing written)."""
        try:
            await call(
                self.resources.dynamodb.put_item,
                TableName=self.resources.table,
                Item={
                    "pk": {"S": self._pk(actor)},
                    "sk": {"S": _PREFIX + request_id},
                    "body": {"S": json.dumps(body)},
                    "gc_at": {"N": str((now + MAIL_TTL_MS) // 1000)},
                },
                ConditionExpression="attribute_not_exists(pk)",
            )
        except Exception as e:
            if error_code(e) == "ConditionalCheckFailedException":
                return False
            raise
        return True

    async def get(self, actor: str, request_id: str) -> Mail | None:
        """The mail of ``request_id``, or ``None`` (strongly consistent)."""
        found = await call(
            self.resources.dynamodb.get_item,
            TableName=self.resources.table,
            Key={"pk": {"S": self._pk(actor)}, "sk": {"S": _PREFIX + request_id}},
            ConsistentRead=True,
        )
        item = found.get("Item")
        if item is None:
            return None
        return Mail(request_id, json.loads(item["body"]["S"]))

    async def pending(self, actor: str) -> list[Mail]:
        """The mailed submissions, oldest request id order (strongly consistent)."""
        request: dict[str, Any] = {
            "TableName": self.resources.table,
            "KeyConditionExpression": "pk = :pk AND begins_with(sk, :mail)",
            "ExpressionAttributeValues": {
                ":pk": {"S": self._pk(actor)},
                ":mail": {"S": _PREFIX},
            },
            "ConsistentRead": True,
        }
        found: list[Mail] = []
        while True:
            page = await call(self.resources.dynamodb.query, **request)
            for item in page.get("Items", []):
                body = json.loads(item["body"]["S"])
                found.append(Mail(item["sk"]["S"][len(_PREFIX) :], body))
            if "LastEvaluatedKey" not in page:
                return found
            request["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    async def remove(self, actor: str, request_id: str) -> None:
        await call(
            self.resources.dynamodb.delete_item,
            TableName=self.resources.table,
            Key={"pk": {"S": self._pk(actor)}, "sk": {"S": _PREFIX + request_id}},
        )
