"""Commits' write sets as log records: DynamoDB items, or an S3 object for big ones.

A record holds one commit's write set, or a *group*: the write sets of consecutive
commits ``first..last`` made durable together by one fenced transaction (a deferring
gate, :mod:`runtimes.aws.gate`). A single write set is stored as its JSON object, a
group as a JSON array of them, so a record of one commit is what it always was. Items
are keyed by the record's *last* seq (``log#<last>#<part>``, with ``first`` on the item
when it differs): a read from any seq finds the record holding it, and collecting the
log up to a snapshot's seq deletes only records wholly below it.

The JSON is zlib-compressed (it is mostly repeated SQL and JSON keys, and
the log pays per byte: one write unit per KB, doubled inside a transaction), then cut
into parts below the 400 KB item limit. Up to :data:`MAX_INLINE_PARTS` parts travel
inside the commit's ``TransactWriteItems`` (well within its 100 actions and 4 MB); a
larger commit is uploaded to S3 first (``If-None-Match: *``) and its single log item
points at the object, so the transaction stays small and still carries the fence.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any, cast

from core.errors import StorageCorrupt
from core.jsonvalue import JsonObject, dumps, loads
from runtimes.aws.keys import ActorKeys
from runtimes.aws.resources import AwsResources, call

__all__ = [
    "MAX_INLINE_PARTS",
    "MAX_PART_BYTES",
    "LogRecord",
    "encode_log_group",
    "encode_log_record",
    "read_log",
]

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
    """The record of one commit."""
    return encode_log_group(keys, seq, seq, epoch, dumps(write_set))


def encode_log_group(keys: ActorKeys, first: int, seq: int, epoch: int, text: str) -> LogRecord:
    """The record of commits ``first..seq``: ``text`` is the JSON of one write set
    (``first == seq``) or of the array of all of them, in seq order."""
    blob = zlib.compress(text.encode("ascii"))
    common = {"pk": {"S": keys.pk}, "seq": {"N": str(seq)}, "epoch": {"N": str(epoch)}}
    if first != seq:
        common["first"] = {"N": str(first)}
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
    """The write sets of seqs ``first..last`` in order (strongly consistent reads);
    ``last`` must end a record (the head's seq always does).

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
    found: dict[int, JsonObject] = {}
    for seq in sorted(parts):
        items = sorted(parts[seq], key=lambda i: str(i["sk"]["S"]))
        if len(items) != int(items[0]["parts"]["N"]):
            raise StorageCorrupt(f"commit log of {keys.actor!r} is missing a part of seq {seq}")
        if "object" in items[0]:
            obj = await call(
                resources.s3.get_object, Bucket=resources.bucket, Key=items[0]["object"]["S"]
            )
            blob = await call(obj["Body"].read)
        else:
            blob = b"".join(bytes(i["data"]["B"]) for i in items)
        record = loads(zlib.decompress(blob).decode("ascii"))
        start = int(items[0].get("first", items[0]["seq"])["N"])
        write_sets = record if isinstance(record, list) else [record]
        if [w.get("seq") if isinstance(w, dict) else None for w in write_sets] != list(
            range(start, seq + 1)
        ):
            raise StorageCorrupt(f"commit log of {keys.actor!r} has a bad record at seq {seq}")
        for write_set in write_sets:
            assert isinstance(write_set, dict)
            found[cast(int, write_set["seq"])] = write_set
    missing = [seq for seq in range(first, last + 1) if seq not in found]
    if missing:
        raise StorageCorrupt(f"commit log of {keys.actor!r} is missing seq {missing[0]}")
    return [found[seq] for seq in range(first, last + 1)]
