"""Storage conformance kit: the cases every Storage adapter must pass.

Runner-independent on purpose (no pytest import): each case is a plain async function
taking a freshly opened, empty storage and using plain ``assert``. A runner
parametrizes :func:`storage_cases` over its adapters; see ``tests/core/storage`` for the
pytest bridge. Storages that commit in two phases also run
:mod:`core.testing.two_phase_conformance`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from core.errors import InvalidCursor, StorageClosed, StorageRejected, UnknownRecord
from core.jsonvalue import JsonObject, JsonValue, dumps, loads
from core.records import (
    MAX_ID,
    Completed,
    Completing,
    ConversationOwner,
    ConversationParent,
    ConversationRecord,
    Entry,
    ErrorInfo,
    Failed,
    Pending,
    Running,
    SubmissionRecord,
    Task,
    Terminal,
    Waiting,
)
from core.storage.port import (
    DocumentChange,
    DocumentCopy,
    DocumentCreate,
    DocumentRetire,
    Storage,
)

__all__ = ["StorageCase", "storage_cases"]


@dataclass(frozen=True)
class StorageCase:
    name: str
    run: Callable[[Storage], Awaitable[None]]


_CASES: list[StorageCase] = []


def _case(fn: Callable[[Storage], Awaitable[None]]) -> Callable[[Storage], Awaitable[None]]:
    _CASES.append(StorageCase(fn.__name__, fn))
    return fn


def storage_cases() -> list[StorageCase]:
    """Every conformance case, in a stable order."""
    return list(_CASES)


# --------------------------------------------------------------------------- helpers


async def _rejects(
    awaitable: Awaitable[Any], error: type[Exception] = StorageRejected, text: str = ""
) -> None:
    try:
        await awaitable
    except error as e:
        assert text.lower() in str(e).lower(), f"expected {text!r} in {e!r}"
        return
    raise AssertionError(f"expected {error.__name__} ({text!r}), nothing was raised")


def _task(
    task_id: int,
    conversation_id: int = 1,
    *,
    phase: str = "start",
    kind: str = "test.task",
    **fields: Any,
) -> Task:
    return Task(
        id=task_id,
        conversation_id=conversation_id,
        kind=kind,
        version=1,
        input={"value": task_id},
        state=fields.pop("state", Pending({"phase": phase})),
        **fields,
    )


def _entry(entry_id: int, conversation_id: int = 1, **fields: Any) -> Entry:
    return Entry(id=entry_id, conversation_id=conversation_id, kind="custom", **fields)


def _sub(submission_id: int, conversation_id: int = 1, **fields: Any) -> SubmissionRecord:
    fields.setdefault("type", "input")
    fields.setdefault("status", "queued")
    return SubmissionRecord(id=submission_id, conversation_id=conversation_id, **fields)


def _doc(
    doc_id: int,
    kind: str = "test.doc",
    *,
    scope: Any = "conversation",
    owner_id: int | None = 1,
    key: str | None = None,
    history: Any = "rewindable",
    version: int = 1,
    value: JsonValue = None,
) -> DocumentCreate:
    return DocumentCreate(doc_id, kind, scope, owner_id, key, history, version, value)


async def _root(storage: Storage) -> None:
    await storage.commit([ConversationRecord(1)])


def _roundtrip(cursor: JsonObject | None) -> JsonObject | None:
    """Cursors are opaque JSON: they must survive a trip through a client."""
    return None if cursor is None else loads(dumps(cursor))


# --------------------------------------------------------------------------- cases 1-4


@_case
async def reserves_id_1_for_the_immutable_root_conversation(storage: Storage) -> None:
    assert await storage.mint_id() == 2
    assert await storage.conversation(1) is None
    await storage.commit([ConversationRecord(1)])
    assert await storage.conversation(1) == ConversationRecord(1)
    await _rejects(
        storage.commit([ConversationRecord(1)]), text="ID 1 already belongs to conversation"
    )
    await _rejects(storage.commit([_task(1)]), text="reserved for the root conversation")
    assert await storage.mint_id() == 3


@_case
async def commits_mixed_table_writes_atomically_and_rolls_all_of_them_back_on_failure(
    storage: Storage,
) -> None:
    await _root(storage)
    conv, e1, t, s, e2 = [await storage.mint_id() for _ in range(5)]
    seq = await storage.commit(
        [ConversationRecord(conv), _entry(e1, conv), _task(t, conv), _sub(s, conv, request_id="r")]
    )
    entry = await storage.entry(e1)
    assert entry is not None and entry.commit_seq == seq
    before_task, before_sub = await storage.task(t), await storage.submission(s)
    await _rejects(
        storage.commit(
            [
                replace(_task(t, conv), state=Running({"phase": "next"})),
                _sub(s, conv, request_id="r", status="placed", entry=e1),
                _entry(e2, conv),
                ConversationRecord(conv),
            ]
        ),
        text="already belongs to conversation",
    )
    assert await storage.task(t) == before_task
    assert await storage.submission(s) == before_sub
    assert await storage.entry(e2) is None
    page = await storage.scan_entries(conv)
    assert [e.id for e in page.items] == [e1]
    later = await storage.commit([_entry(e2, conv)])
    assert later > seq


@_case
async def detaches_retained_writes_and_every_returned_record(storage: Storage) -> None:
    await _root(storage)
    e, t, s = [await storage.mint_id() for _ in range(3)]
    data: JsonObject = {"list": [1, 2], "nested": {"k": "v"}}
    task = _task(t, memos={"m": {"x": 1}})
    detail: JsonObject = {"why": ["a"]}
    await storage.commit([_entry(e, data=data), task, _sub(s, detail=detail)])
    data["list"].append(3)  # type: ignore[union-attr]
    assert task.checkpoint is not None
    task.checkpoint["phase"] = "mutated"
    task.memos["m"] = "mutated"
    detail["why"] = []
    got_entry = await storage.entry(e)
    got_task = await storage.task(t)
    got_sub = await storage.submission(s)
    assert got_entry is not None and got_entry.data == {"list": [1, 2], "nested": {"k": "v"}}
    assert got_task is not None and got_task.checkpoint == {"phase": "start"}
    assert got_task.memos == {"m": {"x": 1}}
    assert got_sub is not None and got_sub.detail == {"why": ["a"]}
    # Mutating what a read returned must not reach storage either.
    got_entry.data["nested"]["k"] = "changed"  # type: ignore[call-overload,index,unused-ignore]
    assert got_task.checkpoint is not None
    got_task.checkpoint["phase"] = "changed"
    again_entry, again_task = await storage.entry(e), await storage.task(t)
    assert again_entry is not None and again_entry.data == {"list": [1, 2], "nested": {"k": "v"}}
    assert again_task is not None and again_task.checkpoint == {"phase": "start"}


@_case
async def detaches_prototype_like_json_keys_without_changing_object_prototypes(
    storage: Storage,
) -> None:
    await _root(storage)
    e, t, d = [await storage.mint_id() for _ in range(3)]
    odd: JsonObject = {
        "__proto__": {"polluted": True},
        "constructor": "c",
        "toString": 1,
        "__class__": "k",
        "__dict__": {},
    }
    await storage.commit(
        [_entry(e, data=odd), _task(t, memos={"__proto__": 1, "toString": 2}), _doc(d, value=odd)]
    )
    got = await storage.entry(e)
    assert got is not None and got.data == odd
    task = await storage.task(t)
    assert task is not None and task.memos == {"__proto__": 1, "toString": 2}
    state = await storage.document(d)
    assert state is not None and state.value == odd
    assert type(state.value) is dict and "polluted" not in vars(type(state.value))


# --------------------------------------------------------------------------- entries


@_case
async def indexes_entries_committed_out_of_id_order(storage: Storage) -> None:
    await _root(storage)
    await storage.commit([_entry(30), _entry(10), _entry(20, head=10)])
    page = await storage.scan_entries(1)
    assert [e.id for e in page.items] == [30, 20, 10]
    head = await storage.latest_head(1)
    assert head is not None and head.id == 20 and head.head == 10
    assert await storage.mint_id() == 31


@_case
async def continues_an_entry_cursor_below_its_last_item_after_a_newer_commit(
    storage: Storage,
) -> None:
    await _root(storage)
    ids = [await storage.mint_id() for _ in range(5)]
    await storage.commit([_entry(i) for i in ids])
    first = await storage.scan_entries(1, limit=2)
    assert [e.id for e in first.items] == [ids[4], ids[3]]
    newer = await storage.mint_id()
    await storage.commit([_entry(newer)])
    second = await storage.scan_entries(1, limit=2, cursor=_roundtrip(first.next))
    assert [e.id for e in second.items] == [ids[2], ids[1]]
    third = await storage.scan_entries(1, limit=2, cursor=_roundtrip(second.next))
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

    full = await storage.scan_entries(grand)
    assert [e.id for e in full.items] == [g1, c1, r2, r1]
    paged: list[int] = []
    cursor = None
    while True:
        page = await storage.scan_entries(grand, limit=1, cursor=cursor)
        paged += [e.id for e in page.items]
        cursor = _roundtrip(page.next)
        if cursor is None:
            break
    assert paged == [g1, c1, r2, r1]
    child_view = await storage.scan_entries(child)
    assert [e.id for e in child_view.items] == [c2, c1, r2, r1]
    bounded = await storage.scan_entries(grand, min_id=r2, max_id=c1)
    assert [e.id for e in bounded.items] == [c1, r2]
    ascending = await storage.scan_entries(grand, order="asc")
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
    await _rejects(storage.scan_entries(10**9), UnknownRecord, "Unknown conversation")
    await _rejects(storage.visible_entry(10**9, r1), UnknownRecord, "Unknown conversation")


# --------------------------------------------------------------------------- conversations


@_case
async def paginates_conversations_by_opaque_cursor_in_ascending_id_order(storage: Storage) -> None:
    await _root(storage)
    a, b = await storage.mint_id(), await storage.mint_id()
    await storage.commit([ConversationRecord(a), ConversationRecord(b)])
    first = await storage.scan_conversations(limit=2)
    assert [c.id for c in first.items] == [1, a]
    assert first.next is not None
    second = await storage.scan_conversations(limit=2, cursor=_roundtrip(first.next))
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
            page = await storage.scan_conversations(limit=1, cursor=cursor, **query)
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
            page = await storage.scan_tasks(limit=1, cursor=cursor, **query)
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
    waiting_ids = [t.id for t in (await storage.scan_tasks(status="waiting")).items]
    completing_ids = [t.id for t in (await storage.scan_tasks(status="completing")).items]
    running_ids = [t.id for t in (await storage.scan_tasks(status="running")).items]
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
            page = await storage.scan_submissions(limit=1, cursor=cursor, **query)
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


# --------------------------------------------------------------------------- documents


@_case
async def reconstructs_rewindable_documents_and_preserves_half_open_incarnations(
    storage: Storage,
) -> None:
    await _root(storage)
    d = await storage.mint_id()
    s1 = await storage.commit([_doc(d, value={"a": 1})])
    s2 = await storage.commit([DocumentChange(d, 1, ops=[["s", ["b"], [1]]])])
    s3 = await storage.commit([DocumentChange(d, 1, value={"c": 3})])
    s4 = await storage.commit([DocumentChange(d, 1, ops=[["r", {"root": True}]])])
    expected = {
        s1: ({"a": 1}, 0),
        s2: ({"a": 1, "b": [1]}, 1),
        s3: ({"c": 3}, 0),
        s4: ({"root": True}, 1),
    }
    for at, (value, deltas) in expected.items():
        state = await storage.document(d, at)
        assert state is not None, at
        assert (state.value, state.version, state.deltas_since_base) == (value, 1, deltas), at
        assert isinstance(state.value, dict)
        state.value["x"] = "mutated"
        again = await storage.document(d, at)
        assert again is not None and again.value == value
    current = await storage.document(d)
    assert current is not None and current.value == {"root": True}

    d2 = await storage.mint_id()
    s5 = await storage.commit([DocumentRetire(d), _doc(d2, value={"fresh": 1})])
    assert await storage.document(d, s5) is None
    assert await storage.document(d) is None
    old = await storage.document(d, s4)
    assert old is not None and old.value == {"root": True}
    found = await storage.find_document("test.doc", "conversation", 1)
    assert found is not None and found.id == d2 and found.created_at == s5
    found_old = await storage.find_document("test.doc", "conversation", 1, at=s4)
    assert found_old is not None and found_old.id == d and found_old.retired_at == s5
    assert await storage.find_document("test.doc", "conversation", 1, at=s1 - 1) is None
    at4 = await storage.scan_documents("conversation", owner_id=1, at=s4)
    at5 = await storage.scan_documents("conversation", owner_id=1, at=s5)
    assert [r.id for r in at4.items] == [d]
    assert [r.id for r in at5.items] == [d2]


@_case
async def streams_long_document_tails_across_root_replacement_deltas(storage: Storage) -> None:
    await _root(storage)
    d = await storage.mint_id()
    value: list[JsonValue] = [{"row": i, "text": f"line {i}"} for i in range(512)]
    history: list[tuple[int, list[JsonValue]]] = []
    seq = await storage.commit([_doc(d, value=value)])
    history.append((seq, loads(dumps(value))))
    for round_ in range(2):
        for i in range(24):
            row = (i * 37 + round_) % len(value)
            value[row] = {"row": row, "text": f"edit {round_}.{i}"}
            seq = await storage.commit([DocumentChange(d, 1, ops=[["s", [row], value[row]]])])
            history.append((seq, loads(dumps(value))))
        if round_ == 0:
            value = [{"row": i, "text": "replaced"} for i in range(300)]
            seq = await storage.commit([DocumentChange(d, 1, ops=[["r", value]])])
            history.append((seq, loads(dumps(value))))
    for at, expected in history:
        state = await storage.document(d, at)
        assert state is not None and state.value == expected, at
        assert isinstance(state.value, list)
        state.value.clear()
        again = await storage.document(d, at)
        assert again is not None and again.value == expected
    last = await storage.document(d)
    assert last is not None and last.value == history[-1][1] and last.deltas_since_base == 49


@_case
async def copies_stored_document_bases_independently_and_rejects_ambiguous_sources(
    storage: Storage,
) -> None:
    await _root(storage)
    child, src, latest = [await storage.mint_id() for _ in range(3)]
    await storage.commit([ConversationRecord(child)])
    s1 = await storage.commit(
        [
            _doc(src, value={"x": 1}),
            _doc(latest, "test.latest", history="latest", value={"y": 1}),
        ]
    )
    await storage.commit([DocumentChange(src, 1, ops=[["s", ["x"], 2]])])
    c1, c2, c3, c4 = [await storage.mint_id() for _ in range(4)]
    await storage.commit(
        [
            DocumentCopy(c1, "test.doc", "conversation", child, "as-of", "rewindable", src, s1),
            DocumentCopy(c2, "test.doc", "conversation", child, "now", "rewindable", src, None),
            DocumentCopy(c3, "test.latest", "conversation", child, None, "latest", latest, None),
            DocumentCopy(c4, "test.doc", "conversation", child, "gone", "rewindable", src, None),
            DocumentRetire(c4),
        ]
    )
    states = [await storage.document(c) for c in (c1, c2, c3)]
    assert [s.value if s else None for s in states] == [{"x": 1}, {"x": 2}, {"y": 1}]
    assert await storage.document(c4) is None
    # Later changes and retirement of the sources leave the copies alone.
    await storage.commit(
        [DocumentChange(src, 1, ops=[["s", ["x"], 3]]), DocumentChange(latest, 1, value={"y": 9})]
    )
    await storage.commit([DocumentRetire(src), DocumentRetire(latest)])
    states = [await storage.document(c) for c in (c1, c2, c3)]
    assert [s.value if s else None for s in states] == [{"x": 1}, {"x": 2}, {"y": 1}]

    fresh = await storage.mint_id()
    again = await storage.mint_id()
    await storage.commit([_doc(fresh, "test.other", value={"z": 1}, owner_id=child)])
    e = await storage.mint_id()
    for bad in (
        [
            DocumentCopy(again, "test.other", "conversation", 1, None, "rewindable", fresh, None),
            DocumentRetire(fresh),
        ],
        [
            DocumentCopy(again, "test.other", "conversation", 1, None, "rewindable", fresh, None),
            DocumentChange(fresh, 1, ops=[["s", ["z"], 2]]),
        ],
        [DocumentCopy(again, "test.doc", "conversation", 1, None, "rewindable", fresh, None)],
        [DocumentCopy(again, "test.doc", "conversation", 1, None, "rewindable", src, None)],
    ):
        await _rejects(storage.commit([_entry(e), *bad]))
        assert await storage.document(again) is None
        assert await storage.entry(e) is None
    still = await storage.document(fresh)
    assert still is not None and still.value == {"z": 1}


@_case
async def uses_bases_for_version_transitions_and_rejects_historical_reads_of_current_only_documents(
    storage: Storage,
) -> None:
    await _root(storage)
    d, s = await storage.mint_id(), await storage.mint_id()
    await storage.commit(
        [
            _doc(d, value={"v": 1}),
            _doc(s, "test.session", scope="session", owner_id=None, history="latest", value=1),
        ]
    )
    await storage.commit([DocumentChange(d, 1, ops=[["s", ["v"], 2]])])
    s3 = await storage.commit([DocumentChange(d, 2, value={"v": 2, "shape": 2})])
    state = await storage.document(d, s3)
    assert state is not None and (state.version, state.deltas_since_base) == (2, 0)
    await _rejects(
        storage.commit([DocumentChange(d, 1, ops=[["s", ["v"], 3]])]),
        text="version transition requires a base",
    )
    await _rejects(
        storage.commit([DocumentChange(d, 3, ops=[["s", ["v"], 3]])]),
        text="version transition requires a base",
    )
    s4 = await storage.commit([DocumentChange(d, 2, ops=[["s", ["v"], 3]])])
    now = await storage.document(d)
    assert now is not None and now.value == {"v": 3, "shape": 2} and now.version == 2
    await storage.commit([DocumentChange(s, 1, value=2)])
    await _rejects(storage.document(s, s4), text="does not retain historical content")
    current = await storage.document(s)
    assert current is not None and current.value == 2
    await storage.commit([DocumentRetire(d), DocumentRetire(s)])
    assert await storage.document(d) is None and await storage.document(s) is None
    assert (await storage.document(d, s4)) is not None


@_case
async def indexes_logical_addresses_and_exact_scope_scans_independently(storage: Storage) -> None:
    await _root(storage)
    t = await storage.mint_id()
    await storage.commit([_task(t)])
    ids = [await storage.mint_id() for _ in range(7)]
    single, fam_a, fam_proto, fam_ctor, session_doc, task_doc, other_kind = ids
    await storage.commit(
        [
            _doc(single, "note", value=0),
            _doc(fam_a, "note", key="a", value="a"),
            _doc(fam_proto, "note", key="__proto__", value="p"),
            _doc(fam_ctor, "note", key="constructor", value="c"),
            _doc(session_doc, "note", scope="session", owner_id=None, history="latest", value="s"),
            _doc(task_doc, "note", scope="task", owner_id=t, history="latest", value="t"),
            _doc(other_kind, "todo", value=[]),
        ]
    )

    async def found(*address: Any) -> int | None:
        rec = await storage.find_document(*address)
        return None if rec is None else rec.id

    assert await found("note", "conversation", 1, None) == single
    assert await found("note", "conversation", 1, "a") == fam_a
    assert await found("note", "conversation", 1, "__proto__") == fam_proto
    assert await found("note", "conversation", 1, "constructor") == fam_ctor
    assert await found("note", "conversation", 1, "toString") is None
    assert await found("note", "session", None, None) == session_doc
    assert await found("note", "task", t, None) == task_doc
    assert await found("note", "task", t + 1, None) is None
    conv_docs = await storage.scan_documents("conversation", owner_id=1)
    assert [r.id for r in conv_docs.items] == [single, fam_a, fam_proto, fam_ctor, other_kind]
    notes = await storage.scan_documents("conversation", owner_id=1, kind="note", limit=2)
    assert [r.id for r in notes.items] == [single, fam_a]
    rest = await storage.scan_documents(
        "conversation", owner_id=1, kind="note", limit=2, cursor=_roundtrip(notes.next)
    )
    assert [r.id for r in rest.items] == [fam_proto, fam_ctor] and rest.next is None
    assert [r.id for r in (await storage.scan_documents("session")).items] == [session_doc]
    assert [r.id for r in (await storage.scan_documents("task", owner_id=t)).items] == [task_doc]
    seq = await storage.commit([DocumentChange(task_doc, 1, value="t2")])
    await _rejects(storage.document(task_doc, seq), text="does not retain historical content")


@_case
async def keeps_document_lifecycle_failures_atomic_and_gives_create_plus_retire_an_empty_lifetime(
    storage: Storage,
) -> None:
    await _root(storage)
    d1, d2, e = [await storage.mint_id() for _ in range(3)]
    await storage.commit([_doc(d1, value=1)])
    await _rejects(
        storage.commit([_entry(e), _doc(d2, value=2)]), text="already has a current incarnation"
    )
    assert await storage.entry(e) is None and await storage.document(d2) is None
    await _rejects(
        storage.commit([_doc(d2, "x", value=2), _doc(await storage.mint_id(), "x", value=3)]),
        text="already has a current incarnation",
    )
    d3 = await storage.mint_id()
    seq = await storage.commit([_doc(d3, "ghost", value=1), DocumentRetire(d3)])
    assert await storage.find_document("ghost", "conversation", 1) is None
    assert await storage.find_document("ghost", "conversation", 1, at=seq) is None
    assert await storage.document(d3) is None
    assert await storage.document(d3, seq) is None
    current = await storage.document(d1)
    assert current is not None and current.value == 1


@_case
async def rolls_back_record_tables_and_secondary_indexes_when_a_document_command_fails(
    storage: Storage,
) -> None:
    await _root(storage)
    t, s, d, e, clash = [await storage.mint_id() for _ in range(5)]
    seq = await storage.commit([_task(t), _sub(s, request_id="before"), _doc(d, value=1)])
    await _rejects(
        storage.commit(
            [
                replace(_task(t), state=Running({"phase": "x"})),
                _sub(s, request_id="after", status="placed", entry=e),
                _entry(e),
                _doc(clash, value=2),
            ]
        ),
        text="already has a current incarnation",
    )
    assert [x.id for x in (await storage.scan_tasks(status="pending")).items] == [t]
    assert (await storage.scan_tasks(status="running")).items == []
    before = await storage.submission_by_request(1, "before")
    assert before is not None and before.id == s
    assert await storage.submission_by_request(1, "after") is None
    assert (await storage.scan_submissions(status="placed")).items == []
    assert await storage.entry(e) is None
    found = await storage.find_document("test.doc", "conversation", 1)
    assert found is not None and found.id == d
    assert await storage.document(clash) is None
    assert await storage.commit([_entry(e)]) > seq


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
    assert [t.id for t in (await storage.scan_tasks(kind=lone_a)).items] == [t1]
    assert [t.id for t in (await storage.scan_tasks(kind=lone_b)).items] == [t2]
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
    assert await storage.mint_id() == 101
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
        lambda: storage.scan_conversations(),
        lambda: storage.scan_entries(1),
        lambda: storage.scan_tasks(),
        lambda: storage.scan_submissions(),
        lambda: storage.scan_documents("session"),
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

    scans: list[tuple[Callable[..., Awaitable[Any]], list[int], str]] = [
        (storage.scan_conversations, [1, a, b], "asc"),
        (lambda **q: storage.scan_entries(1, **q), e, "desc"),
        (storage.scan_tasks, t, "asc"),
        (storage.scan_submissions, s, "asc"),
    ]
    for scan, ids, default in scans:
        for order in ("asc", "desc"):
            expected = sorted(ids, reverse=order == "desc")
            first = await scan(order=order, limit=2)
            assert [x.id for x in first.items] == expected[:2]
            rest = await scan(limit=2, cursor=_roundtrip(first.next))  # order comes from the cursor
            assert [x.id for x in rest.items] == expected[2:] and rest.next is None
            other = "desc" if order == "asc" else "asc"
            await _rejects(scan(order=other, limit=2, cursor=first.next), InvalidCursor, order)
        default_page = await scan(limit=10)
        assert [x.id for x in default_page.items] == sorted(ids, reverse=default == "desc")
    # A cursor belongs to one scan and one set of filters.
    task_page = await storage.scan_tasks(limit=1)
    await _rejects(storage.scan_submissions(cursor=task_page.next), InvalidCursor, "tasks")
    await _rejects(
        storage.scan_tasks(status="pending", cursor=task_page.next), InvalidCursor, "filters"
    )
    await _rejects(storage.scan_tasks(cursor={"after": 1}), InvalidCursor, "cursor")
    await _rejects(storage.scan_tasks(limit=0), ValueError, "limit")
