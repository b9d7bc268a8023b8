"""The AWS host's :class:`~core.storage.sqlite.CommitGate`: one fenced DynamoDB
transaction per commit.

``make_durable(seq, write_set)`` sends one ``TransactWriteItems``: the head ``Update``
conditioned on ``epoch = mine AND owner = me AND seq = seq - 1`` (which also renews the
lease) plus a ``Put`` per log part (conditioned on not existing). Outcomes, as the gate
contract defines them:

* accepted → the storage applies the write set locally;
* a condition failed → :class:`LeaseLost`: another owner holds a higher epoch (or the
  head moved); nothing was written, and this holder must never write again, so the
  error poisons the session (invariant 14: the stale commit is rejected, never applied);
* cancelled for another reason (throttling, a conflicting transaction) or refused as
  invalid → :class:`~core.errors.StorageRejected`: nothing was written, try later;
* anything else (a timeout, a 5xx) → re-raised: the outcome is unknown, the session is
  poisoned and the next open reconciles the working copy with the head.

An oversized record's S3 object is uploaded before the transaction (under a key that
names our epoch, so it can never be a newer holder's object) and deleted again when the
transaction is refused; a holder killed in between leaves an unreferenced object, which
nothing reads.

Before a commit, when the log since the last snapshot has grown to ``snapshot_every``
records, the gate first publishes a snapshot of the file (the state at ``seq - 1``,
stable under the storage's commit lock).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from core.errors import StorageCorrupt, StorageRejected
from core.jsonvalue import JsonObject
from runtimes.aws.errors import LeaseLost
from runtimes.aws.lease import Lease
from runtimes.aws.log import encode_log_record
from runtimes.aws.resources import AwsResources, call, error_code

__all__ = ["DEFAULT_SNAPSHOT_EVERY", "DynamoCommitGate", "GateStats", "item_bytes"]

log = logging.getLogger(__name__)

DEFAULT_SNAPSHOT_EVERY = 200

# A request DynamoDB refused as a whole: it did not run, so nothing was written.
_REFUSED = frozenset(
    (
        "ValidationException",
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "RequestLimitExceeded",
        "TransactionInProgressException",
    )
)


@dataclass
class GateStats:
    """What the gate sent, for benchmarks and cost estimates."""

    transactions: int = 0
    log_items: int = 0
    log_bytes: int = 0
    write_units: int = 0
    """Estimated DynamoDB write request units: one per started KB of each item written,
    doubled because the writes are transactional."""
    s3_puts: int = 0
    snapshots: int = 0


# The head item: keys, owner, expiry, epoch, seq and snapshot pointer (about 200 bytes).
_HEAD_ESTIMATE: dict[str, Any] = {"head": {"B": b"x" * 200}}


def item_bytes(item: dict[str, Any]) -> int:
    """DynamoDB's item size: attribute names plus values (numbers counted as text)."""
    size = 0
    for name, value in item.items():
        (raw,) = value.values()
        size += len(name) + (len(raw) if isinstance(raw, bytes | str) else len(str(raw)))
    return size


class DynamoCommitGate:
    """Makes each commit of one actor's working copy durable under ``lease``.

    ``snapshot(seq)`` publishes the working copy (holding exactly ``seq``) as a snapshot;
    the replica wires it to :func:`runtimes.aws.snapshots.take_snapshot`.
    """

    def __init__(
        self,
        resources: AwsResources,
        lease: Lease,
        *,
        snapshot: Callable[[int], Awaitable[None]] | None = None,
        snapshot_every: int = DEFAULT_SNAPSHOT_EVERY,
    ) -> None:
        self.resources = resources
        self.lease = lease
        self.snapshot = snapshot
        self.snapshot_every = snapshot_every
        self.stats = GateStats()
        self._retry_after = 0  # after a failed snapshot, wait another interval

    def snapshot_due(self, seq: int) -> bool:
        every = max(1, self.snapshot_every)
        return (
            self.snapshot is not None
            and seq >= self._retry_after
            and seq - self.lease.grant.snapshot_seq >= every
        )

    async def make_durable(self, seq: int, write_set: JsonObject) -> None:
        grant = self.lease.grant  # LeaseLost once a fence refused us
        if seq != grant.seq + 1:
            raise StorageCorrupt(f"commit seq {seq} does not follow the head's seq {grant.seq}")
        if self.snapshot is not None and self.snapshot_due(seq - 1):
            await self._snapshot(seq - 1)
            grant = self.lease.grant
        record = encode_log_record(self.lease.keys, seq, grant.epoch, write_set)
        if record.s3_object is not None:
            key, body = record.s3_object
            await call(
                self.resources.s3.put_object,
                Bucket=self.resources.bucket,
                Key=key,
                Body=body,
                IfNoneMatch="*",
            )
            self.stats.s3_puts += 1
        update = self.lease.fenced_update(seq - 1, seq)
        actions: list[dict[str, Any]] = [{"Update": update.request}]
        actions += [
            {
                "Put": {
                    "TableName": self.resources.table,
                    "Item": item,
                    "ConditionExpression": "attribute_not_exists(pk)",
                }
            }
            for item in record.items
        ]
        try:
            await call(self.resources.dynamodb.transact_write_items, TransactItems=actions)
        except Exception as e:
            code = error_code(e)
            reasons = [
                r.get("Code") for r in getattr(e, "response", {}).get("CancellationReasons", [])
            ]
            known_unwritten = code in _REFUSED or code == "TransactionCanceledException"
            if known_unwritten and record.s3_object is not None:
                await self._forget(record.s3_object[0])
            if code == "TransactionCanceledException" and "ConditionalCheckFailed" in reasons:
                self.lease.lost()
                raise LeaseLost(
                    f"commit {seq} of {self.lease.keys.actor!r} was fenced off: the lease"
                    f" of epoch {grant.epoch} is no longer the head's"
                ) from None
            if known_unwritten:
                raise StorageRejected(f"DynamoDB refused commit {seq}: {code} {reasons}") from e
            raise
        self.lease.adopt(update)
        self.stats.transactions += 1
        self.stats.log_items += len(record.items)
        self.stats.log_bytes += record.size
        self.stats.write_units += 2 * sum(
            -(-item_bytes(item) // 1024) for item in [_HEAD_ESTIMATE, *record.items]
        )

    async def _snapshot(self, seq: int) -> None:
        assert self.snapshot is not None
        try:
            await self.snapshot(seq)
        except LeaseLost:
            raise
        except Exception as e:
            # A snapshot only shortens cold starts: the commit goes on without it, and
            # the next commit point tries again.
            log.warning("snapshot of %r at seq %d failed: %r", self.lease.keys.actor, seq, e)
            self._retry_after = seq + max(1, self.snapshot_every)
        else:
            self.stats.snapshots += 1
            self.stats.s3_puts += 1

    async def _forget(self, key: str) -> None:
        try:
            await call(self.resources.s3.delete_object, Bucket=self.resources.bucket, Key=key)
        except Exception as e:
            log.warning("could not delete unreferenced s3 object %s: %r", key, e)


if TYPE_CHECKING:  # mypy proves the adapter satisfies its port
    from core.storage.sqlite import CommitGate

    def _conforms(adapter: DynamoCommitGate) -> CommitGate:
        return adapter
