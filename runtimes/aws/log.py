"""A commit's write set as log record(s): DynamoDB items, or an S3 object for big ones.

The write set's JSON is zlib-compressed (it is mostly repeated SQL and JSON keys, and
the log pays per byte: one write unit per KB, doubled inside a transaction), then cut
into parts below the 400 KB item limit. Up to :data:`MAX_INLINE_PARTS` parts travel
inside the commit's ``TransactWriteItems`` (well within its 100 actions and 4 MB); a
larger commit is uploaded to S3 first (``If-None-Match: *``) and its single log item
points at the object, so the transaction stays small and still carries the fence.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

from core.errors import StorageCorrupt
from core.jsonvalue import JsonObject, dumps, loads
from runtimes.aws.keys import ActorKeys
from runtimes.aws.resources import AwsResources, call

__all__ = ["MAX_INLINE_PARTS", "MAX_PART_BYTES", "LogRecord", "encode_log_record", "read_log"]

MAX_PART_BYTES = 350 * 1024
MAX_INLINE_PARTS = 10


@dataclass(frozen=True)
class LogRecord:
    seq: int
    items: list[dict[str, Any]]
    """The log items to ``Put`` (each conditioned on not existing)."""
    s3_object: tuple[str, bytes] | None
    """``(key, body)`` to upload before the transaction, for an oversized commit."""

    @property
    def size(self) -> int:
        return sum(len(i["data"]["B"]) for i in self.items if "data" in i) + (
            len(self.s3_object[1]) if self.s3_object else 0
        )


def encode_log_record(keys: ActorKeys, seq: int, epoch: int, write_set: JsonObject) -> LogRecord:
    blob = zlib.compress(dumps(write_set).encode("ascii"))
    common = {"pk": {"S": keys.pk}, "seq": {"N": str(seq)}, "epoch": {"N": str(epoch)}}
    if len(blob) > MAX_PART_BYTES * MAX_INLINE_PARTS:
        key = keys.log_object_key(seq, epoch)
        item = {**common, "sk": {"S": keys.log_sk(seq, 0)}, "parts": {"N": "1"}}
        return LogRecord(seq, [{**item, "object": {"S": key}}], (key, blob))
    chunks = [blob[i : i + MAX_PART_BYTES] for i in range(0, len(blob), MAX_PART_BYTES)]
    items = [
        {
            **common,
            "sk": {"S": keys.log_sk(seq, n)},
            "parts": {"N": str(len(chunks))},
            "data": {"B": chunk},
        }
        for n, chunk in enumerate(chunks)
    ]
    return LogRecord(seq, items, None)


async def read_log(
    resources: AwsResources, keys: ActorKeys, first: int, last: int
) -> list[JsonObject]:
    """The write sets of seqs ``first..last`` in order (strongly consistent reads).

    Raises :class:`~core.errors.StorageCorrupt` when a seq or a part is missing: the
    head says they were committed, so a gap means the log was damaged.
    """
    if first > last:
        return []
    low, high = keys.log_range(first, last)
    parts: dict[int, list[dict[str, Any]]] = {}
    request: dict[str, Any] = {
        "TableName": resources.table,
        "KeyConditionExpression": "pk = :pk AND sk BETWEEN :lo AND :hi",
        "ExpressionAttributeValues": {":pk": {"S": keys.pk}, ":lo": {"S": low}, ":hi": {"S": high}},
        "ConsistentRead": True,
    }
    while True:
        page = await call(resources.dynamodb.query, **request)
        for item in page.get("Items", []):
            parts.setdefault(int(item["seq"]["N"]), []).append(item)
        if "LastEvaluatedKey" not in page:
            break
        request["ExclusiveStartKey"] = page["LastEvaluatedKey"]
    out: list[JsonObject] = []
    for seq in range(first, last + 1):
        items = sorted(parts.get(seq, []), key=lambda i: str(i["sk"]["S"]))
        if not items or len(items) != int(items[0]["parts"]["N"]):
            raise StorageCorrupt(f"commit log of {keys.actor!r} is missing seq {seq}")
        if "object" in items[0]:
            obj = await call(
                resources.s3.get_object, Bucket=resources.bucket, Key=items[0]["object"]["S"]
            )
            blob = await call(obj["Body"].read)
        else:
            blob = b"".join(bytes(i["data"]["B"]) for i in items)
        write_set = loads(zlib.decompress(blob).decode("ascii"))
        if not isinstance(write_set, dict) or write_set.get("seq") != seq:
            raise StorageCorrupt(f"commit log of {keys.actor!r} has a bad record at seq {seq}")
        out.append(write_set)
    return out
