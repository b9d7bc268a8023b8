"""Conformance cases for store-wide invariants: lossless indexed strings, one record
id namespace with exhaustion rejected, nothing after close, and scan order.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from core.errors import InvalidCursor, StorageClosed
from core.records import MAX_ID, ConversationRecord
from core.storage.port import (
    ConversationQuery,
    DocumentQuery,
    EntryQuery,
    Storage,
    SubmissionQuery,
    TaskQuery,
)
from core.testing.storage_conformance.kit import (
    StorageCase,
    _doc,
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


@_case
async def keeps_indexed_string_identities_lossless(storage: Storage) -> None:
    await _root(storage)
    lone_a, lone_b = "\ud800", "\ud801"
    t1, t2, s1, s2, d1, d2, d3 = [await storage.mint_id() for _ in range(7)]
    await storage.commit(
        [
            _task(t1, kind=lone_a),
            _task(t2, kind=lone_b),
            _sub(s1, request_id=lone_a),
            _sub(s2, request_id=lone_b),
            _doc(d1, lone_a, value=1),
            _doc(d2, lone_b, value=2),
            _doc(d3, lone_a, key=lone_b, value=3),
        ]
    )
    assert [t.id for t in (await storage.scan_tasks(TaskQuery(kind=lone_a))).items] == [t1]
    assert [t.id for t in (await storage.scan_tasks(TaskQuery(kind=lone_b))).items] == [t2]
    got = await storage.task(t1)
    assert got is not None and got.kind == lone_a
    a, b = (
        await storage.submission_by_request(1, lone_a),
        await storage.submission_by_request(1, lone_b),
    )
    assert a is not None and b is not None and (a.id, b.id) == (s1, s2)
    assert a.request_id == lone_a
    found = [await storage.find_document(k, "conversation", 1) for k in (lone_a, lone_b)]
    assert [r.id if r else None for r in found] == [d1, d2]
    keyed = await storage.find_document(lone_a, "conversation", 1, lone_b)
    assert keyed is not None and keyed.id == d3 and keyed.key == lone_b


@_case
async def keeps_one_global_record_id_namespace_and_rejects_exhausted_id_minting(
    storage: Storage,
) -> None:
    await _root(storage)
    await storage.commit([_entry(100)])
    assert await storage.mint_id() >= 101  # 101, or more after a reopen
    await _rejects(storage.commit([_task(100)]), text="already belongs to entry")
    await _rejects(storage.commit([_entry(100)]), text="already belongs to entry")
    await _rejects(storage.commit([_doc(100, value=1)]), text="already belongs to entry")
    await _rejects(storage.commit([_entry(MAX_ID + 1)]), text="id")
    await _rejects(storage.commit([_entry(0)]), text="id")
    await storage.commit([_entry(MAX_ID)])
    await _rejects(storage.mint_id(), text="ID space is exhausted")
    await _rejects(storage.mint_id(), text="ID space is exhausted")


@_case
async def rejects_every_operation_after_close(storage: Storage) -> None:
    await _root(storage)
    await storage.close()
    await storage.close()  # idempotent
    calls: list[Callable[[], Awaitable[Any]]] = [
        storage.mint_id,
        lambda: storage.commit([ConversationRecord(5)]),
        lambda: storage.conversation(1),
        lambda: storage.entry(2),
        lambda: storage.visible_entry(1, 2),
        lambda: storage.latest_head(1),
        lambda: storage.task(2),
        lambda: storage.submission(2),
        lambda: storage.submission_by_request(1, "r"),
        lambda: storage.document(2),
        lambda: storage.find_document("k", "session"),
        lambda: storage.scan_conversations(ConversationQuery()),
        lambda: storage.scan_entries(EntryQuery(1)),
        lambda: storage.scan_tasks(TaskQuery()),
        lambda: storage.scan_submissions(SubmissionQuery()),
        lambda: storage.scan_documents(DocumentQuery("session")),
    ]
    for call in calls:
        await _rejects(call(), StorageClosed, "closed")


@_case
async def scans_tables_in_either_id_order_and_continues_a_cursor_in_its_order(
    storage: Storage,
) -> None:
    await _root(storage)
    a, b = await storage.mint_id(), await storage.mint_id()
    await storage.commit([ConversationRecord(a), ConversationRecord(b)])
    e = [await storage.mint_id() for _ in range(3)]
    t = [await storage.mint_id() for _ in range(3)]
    s = [await storage.mint_id() for _ in range(3)]
    await storage.commit([*map(_entry, e), *map(_task, t), *map(_sub, s)])

    # (scan, its query record, the ids it finds, its default order)
    scans: list[tuple[Callable[..., Awaitable[Any]], Callable[..., Any], list[int], str]] = [
        (storage.scan_conversations, ConversationQuery, [1, a, b], "asc"),
        (storage.scan_entries, partial(EntryQuery, 1), e, "desc"),
        (storage.scan_tasks, TaskQuery, t, "asc"),
        (storage.scan_submissions, SubmissionQuery, s, "asc"),
    ]
    for scan, query, ids, default in scans:
        for order in ("asc", "desc"):
            expected = sorted(ids, reverse=order == "desc")
            first = await scan(query(order=order, limit=2))
            assert [x.id for x in first.items] == expected[:2]
            rest = await scan(query(limit=2), _roundtrip(first.next))  # order from the cursor
            assert [x.id for x in rest.items] == expected[2:] and rest.next is None
            other = "desc" if order == "asc" else "asc"
            await _rejects(scan(query(order=other, limit=2), first.next), InvalidCursor, order)
        default_page = await scan(query(limit=10))
        assert [x.id for x in default_page.items] == sorted(ids, reverse=default == "desc")
    # A cursor belongs to one scan and one set of filters.
    task_page = await storage.scan_tasks(TaskQuery(limit=1))
    await _rejects(
        storage.scan_submissions(SubmissionQuery(), task_page.next), InvalidCursor, "tasks"
    )
    await _rejects(
        storage.scan_tasks(TaskQuery(status="pending"), task_page.next), InvalidCursor, "filters"
    )
    await _rejects(storage.scan_tasks(TaskQuery(), {"after": 1}), InvalidCursor, "cursor")
    # An `after` no record id can be (ids are 1..MAX_ID) is refused, not bound to SQL.
    for after in (0, -1, MAX_ID + 1, 2**63 - 1, 2**63, 2**70):
        forged = {**(task_page.next or {}), "after": after}
        await _rejects(storage.scan_tasks(TaskQuery(), forged), InvalidCursor, "cursor")
    await _rejects(storage.scan_tasks(TaskQuery(limit=0)), ValueError, "limit")
