"""The fenced, replicated working copy: cold, warm and caught-up starts, snapshots and
log collection, oversized commits, and fencing of a paused former holder."""

from __future__ import annotations

import base64
import random
from pathlib import Path
from typing import Any

import pytest

from core.errors import SessionPoisoned, StorageRejected
from core.records import ConversationRecord, Entry
from core.session import Session, Tx
from core.storage import EntryQuery
from core.storage.sqlite import SqliteStorage
from core.testing.clock import VirtualClock
from runtimes.aws import AwsResources, LeaseHeld, LeaseLost
from runtimes.aws.log import MAX_INLINE_PARTS, MAX_PART_BYTES
from tests.aws.support import container, head, items, log_seqs, objects, open_replica

MINUTE = 60_000


async def _entries(storage: SqliteStorage, n: int, data: Any = None) -> list[int]:
    ids = []
    for _ in range(n):
        entry_id = await storage.mint_id()
        await storage.commit([Entry(entry_id, 1, "custom", data=data or {"n": entry_id})])
        ids.append(entry_id)
    return ids


async def _view(storage: SqliteStorage) -> list[Entry]:
    return (await storage.scan_entries(EntryQuery(1, limit=10_000))).items


def _log_items(aws: AwsResources, seq: int) -> list[dict[str, Any]]:
    return [i for i in items(aws) if i["sk"]["S"] != "head" and i["seq"]["N"] == str(seq)]


