"""A deferring replica (issue 36): commits applied at once, made durable in groups — one
transaction and one log record per flush, the last one releasing the lease; the group
read back from any seq; early flushes by size, age and snapshot; and a working copy that
died ahead of DynamoDB rebuilt, never caught up."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.errors import SessionPoisoned
from core.records import ConversationRecord, Entry
from core.session import Session, Tx
from core.storage import EntryQuery
from core.storage.sqlite import SqliteStorage
from core.testing.clock import VirtualClock
from runtimes.aws import AwsResources, LeaseLost
from runtimes.aws.keys import ActorKeys
from runtimes.aws.log import read_log
from tests.aws.support import container, head, items, log_seqs, open_replica

MINUTE = 60_000


async def _entries(storage: SqliteStorage, n: int, tag: str = "") -> None:
    for _ in range(n):
        entry_id = await storage.mint_id()
        await storage.commit([Entry(entry_id, 1, "custom", data={"n": entry_id, "tag": tag})])


async def _view(storage: SqliteStorage) -> list[Entry]:
    return (await storage.scan_entries(EntryQuery(1, limit=10_000))).items


def _log_items(aws: AwsResources) -> list[dict[str, str]]:
    return [
        {k: next(iter(v.values())) for k, v in i.items() if k in ("sk", "seq", "first")}
        for i in items(aws)
        if i["sk"]["S"] != "head"
    ]


async def test_commits_go_out_as_one_group_and_the_last_flush_releases_the_lease(
    aws: AwsResources, tmp_path: Path
) -> None:
    a = await open_replica(aws, container(tmp_path), defer=True)
    await a.storage.commit([ConversationRecord(1)])
    await _entries(a.storage, 3)
    assert a.storage.seq == 4 and a.gate.pending == 4  # applied, readable...
    assert len(await _view(a.storage)) == 3
    assert head(aws)["seq"] == "0" and log_seqs(aws) == []  # ...and nothing sent yet
    await a.storage.flush()
    assert head(aws)["seq"] == "4" and a.gate.pending == 0
    # One record for the group, keyed by its last seq.
    assert _log_items(aws) == [{"sk": ActorKeys("a1").log_sk(4, 0), "seq": "4", "first": "1"}]
    assert (a.gate.stats.transactions, a.gate.stats.commits) == (1, 4)

    await _entries(a.storage, 2)
    a.lease.record_armed(123)
    await a.close()  # the last group and the release: one write
    assert a.gate.stats.transactions == 2
    state = head(aws)
    assert (state["seq"], state["armed"]) == ("6", "123") and "owner" not in state
    assert [i["seq"] for i in _log_items(aws)] == ["4", "6"]

    cold = await open_replica(aws, container(tmp_path), owner="owner-b")
    assert (cold.origin, cold.replayed, cold.storage.seq) == ("rebuilt", 6, 6)
    assert [e.data for e in await _view(cold.storage)] == [
        {"n": n, "tag": ""} for n in (6, 5, 4, 3, 2)
    ]
    # A read may start inside a group (the record holding the seq is found).
    middle = await read_log(aws, ActorKeys("a1"), 3, 6)
    assert [w["seq"] for w in middle] == [3, 4, 5, 6]
    await cold.close()


async def test_a_group_is_flushed_early_by_size_by_age_and_before_a_snapshot(
    aws: AwsResources, tmp_path: Path
) -> None:
    clock = VirtualClock()
    a = await open_replica(aws, container(tmp_path), clock=clock, defer=True, snapshot_every=1_000)
    await a.storage.commit([ConversationRecord(1)])
    a.gate.max_pending_bytes = 1  # every further commit flushes the ones before it
    await _entries(a.storage, 2)
    assert (head(aws)["seq"], a.gate.pending) == ("2", 1)
    a.gate.max_pending_bytes = 1 << 20
    await _entries(a.storage, 2)
    clock.advance(a.gate.max_defer_ms)  # the oldest pending commit is now that old
    await _entries(a.storage, 1)
    assert (head(aws)["seq"], a.gate.pending) == ("5", 1)

    a.gate.snapshot_every = 3  # due: the snapshot must show durable state
    await _entries(a.storage, 1)
    state = head(aws)
    assert (state["seq"], state["snapshot_seq"], a.gate.pending) == ("6", "6", 1)
    assert a.gate.stats.snapshots == 1
    await a.close()
    cold = await open_replica(aws, container(tmp_path), owner="owner-b")
    assert (cold.storage.seq, cold.replayed) == (7, 1)
    await cold.close()


async def test_a_copy_that_died_ahead_of_dynamodb_is_rebuilt_not_caught_up(
    aws: AwsResources, tmp_path: Path
) -> None:
    clock = VirtualClock()
    mine = container(tmp_path)
    a = await open_replica(aws, mine, clock=clock, lease_ms=MINUTE, defer=True)
    await a.storage.commit([ConversationRecord(1)])
    await a.storage.flush()
    await _entries(a.storage, 2, "lost")  # seqs 2..3, applied here, never durable
    await a.close(release=False)  # killed: nothing flushed, the lease left to run out

    clock.advance(MINUTE + 1)
    b = await open_replica(aws, container(tmp_path), owner="owner-b", clock=clock)
    await _entries(b.storage, 4, "kept")  # seqs 2..5 of the durable history
    expected = await _view(b.storage)
    await b.close()

    # Same container: its file is at seq 3, below the head — but its 2 and 3 are not
    # the head's 2 and 3. Replaying 4 and 5 onto it would mix two histories.
    back = await open_replica(aws, mine, clock=clock)
    assert back.origin == "rebuilt" and await _view(back.storage) == expected
    assert {e.data["tag"] for e in expected if isinstance(e.data, dict)} == {"kept"}
    await back.close()
    again = await open_replica(aws, mine, clock=clock)  # flushed and released: warm
    assert again.origin == "warm"
    await again.close()


async def test_a_fenced_flush_poisons_the_session_and_loses_only_the_pending_group(
    aws: AwsResources, tmp_path: Path
) -> None:
    clock = VirtualClock()
    a = await open_replica(aws, container(tmp_path), clock=clock, lease_ms=MINUTE, defer=True)
    await a.storage.commit([ConversationRecord(1)])
    await a.storage.flush()
    session = await Session.open(a.storage, clock)

    async def append(tx: Tx) -> None:
        await tx.append_entry(1, "custom")

    await session.commit(append)  # pending
    clock.advance(MINUTE + 1)
    b = await open_replica(aws, container(tmp_path), owner="owner-b", clock=clock)
    with pytest.raises(SessionPoisoned) as poisoned:
        await session.flush()
    assert isinstance(poisoned.value.__cause__, LeaseLost)
    assert isinstance(a.gate.failure, LeaseLost)
    with pytest.raises(SessionPoisoned):
        await session.commit(append)
    await a.close()  # nothing to release: the lease is B's
    assert head(aws)["owner"] == "owner-b" and head(aws)["seq"] == "1"
    await b.close()
