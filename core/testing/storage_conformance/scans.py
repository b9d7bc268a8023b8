"""Conformance cases for record reads and paging: entries (out-of-order ids, cursors,
fork history), conversations, tasks and submissions, each scanned by opaque cursor.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from core.errors import UnknownRecord
from core.records import (
    Completed,
    Completing,
    ConversationOwner,
    ConversationParent,
    ConversationRecord,
    ErrorInfo,
    Failed,
    Running,
    Terminal,
    Waiting,
)
from core.storage.port import ConversationQuery, EntryQuery, Storage, SubmissionQuery, TaskQuery
from core.testing.storage_conformance.kit import (
    StorageCase,
    _entry,
    _rejects,
    _root,
    _roundtrip,
    _sub,
    _task,
    registrar,
)

__all__ = ["CASES"]

CASES: list[StorageCase] = []
"""The cases of this module, in definition order."""
_case = registrar(CASES)

# --------------------------------------------------------------------------- entries


@_case
async def indexes_entries_committed_out_of_id_order(storage: Storage) -> None:
    await _root(storage)
    await storage.commit([_entry(30), _entry(10), _entry(20, head=10)])
    page = await storage.scan_entries(EntryQuery(1))
    assert [e.id for e in page.items] == [30, 20, 10]
    head = await storage.latest_head(1)
    assert head is not None and head.id == 20 and head.head == 10
    assert await storage.mint_id() >= 31  # 31, or more after a reopen (see case 1)


@_case
async def continues_an_entry_cursor_below_its_last_item_after_a_newer_commit(
    storage: Storage,
) -> None:
    await _root(storage)
    ids = [await storage.mint_id() for _ in range(5)]
    await storage.commit([_entry(i) for i in ids])
    first = await storage.scan_entries(EntryQuery(1, limit=2))
    assert [e.id for e in first.items] == [ids[4], ids[3]]
    newer = await storage.mint_id()
    await storage.commit([_entry(newer)])
    second = await storage.scan_entries(EntryQuery(1, limit=2), _roundtrip(first.next))
    assert [e.id for e in second.items] == [ids[2], ids[1]]
    third = await storage.scan_entries(EntryQuery(1, limit=2), _roundtrip(second.next))
    assert [e.id for e in third.items] == [ids[0]]
    assert third.next is None


@_case
async def scans_deep_fork_history_newest_first_through_every_ancestor_cap(
    storage: Storage,
) -> None:
    await _root(storage)
    r1, r2, r3 = [await storage.mint_id() for _ in range(3)]
    # r1 and r2 are head markers; r3 shares their commit but lies after the fork point.
    await storage.commit([_entry(r1, head=r1), _entry(r2, head=r2), _entry(r3)])
    child = await storage.mint_id()
    await storage.commit([ConversationRecord(child, parent=ConversationParent(1, r2))])
    r4, c1, c2 = [await storage.mint_id() for _ in range(3)]
    await storage.commit([_entry(r4, head=r4), _entry(c1, child), _entry(c2, child, head=c2)])
    grand = await storage.mint_id()
    await storage.commit([ConversationRecord(grand, parent=ConversationParent(child, c1))])
    g1 = await storage.mint_id()
    await storage.commit([_entry(g1, grand)])

    full = await storage.scan_entries(EntryQuery(grand))
    assert [e.id for e in full.items] == [g1, c1, r2, r1]
    paged: list[int] = []
    cursor = None
    while True:
        page = await storage.scan_entries(EntryQuery(grand, limit=1), cursor)
        paged += [e.id for e in page.items]
        cursor = _roundtrip(page.next)
        if cursor is None:
            break
    assert paged == [g1, c1, r2, r1]
    child_view = await storage.scan_entries(EntryQuery(child))
    assert [e.id for e in child_view.items] == [c2, c1, r2, r1]
    bounded = await storage.scan_entries(EntryQuery(grand, min_id=r2, max_id=c1))
    assert [e.id for e in bounded.items] == [c1, r2]
    ascending = await storage.scan_entries(EntryQuery(grand, order="asc"))
    assert [e.id for e in ascending.items] == [r1, r2, c1, g1]

    head = await storage.latest_head(grand)
    assert head is not None and head.id == r2
    earlier = await storage.latest_head(grand, r2 - 1)
    assert earlier is not None and earlier.id == r1
    child_head = await storage.latest_head(child)
    assert child_head is not None and child_head.id == c2
    root_head = await storage.latest_head(1)
    assert root_head is not None and root_head.id == r4

    visible = await storage.visible_entry(grand, r2)
    assert visible is not None and visible.id == r2
    for hidden in (r3, r4, c2):
        assert await storage.visible_entry(grand, hidden) is None
    assert await storage.visible_entry(1, c1) is None
    assert await storage.visible_entry(grand, 10**9) is None
    await _rejects(storage.scan_entries(EntryQuery(10**9)), UnknownRecord, "Unknown conversation")
    await _rejects(storage.visible_entry(10**9, r1), UnknownRecord, "Unknown conversation")


# --------------------------------------------------------------------------- conversations


@_case
async def paginates_conversations_by_opaque_cursor_in_ascending_id_order(storage: Storage) -> None:
    await _root(storage)
    a, b = await storage.mint_id(), await storage.mint_id()
    await storage.commit([ConversationRecord(a), ConversationRecord(b)])
    first = await storage.scan_conversations(ConversationQuery(limit=2))
    assert [c.id for c in first.items] == [1, a]
    assert first.next is not None
    second = await storage.scan_conversations(ConversationQuery(limit=2), _roundtrip(first.next))
    assert [c.id for c in second.items] == [b]
    assert second.next is None


@_case
async def filters_and_pages_conversations_by_durable_owner_edges(storage: Storage) -> None:
    await _root(storage)
    other, t1, t2 = [await storage.mint_id() for _ in range(3)]
    await storage.commit([ConversationRecord(other), _task(t1), _task(t2, other)])
    a, b, c, d = [await storage.mint_id() for _ in range(4)]
    await storage.commit(
        [
            ConversationRecord(a, owner=ConversationOwner(1, t1)),
            ConversationRecord(b, owner=ConversationOwner(1, t1)),
            ConversationRecord(c, owner=ConversationOwner(other, t2)),
            ConversationRecord(d, owner=ConversationOwner(1, t2)),
        ]
    )

    async def all_pages(**query: Any) -> list[int]:
        out: list[int] = []
        cursor = None
        while True:
            page = await storage.scan_conversations(ConversationQuery(limit=1, **query), cursor)
            out += [x.id for x in page.items]
            if page.next is None:
                return out
            cursor = _roundtrip(page.next)

    assert await all_pages(owner_conversation_id=1) == [a, b, d]
    assert await all_pages(owner_task_id=t1) == [a, b]
    assert await all_pages(owner_task_id=t2) == [c, d]
    assert await all_pages(owner_conversation_id=1, owner_task_id=t2) == [d]
    assert await all_pages(owner_conversation_id=other, owner_task_id=t1) == []
    got = await storage.conversation(c)
    assert got == ConversationRecord(c, owner=ConversationOwner(other, t2))


# --------------------------------------------------------------------------- tasks


@_case
async def replaces_complete_task_records_and_pages_filtered_task_scans(storage: Storage) -> None:
    await _root(storage)
    ids = [await storage.mint_id() for _ in range(4)]
    t1, t2, t3, t4 = ids
    await storage.commit(
        [
            _task(t1, memos={"a": 1}, abort_requested=True),
            _task(t2, background=True),
            _task(t3, abort_requested=True, background=True),
            _task(t4, kind="other.task"),
        ]
    )
    # Full replacement: fields not given are gone.
    done = replace(_task(t1), state=Terminal(Completed({"ok": True})), started_at=5, ended_at=9)
    await storage.commit([done])
    got = await storage.task(t1)
    assert got == done
    assert got is not None and got.memos == {} and not got.abort_requested
    assert got.checkpoint is None and got.outcome == Completed({"ok": True})

    async def all_pages(**query: Any) -> list[int]:
        out: list[int] = []
        cursor = None
        while True:
            page = await storage.scan_tasks(TaskQuery(limit=1, **query), cursor)
            out += [x.id for x in page.items]
            if page.next is None:
                return out
            cursor = _roundtrip(page.next)

    assert await all_pages(status="terminal") == [t1]
    assert await all_pages(status="pending") == [t2, t3, t4]
    assert await all_pages(abort_requested=True) == [t3]
    assert await all_pages(background=True) == [t2, t3]
    assert await all_pages(background=False, status="pending") == [t4]
    assert await all_pages(kind="other.task") == [t4]
    assert await all_pages(conversation_id=1, kind="test.task", status="pending") == [t2, t3]
    assert await all_pages(conversation_id=2) == []


@_case
async def stores_owners_and_scans_waiting_and_completing_tasks_by_status(storage: Storage) -> None:
    await _root(storage)
    owner, a, b = [await storage.mint_id() for _ in range(3)]
    waiting = _task(owner, state=Waiting({"phase": "join"}, (a, b), "fail_fast", 1234))
    child_a = _task(a, owner=owner, state=Running({"phase": "go", "list": [1, {"x": None}]}))
    child_b = _task(b, owner=owner)
    await storage.commit([waiting, child_a, child_b])
    assert await storage.task(owner) == waiting
    assert await storage.task(a) == child_a
    got_b = await storage.task(b)
    assert got_b is not None and got_b.owner == owner
    holding = replace(
        waiting, state=Completing(Failed(ErrorInfo("declined", {"card": 4}), {"partial": 1}))
    )
    await storage.commit([holding])
    assert await storage.task(owner) == holding
    waiting_ids = [t.id for t in (await storage.scan_tasks(TaskQuery(status="waiting"))).items]
    completing_ids = [
        t.id for t in (await storage.scan_tasks(TaskQuery(status="completing"))).items
    ]
    running_ids = [t.id for t in (await storage.scan_tasks(TaskQuery(status="running"))).items]
    assert (waiting_ids, completing_ids, running_ids) == ([], [owner], [a])


# --------------------------------------------------------------------------- submissions


@_case
async def indexes_request_ids_per_conversation_and_replaces_complete_submission_records(
    storage: Storage,
) -> None:
    await _root(storage)
    other, s1, s2, s3 = [await storage.mint_id() for _ in range(4)]
    await storage.commit(
        [
            ConversationRecord(other),
            _sub(s1, request_id="r1"),
            _sub(s2, other, request_id="r1"),
            _sub(s3, request_id="r2", status="placed", entry=other),
        ]
    )
    a = await storage.submission_by_request(1, "r1")
    b = await storage.submission_by_request(other, "r1")
    assert a is not None and b is not None and (a.id, b.id) == (s1, s2)
    assert await storage.submission_by_request(1, "missing") is None
    placed = _sub(s1, request_id="r1", status="placed", entry=7)
    await storage.commit([placed])
    assert await storage.submission_by_request(1, "r1") == placed
    s4 = await storage.mint_id()
    await _rejects(storage.commit([_sub(s4, request_id="r1")]), text="r1")
    assert await storage.submission(s4) is None

    async def all_pages(**query: Any) -> list[int]:
        out: list[int] = []
        cursor = None
        while True:
            page = await storage.scan_submissions(SubmissionQuery(limit=1, **query), cursor)
            out += [x.id for x in page.items]
            if page.next is None:
                return out
            cursor = _roundtrip(page.next)

    assert await all_pages(conversation_id=1) == [s1, s3]
    assert await all_pages(status="placed") == [s1, s3]
    assert await all_pages(status="queued") == [s2]
    assert await all_pages(conversation_id=other, status="queued") == [s2]
    assert await all_pages() == [s1, s2, s3]


@_case
async def stores_passive_write_submissions_without_input_only_lifecycle_states(
    storage: Storage,
) -> None:
    await _root(storage)
    w1, w2, e = [await storage.mint_id() for _ in range(3)]
    await storage.commit(
        [_sub(w1, type="write", request_id="w1"), _sub(w2, type="write", request_id="w2")]
    )
    done = _sub(w1, type="write", request_id="w1", status="done", entry=e)
    dropped = _sub(
        w2, type="write", request_id="w2", status="unanswered", reason="stale", detail={"at": 3}
    )
    await storage.commit([_entry(e), done, dropped])
    assert await storage.submission(w1) == done
    assert await storage.submission_by_request(1, "w1") == done
    assert await storage.submission(w2) == dropped
    assert await storage.submission_by_request(1, "w2") == dropped