def _noise(chars: int) -> str:
    """Incompressible text, so the compressed write set really is this big."""
    return base64.b64encode(random.Random(chars).randbytes(chars * 3 // 4)).decode()


async def test_cold_start_rebuilds_from_the_snapshot_plus_later_log_records(
    aws: AwsResources, tmp_path: Path
) -> None:
    first = await open_replica(aws, container(tmp_path), snapshot_every=5)
    assert (first.origin, first.replayed) == ("rebuilt", 0)
    await first.storage.commit([ConversationRecord(1)])
    await _entries(first.storage, 11)  # seqs 2..12; snapshots before commits 6 and 11
    expected = await _view(first.storage)
    assert first.gate.stats.snapshots == 2
    state = head(aws)
    assert (state["seq"], state["snapshot_seq"]) == ("12", "10")
    assert log_seqs(aws) == [11, 12]  # everything the snapshot covers was collected
    assert objects(aws) == [state["snapshot_key"]]  # the older snapshot is gone too
    await first.close()

    cold = await open_replica(aws, container(tmp_path), owner="owner-b")
    assert (cold.origin, cold.replayed, cold.storage.seq) == ("rebuilt", 2, 12)
    assert await _view(cold.storage) == expected
    # The rebuilt copy goes on committing where the head is.
    assert await cold.storage.commit([Entry(await cold.storage.mint_id(), 1, "custom")]) == 13
    await cold.close()


async def test_a_warm_container_reuses_its_copy_and_a_stale_one_catches_up(
    aws: AwsResources, tmp_path: Path
) -> None:
    mine, other = container(tmp_path), container(tmp_path)
    a = await open_replica(aws, mine)
    await a.storage.commit([ConversationRecord(1)])
    await _entries(a.storage, 2)
    await a.close()
    again = await open_replica(aws, mine)
    assert (again.origin, again.replayed) == ("warm", 0)
    await again.close()

    b = await open_replica(aws, other, owner="owner-b")  # another container moves on
    assert b.origin == "rebuilt" and b.replayed == 3
    await _entries(b.storage, 3)
    expected = await _view(b.storage)
    await b.close()
    back = await open_replica(aws, mine)
    assert (back.origin, back.replayed, back.storage.seq) == ("caught_up", 3, 6)
    assert await _view(back.storage) == expected
    await back.close()


async def test_a_copy_older_than_the_snapshot_is_rebuilt(aws: AwsResources, tmp_path: Path) -> None:
    mine = container(tmp_path)
    a = await open_replica(aws, mine)
    await a.storage.commit([ConversationRecord(1)])
    await a.close()
    b = await open_replica(aws, container(tmp_path), owner="owner-b", snapshot_every=2)
    await _entries(b.storage, 4)  # snapshot at 4: the log before it is gone
    expected = await _view(b.storage)
    await b.close()
    back = await open_replica(aws, mine)
    assert back.origin == "rebuilt" and await _view(back.storage) == expected
    await back.close()


async def test_big_commits_are_split_into_parts_or_go_to_s3(
    aws: AwsResources, tmp_path: Path
) -> None:
    a = await open_replica(aws, container(tmp_path))
    await a.storage.commit([ConversationRecord(1)])
    medium = _noise(3 * MAX_PART_BYTES)  # several parts, inside the transaction
    large = _noise(MAX_INLINE_PARTS * MAX_PART_BYTES * 3 // 2)  # above, even compressed
    await _entries(a.storage, 1, {"blob": medium})
    parts = _log_items(aws, 2)
    assert 3 <= len(parts) <= MAX_INLINE_PARTS and all("data" in p for p in parts)
    assert all(len(p["data"]["B"]) <= MAX_PART_BYTES for p in parts)
    await _entries(a.storage, 1, {"blob": large})
    (pointer,) = _log_items(aws, 3)
    assert "data" not in pointer and pointer["object"]["S"] in objects(aws)
    assert a.gate.stats.s3_puts == 1
    expected = await _view(a.storage)
    await a.close()

    cold = await open_replica(aws, container(tmp_path))
    assert cold.replayed == 3 and await _view(cold.storage) == expected
    await cold.snapshot()  # collecting the log deletes the oversized record's object too
    assert log_seqs(aws) == [] and objects(aws) == [head(aws)["snapshot_key"]]
    await cold.close()


async def _paused_holder_is_fenced(aws: AwsResources, tmp_path: Path, big_first: bool) -> None:
    clock = VirtualClock()
    a = await open_replica(aws, container(tmp_path), clock=clock, lease_ms=MINUTE)
    await a.storage.commit([ConversationRecord(1)])
    await _entries(a.storage, 2)
    session_a = await Session.open(a.storage, clock)

    # A pauses past its lease; B takes over (a higher epoch) and commits.
    clock.advance(MINUTE + 1)
    b = await open_replica(aws, container(tmp_path), owner="owner-b", clock=clock)
    assert b.lease.grant.epoch == a.lease.grant.epoch + 1
    await _entries(b.storage, 2)
    b_view = await _view(b.storage)
    dynamo_before, s3_before = items(aws), objects(aws)

    # A wakes up and commits, through its session and directly with an oversized write
    # (whose record goes to S3 before the transaction). Whichever comes first is refused
    # by DynamoDB; after that the gate refuses on its own.
    staged: list[int] = []

    async def append(tx: Tx) -> None:
        staged.append((await tx.append_entry(1, "custom", data={"stale": True})).id)

    async def stale_session_commit() -> None:
        with pytest.raises(SessionPoisoned) as poisoned:
            await session_a.commit(append)
        assert isinstance(poisoned.value.__cause__, LeaseLost)
        with pytest.raises(SessionPoisoned):
            await session_a.commit(append)

    async def stale_big_commit() -> None:
        puts = a.gate.stats.s3_puts
        big = Entry(await a.storage.mint_id(), 1, "custom", data=_noise(6_000_000))
        with pytest.raises(LeaseLost):
            await a.storage.commit([big])
        assert a.gate.stats.s3_puts == puts + (1 if big_first else 0)

    for step in (stale_big_commit, stale_session_commit)[:: 1 if big_first else -1]:
        await step()
    assert await a.storage.entry(staged[0]) is None and a.storage.seq == 3  # nothing applied
    assert items(aws) == dynamo_before and objects(aws) == s3_before  # no trace anywhere
    assert await _view(b.storage) == b_view
    assert await a.lease.release() is False  # and it cannot free B's lease either
    await a.close()

    await _entries(b.storage, 1)  # B is unaffected
    assert head(aws)["owner"] == "owner-b" and head(aws)["seq"] == "6"
    await b.close()


@pytest.mark.parametrize("big_first", [True, False], ids=["oversized-first", "session-first"])
async def test_a_paused_former_holders_commit_is_rejected_and_leaves_no_trace(
    aws: AwsResources, tmp_path: Path, big_first: bool
) -> None:
    await _paused_holder_is_fenced(aws, tmp_path, big_first)


async def test_fencing_over_http_with_a_moto_server(aws_http: AwsResources, tmp_path: Path) -> None:
    await _paused_holder_is_fenced(aws_http, tmp_path, big_first=True)


class _LostReply:
    """A DynamoDB client whose next transaction lands but whose reply is lost."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.lose_next = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def transact_write_items(self, **kwargs: Any) -> Any:
        out = self.inner.transact_write_items(**kwargs)
        if self.lose_next:
            self.lose_next = False
            raise ConnectionResetError("connection reset before the reply")
        return out


async def test_an_uncertain_commit_poisons_and_the_next_open_finds_what_landed(
    aws: AwsResources, tmp_path: Path
) -> None:
    flaky = _LostReply(aws.dynamodb)
    resources = AwsResources(flaky, aws.s3, aws.table, aws.bucket)
    workdir = container(tmp_path)
    a = await open_replica(resources, workdir)
    await a.storage.commit([ConversationRecord(1)])
    session = await Session.open(a.storage, VirtualClock())
    flaky.lose_next = True
    staged: list[int] = []

    async def append(tx: Tx) -> None:
        staged.append((await tx.append_entry(1, "custom")).id)

    with pytest.raises(SessionPoisoned):
        await session.commit(append)
    assert await a.storage.entry(staged[0]) is None  # not applied locally...
    assert head(aws)["seq"] == "2"  # ...but durable
    await a.close()
    again = await open_replica(resources, workdir)
    assert (again.origin, again.replayed) == ("caught_up", 1)
    assert await again.storage.entry(staged[0]) is not None
    await again.close()


class _Throttled:
    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def transact_write_items(self, **kwargs: Any) -> Any:
        error = self.inner.exceptions.TransactionCanceledException(
            {
                "Error": {"Code": "TransactionCanceledException", "Message": "throttled"},
                "CancellationReasons": [{"Code": "ThrottlingError"}, {"Code": "None"}],
            },
            "TransactWriteItems",
        )
        raise error


async def test_a_transaction_cancelled_without_a_condition_failure_is_a_clean_refusal(
    aws: AwsResources, tmp_path: Path
) -> None:
    a = await open_replica(aws, container(tmp_path))
    await a.storage.commit([ConversationRecord(1)])
    a.gate.resources = AwsResources(_Throttled(aws.dynamodb), aws.s3, aws.table, aws.bucket)
    session = await Session.open(a.storage, VirtualClock())

    async def append(tx: Tx) -> None:
        await tx.append_entry(1, "custom")

    with pytest.raises(StorageRejected, match="ThrottlingError"):
        await session.commit(append)
    assert session.poisoned is None and a.storage.seq == 1
    a.gate.resources = aws
    await session.commit(append)
    assert a.storage.seq == 2 and head(aws)["seq"] == "2"
    await a.close()


async def test_commits_renew_the_lease_and_a_regrant_fences_the_older_session(
    aws: AwsResources, tmp_path: Path
) -> None:
    clock = VirtualClock()
    a = await open_replica(aws, container(tmp_path), clock=clock, lease_ms=MINUTE)
    await a.storage.commit([ConversationRecord(1)])
    for _ in range(3):  # 3 x 40 s > one lease, but every commit renewed it
        clock.advance(40_000)
        await _entries(a.storage, 1)
    with pytest.raises(LeaseHeld):
        await open_replica(aws, container(tmp_path), owner="owner-b", clock=clock)
    # The same owner opening again (say, a retried invocation) gets a new epoch: the
    # older session of that owner is fenced like anyone else's.
    again = await open_replica(aws, container(tmp_path), clock=clock, lease_ms=MINUTE)
    assert again.lease.grant.epoch == a.lease.grant.epoch + 1
    with pytest.raises(LeaseLost):
        await _entries(a.storage, 1)
    assert await _entries(again.storage, 1) and head(aws)["seq"] == "5"
    await a.close()
    await again.close()
