"""Snapshots of the actor's SQLite file in S3, and the log garbage they make collectable.

A snapshot is a ``VACUUM INTO`` copy of the working copy at a commit boundary (a
consistent, compact file, taken while the storage's commit lock is held or no commit
runs), uploaded with ``If-None-Match: *`` to a key that names its seq and the holder's
epoch. The head's pointer then moves to it through a *fenced* update (our epoch, and
the head still at that seq), so a paused former holder can never publish a snapshot;
if the pointer update is refused the object is deleted again. Once published, log
items at or below the snapshot's seq and the previous snapshot object are deleted.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

from core.storage.sqlite import SqlDatabase
from runtimes.aws.errors import LeaseLost
from runtimes.aws.keys import ActorKeys
from runtimes.aws.lease import Lease
from runtimes.aws.resources import AwsResources, call, error_code

__all__ = ["collect_log", "download_snapshot", "take_snapshot"]

log = logging.getLogger(__name__)


async def take_snapshot(
    resources: AwsResources, lease: Lease, db: SqlDatabase, seq: int, scratch: Path
) -> str:
    """Publish the file behind ``db`` (which holds exactly seq ``seq``) as the actor's
    snapshot; return its key. Raises :class:`LeaseLost` if the fence refuses it."""
    grant = lease.grant
    keys = lease.keys
    copy = scratch / f"{keys.actor}.snapshot-{seq}.sqlite"
    copy.unlink(missing_ok=True)
    await db.execute("VACUUM INTO ?", (str(copy),))
    key = keys.snapshot_key(seq, grant.epoch)
    try:
        with copy.open("rb") as body:
            await call(
                resources.s3.put_object,
                Bucket=resources.bucket,
                Key=key,
                Body=body,
                IfNoneMatch="*",
            )
    finally:
        copy.unlink(missing_ok=True)
    update = lease.fenced_update(seq, seq, snapshot=(seq, key))
    try:
        await call(resources.dynamodb.update_item, **update.request)
    except Exception as e:
        if error_code(e) != "ConditionalCheckFailedException":
            raise
        lease.lost()
        await _delete_object(resources, key)
        raise LeaseLost(f"lease on {keys.actor!r} was taken over before the snapshot") from None
    previous = grant.snapshot_key
    lease.adopt(update)
    if previous is not None and previous != key:
        await _delete_object(resources, previous)
    await collect_log(resources, keys, seq)
    return key


async def collect_log(resources: AwsResources, keys: ActorKeys, upto: int) -> int:
    """Delete the log items (and their S3 objects) of seqs ``<= upto``; return how many."""
    low, high = keys.log_range(0, upto)
    request: dict[str, Any] = {
        "TableName": resources.table,
        "KeyConditionExpression": "pk = :pk AND sk BETWEEN :lo AND :hi",
        "ExpressionAttributeValues": {":pk": {"S": keys.pk}, ":lo": {"S": low}, ":hi": {"S": high}},
        "ProjectionExpression": "pk, sk, #obj",
        "ExpressionAttributeNames": {"#obj": "object"},
    }
    doomed: list[dict[str, Any]] = []
    while True:
        page = await call(resources.dynamodb.query, **request)
        doomed += page.get("Items", [])
        if "LastEvaluatedKey" not in page:
            break
        request["ExclusiveStartKey"] = page["LastEvaluatedKey"]
    for item in doomed:
        if "object" in item:
            await _delete_object(resources, item["object"]["S"])
    for i in range(0, len(doomed), 25):  # BatchWriteItem takes 25 requests
        pending: dict[str, Any] = {
            resources.table: [
                {"DeleteRequest": {"Key": {"pk": it["pk"], "sk": it["sk"]}}}
                for it in doomed[i : i + 25]
            ]
        }
        while pending:
            out = await call(resources.dynamodb.batch_write_item, RequestItems=pending)
            pending = out.get("UnprocessedItems") or {}
    return len(doomed)


async def download_snapshot(resources: AwsResources, key: str, path: Path) -> None:
    def fetch() -> None:
        obj = resources.s3.get_object(Bucket=resources.bucket, Key=key)
        with path.open("wb") as out:
            shutil.copyfileobj(obj["Body"], out, 1 << 20)

    await call(fetch)


async def _delete_object(resources: AwsResources, key: str) -> None:
    """Best effort: an object left behind is garbage nothing points at."""
    try:
        await call(resources.s3.delete_object, Bucket=resources.bucket, Key=key)
    except Exception as e:
        log.warning("could not delete s3://%s/%s: %r", resources.bucket, key, e)
