"""Two-phase commit conformance: the cases a storage with a commit gate must pass.

The companion of :mod:`core.testing.storage_conformance` for storages that commit in two
phases (prepare → the host's :class:`~core.storage.sqlite.CommitGate` → apply) and can
replay a write set on a replica — :class:`~core.storage.sqlite.SqliteStorage` over any
facade. Runner-independent like the main kit: each case is a plain async function that
takes an :data:`OpenStorage` factory (a fresh, empty storage per call, with the given
gate) and uses plain ``assert``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any, Protocol

from core.errors import SessionPoisoned, StorageCorrupt, StorageRejected
from core.faux.model import _yield
from core.jsonvalue import JsonObject, dumps, loads
from core.readonly import readonly
from core.records import ConversationRecord, Running
from core.session import Session, Tx
from core.storage.port import (
    ConversationQuery,
    DocumentChange,
    DocumentCopy,
    DocumentQuery,
    DocumentRetire,
    EntryQuery,
    Storage,
    SubmissionQuery,
    TaskQuery,
    Write,
)
from core.storage.sqlite.write_set import CommitGate
from core.testing.clock import VirtualClock
from core.testing.storage_conformance.kit import _doc, _entry, _rejects, _sub, _task

__all__ = ["OpenStorage", "TwoPhaseCase", "TwoPhaseStorage", "two_phase_cases"]


class TwoPhaseStorage(Storage, Protocol):
    """A Storage that commits through a gate and replays write sets (see
    :meth:`core.storage.sqlite.SqliteStorage.apply_write_set`)."""

    @property
    def seq(self) -> int: ...

    async def apply_write_set(self, write_set: JsonObject) -> int: ...


OpenStorage = Callable[[CommitGate | None], Awaitable[TwoPhaseStorage]]
"""Open a fresh, empty storage committing through the gate (``None``: one phase). The
runner closes what it opened after the case."""


@readonly(slots=False)
class TwoPhaseCase:
    name: str
    run: Callable[[OpenStorage], Awaitable[None]]


_CASES: list[TwoPhaseCase] = []


def _case(fn: Callable[[OpenStorage], Awaitable[None]]) -> Callable[[OpenStorage], Awaitable[None]]:
    _CASES.append(TwoPhaseCase(fn.__name__, fn))
    return fn


def two_phase_cases() -> list[TwoPhaseCase]:
    """Every two-phase case, in a stable order."""
    return list(_CASES)


class _Gate:
    """A gate that keeps every write set as JSON text and refuses or fails on demand."""

    def __init__(self) -> None:
        self.storage: TwoPhaseStorage | None = None
        self.log: list[tuple[int, str]] = []
        self.refuse = False
        self.fail: BaseException | None = None
        self.applied_before: list[int] = []
        """The storage's seq each time the gate was asked: the previous commit's."""

    async def make_durable(self, seq: int, write_set: JsonObject) -> None:
        if self.storage is not None:
            self.applied_before.append(self.storage.seq)
        await _yield()  # a real gate awaits the network: let others run
        if self.refuse:
            raise StorageRejected("the durable log refused the commit")
        if self.fail is not None:
            raise self.fail
        self.log.append((seq, dumps(write_set)))


async def _gated(open_storage: OpenStorage) -> tuple[TwoPhaseStorage, _Gate]:
    gate = _Gate()
    storage = await open_storage(gate)
    gate.storage = storage
    return storage, gate


async def _picture(storage: Storage, ids: list[int], seqs: list[int]) -> list[str]:
    """Everything a reader can see of ``ids`` at ``seqs`` (and now), as comparable text."""
    seen: list[str] = []

    async def look(label: str, read: Awaitable[Any]) -> None:
        try:
            seen.append(f"{label}: {await read!r}")
        except Exception as e:  # an error is part of what a reader sees
            seen.append(f"{label}: {type(e).__name__}")

    for i in ids:
        await look(f"conversation {i}", storage.conversation(i))
        await look(f"entry {i}", storage.entry(i))
        await look(f"task {i}", storage.task(i))
        await look(f"submission {i}", storage.submission(i))
        await look(f"document {i}", storage.document(i))
        for s in seqs:
            await look(f"document {i} at {s}", storage.document(i, s))
    for c in [1, *ids]:
        await look(f"entries of {c}", storage.scan_entries(EntryQuery(c, limit=1000)))
    await look("conversations", storage.scan_conversations(ConversationQuery(limit=1000)))
    await look("tasks", storage.scan_tasks(TaskQuery(limit=1000)))
    await look("submissions", storage.scan_submissions(SubmissionQuery(limit=1000)))
    await look(
        "documents", storage.scan_documents(DocumentQuery("conversation", owner_id=1, limit=1000))
    )
    await look("request r", storage.submission_by_request(1, "r"))
    return seen


@_case
async def write_sets_round_trip_through_json_and_rebuild_identical_reads(
    open_storage: OpenStorage,
) -> None:
    primary, gate = await _gated(open_storage)
    big = "x" * (600 * 1024)  # above the row chunk size: record parts travel too
    seqs = [await primary.commit([ConversationRecord(1)])]
    ids = [await primary.mint_id() for _ in range(8)]
    conv, e1, e2, t, s, d, latest, copy = ids
    seqs.append(
        await primary.commit(
            [
                ConversationRecord(conv),
                _entry(e1, conv, data={"blob": big}),
                replace(_task(t, conv), input={"blob": big}),
                _sub(s, 1, request_id="r"),
                _doc(d, value={"a": [1]}),
                _doc(latest, "test.live", history="latest", value=0),
            ]
        )
    )
    seqs.append(
        await primary.commit(
            [
                replace(_task(t, conv), state=Running({"phase": "next"})),
                _sub(s, 1, request_id="r", status="placed", entry=e1),
                DocumentChange(d, 1, ops=[["s", ["b"], 2]]),
                DocumentChange(latest, 1, value=big),
            ]
        )
    )
    seqs.append(
        await primary.commit(
            [
                _task(t, conv, kind="test.other"),  # an "immutable" column changed
                _entry(e2, 1, head=e2),
                DocumentChange(latest, 1, value=1),  # rebases: the big revision goes
                DocumentCopy(copy, "test.doc", "conversation", conv, None, "rewindable", d, None),
            ]
        )
    )
    changed = await primary.task(t)
    assert changed is not None and changed.kind == "test.other"
    seqs.append(await primary.commit([DocumentRetire(d), DocumentRetire(latest)]))
    assert [seq for seq, _ in gate.log] == seqs
    assert gate.applied_before == [seq - 1 for seq in seqs]

    replica = await open_storage(None)
    for seq, text in gate.log:
        assert await replica.apply_write_set(loads(text)) == seq
    assert replica.seq == primary.seq == seqs[-1]
    assert await _picture(replica, ids, seqs) == await _picture(primary, ids, seqs)
    assert await replica.task(t) == changed
    # The counters travel too: both mint and commit on from the same place.
    assert await replica.mint_id() == await primary.mint_id()
    nxt = await primary.mint_id()
    assert await replica.mint_id() == nxt
    assert await replica.commit([_entry(nxt)]) == await primary.commit([_entry(nxt)])

    # A write set out of order (or not one at all) is refused and writes nothing.
    again = await open_storage(None)
    before = await _picture(again, ids, seqs)
    await _rejects(again.apply_write_set(loads(gate.log[1][1])), StorageCorrupt, "seq")
    await _rejects(again.apply_write_set({"format": 1}), StorageCorrupt)
    bad = loads(gate.log[0][1])
    assert isinstance(bad, dict)
    await _rejects(again.apply_write_set({**bad, "ops": [[99, []]]}), StorageCorrupt)
    assert await _picture(again, ids, seqs) == before and again.seq == 0


@_case
async def a_refusal_between_prepare_and_apply_leaves_nothing_written(
    open_storage: OpenStorage,
) -> None:
    storage, gate = await _gated(open_storage)
    first = await storage.commit([ConversationRecord(1)])
    ids = [await storage.mint_id() for _ in range(4)]
    e, t, s, d = ids
    batch: list[Write] = [_entry(e), _task(t), _sub(s, request_id="r"), _doc(d, value=[1])]
    before = await _picture(storage, ids, [first])
    gate.refuse = True
    await _rejects(storage.commit(batch), StorageRejected, "refused")
    assert await _picture(storage, ids, [first]) == before
    assert storage.seq == first and len(gate.log) == 1
    # Minting goes on past the refused commit's ids; they were never committed, so the
    # same batch can land once the gate accepts, at the seq the refused one would have had.
    assert await storage.mint_id() == ids[-1] + 1
    gate.refuse = False
    assert await storage.commit(batch) == first + 1
    assert (await storage.entry(e)) is not None and (await storage.task(t)) == _task(t)

    # Through a session: a refusal is an ordinary failed commit, not a poisoning.
    session = await Session.open(storage, VirtualClock())
    gate.refuse = True

    async def append(tx: Tx) -> int:
        return (await tx.append_entry(1, "custom", data={"n": 1})).id

    await _rejects(session.commit(append), StorageRejected)
    assert session.poisoned is None
    gate.refuse = False
    entry_id = await session.commit(append)
    assert (await storage.entry(entry_id)) is not None
    assert storage.seq == first + 2


@_case
async def an_uncertain_gate_failure_applies_nothing_and_poisons_the_session(
    open_storage: OpenStorage,
) -> None:
    storage, gate = await _gated(open_storage)
    await storage.commit([ConversationRecord(1)])
    session = await Session.open(storage, VirtualClock())
    gate.fail = TimeoutError("the log did not answer")
    staged: list[int] = []

    async def append(tx: Tx) -> None:
        staged.append((await tx.append_entry(1, "custom")).id)

    await _rejects(session.commit(append), SessionPoisoned, "uncertain")
    assert isinstance(session.poisoned, TimeoutError)
    assert await storage.entry(staged[0]) is None and storage.seq == 1
    gate.fail = None
    await _rejects(session.commit(append), SessionPoisoned)  # until the storage is reopened
    assert len(staged) == 1 and len(gate.log) == 1


@_case
async def concurrent_commits_reach_the_gate_one_at_a_time_in_seq_order(
    open_storage: OpenStorage,
) -> None:
    storage, gate = await _gated(open_storage)
    await storage.commit([ConversationRecord(1)])
    ids = [await storage.mint_id() for _ in range(6)]
    seqs = await asyncio.gather(*(storage.commit([_entry(i)]) for i in ids))
    assert sorted(seqs) == list(range(2, 8))
    # Each commit was prepared against, and gated after, the previous one's apply.
    assert gate.applied_before == list(range(0, 7))
    assert [seq for seq, _ in gate.log] == list(range(1, 8))
