"""The AWS host's :class:`~core.storage.sqlite.CommitGate`: fenced DynamoDB transactions.

A transaction is the head ``Update`` conditioned on ``epoch = mine AND owner = me AND
seq = <durable seq>`` (which also renews the lease) plus a ``Put`` per log part
(conditioned on not existing). Outcomes, as the gate contract defines them:

* accepted → the commits it carries are durable;
* a condition failed → :class:`LeaseLost`: another owner holds a higher epoch (or the
  head moved); nothing was written, and this holder must never write again, so the
  error poisons the session (invariant 14: the stale commit is rejected, never applied);
* cancelled for another reason (throttling, a conflicting transaction) or refused as
  invalid → :class:`~core.errors.StorageRejected`: nothing was written, try later;
* anything else (a timeout, a 5xx) → re-raised: the outcome is unknown, the session is
  poisoned and the next open reconciles the working copy with the head.

**Immediate** (the default): one transaction per commit, inside ``make_durable``.

**Deferring** (``defer=True``, a :class:`~core.storage.sqlite.DeferringGate`; the Lambda
handler's invocations, which answer only when they end): ``make_durable`` keeps the
commit pending and returns, and the storage applies it locally at once; :meth:`flush`
sends every pending commit as one transaction — one head update and one log record
for the group (:func:`~runtimes.aws.log.encode_log_group`), so a round costs one
transaction and a few write units instead of one transaction per commit. The host
flushes before a tool that is not ``safe`` runs (through the session, invariant 4),
before a mailed submission leaves the mailbox, and when it lets the actor go
(:meth:`release`: the last flush and the lease's release in one write). The gate also
flushes on its own before a commit when what is pending has grown past
``max_pending_bytes`` of JSON or its oldest commit is ``max_defer_ms`` old (a crash
loses at most that much work), and before a snapshot (which must show durable state).
A flush that fails other than by a refusal loses every pending commit: the gate then
refuses every later call, and :attr:`DynamoCommitGate.failure` says why — the host must
answer nothing of the invocation. While commits are pending the working copy is ahead
of the head, so ``ahead(True)`` is called before the first is applied and
``ahead(False)`` once none is (the replica marks its file, and rebuilds a marked one).

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

from core.errors import StorageCorrupt, StorageError, StorageRejected
from core.jsonvalue import JsonObject, dumps
from runtimes.aws.errors import LeaseLost
from runtimes.aws.lease import FencedUpdate, Lease
from runtimes.aws.log import LogRecord, encode_log_group
from runtimes.aws.resources import AwsResources, call, error_code

__all__ = [
    "DEFAULT_MAX_DEFER_MS",
    "DEFAULT_MAX_PENDING_BYTES",
    "DEFAULT_SNAPSHOT_EVERY",
    "DynamoCommitGate",
    "GateStats",
    "item_bytes",
]

log = logging.getLogger(__name__)

DEFAULT_SNAPSHOT_EVERY = 200

DEFAULT_MAX_DEFER_MS = 10_000
"""A deferring gate flushes before a commit once its oldest pending one is this old: a
crashed invocation redoes at most about this much work (model requests, safe tools)."""

DEFAULT_MAX_PENDING_BYTES = 2 * 1024 * 1024
"""... or once the pending write sets' JSON would pass this size: the group stays in
memory until it is sent, and compressed it still fits one transaction's items."""

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
    commits: int = 0
    """Commits made durable (more than :attr:`transactions` when they were grouped)."""


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
    """Makes the commits of one actor's working copy durable under ``lease``.

    ``snapshot(seq)`` publishes the working copy (holding exactly ``seq``) as a snapshot;
    the replica wires it to :func:`runtimes.aws.snapshots.take_snapshot`. ``defer``,
    ``max_defer_ms``, ``max_pending_bytes`` and ``ahead``: see the module docstring.
    """

    def __init__(
        self,
        resources: AwsResources,
        lease: Lease,
        *,
        snapshot: Callable[[int], Awaitable[None]] | None = None,
        snapshot_every: int = DEFAULT_SNAPSHOT_EVERY,
        defer: bool = False,
        max_defer_ms: int = DEFAULT_MAX_DEFER_MS,
        max_pending_bytes: int = DEFAULT_MAX_PENDING_BYTES,
        ahead: Callable[[bool], None] | None = None,
    ) -> None:
        self.resources = resources
        self.lease = lease
        self.snapshot = snapshot
        self.snapshot_every = snapshot_every
        self.defer = defer
        self.max_defer_ms = max_defer_ms
        self.max_pending_bytes = max_pending_bytes
        self.ahead = ahead
        self.stats = GateStats()
        self.failure: BaseException | None = None
        """Why pending commits were lost (a flush fenced off or of unknown outcome)."""
        self.durable_seq = lease.grant.seq
        """The seq up to which this holder's commits are known durable."""
        self._retry_after = 0  # after a failed snapshot, wait another interval
        self._pending: list[str] = []  # the JSON of each pending write set, in seq order
        self._pending_bytes = 0
        self._pending_since = 0  # lease clock of the oldest pending commit

    @property
    def pending(self) -> int:
        """Commits applied locally but not durable yet."""
        return len(self._pending)

    def snapshot_due(self, seq: int) -> bool:
        every = max(1, self.snapshot_every)
        return (
            self.snapshot is not None
            and seq >= self._retry_after
            and seq - self.lease.grant.snapshot_seq >= every
        )

    async def make_durable(self, seq: int, write_set: JsonObject) -> None:
        self._check()
        grant = self.lease.grant  # LeaseLost once a fence refused us
        if seq != grant.seq + len(self._pending) + 1:
            raise StorageCorrupt(
                f"commit seq {seq} does not follow the head's seq {grant.seq}"
                f" and {len(self._pending)} pending"
            )
        text = dumps(write_set)
        if self._pending and (
            self._pending_bytes + len(text) > self.max_pending_bytes
            or self.lease.now() - self._pending_since >= self.max_defer_ms
        ):
            await self.flush()
        if self.snapshot is not None and self.snapshot_due(seq - 1):
            await self.flush()  # a snapshot shows durable state only
            await self._snapshot(seq - 1)
        if not self.defer:
            await self._send([text], release=False)
            return
        if not self._pending:
            if self.ahead is not None:
                self.ahead(True)  # before the storage applies it: the file runs ahead
            self._pending_since = self.lease.now()
        self._pending.append(text)
        self._pending_bytes += len(text)

    async def flush(self) -> None:
        """Make every pending commit durable in one transaction (none: nothing sent)."""
        self._check()
        if self._pending:
            await self._send(self._pending, release=False)

    async def release(self) -> bool:
        """Flush what is pending and give the lease up, in one write when anything is
        pending; ``False`` if the lease was not ours any more. Raises as :meth:`flush`
        does (the lease is then not released: a plain :meth:`Lease.release` may)."""
        self._check()
        if not self._pending:
            return await self.lease.release()
        await self._send(self._pending, release=True)
        return True

    def _check(self) -> None:
        if self.failure is not None:
            raise StorageError(
                f"pending commits of {self.lease.keys.actor!r} were lost by an earlier"
                f" flush: {self.failure!r}"
            )

    async def _send(self, texts: list[str], *, release: bool) -> None:
        """One fenced transaction carrying the commits ``texts`` (from the head's seq on),
        optionally releasing the lease; on success nothing is pending any more."""
        grant = self.lease.grant
        first, last = grant.seq + 1, grant.seq + len(texts)
        group = texts[0] if len(texts) == 1 else "[" + ",".join(texts) + "]"
        record = encode_log_group(self.lease.keys, first, last, grant.epoch, group)
        deferred = texts is self._pending
        try:
            await self._transact(record, self.lease.fenced_update(grant.seq, last, release=release))
        except StorageRejected:
            raise
        except BaseException as e:
            if deferred:  # applied locally, now never durable: the invocation must stop
                self.failure = e
                self._pending, self._pending_bytes = [], 0
            raise
        self.stats.commits += len(texts)
        if deferred:
            self._pending, self._pending_bytes = [], 0
            if self.ahead is not None:
                self.ahead(False)

    async def _transact(self, record: LogRecord, update: FencedUpdate) -> None:
        seq = record.seq
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
                epoch = self.lease.grant.epoch
                self.lease.lost()
                raise LeaseLost(
                    f"commit {seq} of {self.lease.keys.actor!r} was fenced off: the lease"
                    f" of epoch {epoch} is no longer the head's"
                ) from None
            if known_unwritten:
                raise StorageRejected(f"DynamoDB refused commit {seq}: {code} {reasons}") from e
            raise
        self.lease.adopt(update)
        self.durable_seq = update.seq
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


if TYPE_CHECKING:  # mypy proves the adapter satisfies its ports
    from core.storage.sqlite import CommitGate, DeferringGate

    def _conforms(adapter: DynamoCommitGate) -> CommitGate:
        return adapter

    def _defers(adapter: DynamoCommitGate) -> DeferringGate:
        return adapter
