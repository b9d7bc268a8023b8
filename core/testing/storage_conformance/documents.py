"""Conformance cases for documents: rewindable reconstruction, long tails, copies,
version transitions, logical addresses, and atomic lifecycle failures.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from core.jsonvalue import JsonValue, dumps, loads
from core.records import ConversationRecord, Running
from core.storage.port import (
    DocumentChange,
    DocumentCopy,
    DocumentQuery,
    DocumentRetire,
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
    at4 = await storage.scan_documents(DocumentQuery("conversation", owner_id=1, at=s4))
    at5 = await storage.scan_documents(DocumentQuery("conversation", owner_id=1, at=s5))
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
    # Many owners' documents at one (kind, scope, key), read together, by owner id.
    c2, c2_note, c2_retired = [await storage.mint_id() for _ in range(3)]
    await storage.commit([ConversationRecord(c2), _doc(c2_note, "note", owner_id=c2, value=2)])
    await storage.commit([_doc(c2_retired, "note", owner_id=c2, key="a", value="gone")])
    await storage.commit([DocumentRetire(c2_retired)])
    await storage.commit([DocumentChange(c2_note, 1, value=20)])  # a newer base
    await storage.commit([DocumentChange(c2_note, 1, ops=[["r", 21]])])  # and a delta on it

    async def current(
        kind: str, scope: Any, owners: list[int], key: str | None = None
    ) -> list[tuple[int, JsonValue]]:
        states = await storage.current_documents(kind, scope, owners, key)
        return [(s.record.id, s.value) for s in states]

    assert await current("note", "conversation", [c2, 1, c2, c2 + 9]) == [
        (single, 0),
        (c2_note, 21),
    ]
    [folded] = await storage.current_documents("note", "conversation", [c2])
    assert (folded.version, folded.deltas_since_base) == (1, 1)
    assert await current("note", "conversation", [c2, 1], key="a") == [(fam_a, "a")]
    assert await current("note", "task", [t + 1, t]) == [(task_doc, "t")]
    assert await current("todo", "conversation", [c2]) == []
    assert await current("note", "conversation", []) == []
    conv_docs = await storage.scan_documents(DocumentQuery("conversation", owner_id=1))
    assert [r.id for r in conv_docs.items] == [single, fam_a, fam_proto, fam_ctor, other_kind]
    notes = await storage.scan_documents(
        DocumentQuery("conversation", owner_id=1, kind="note", limit=2)
    )
    assert [r.id for r in notes.items] == [single, fam_a]
    rest = await storage.scan_documents(
        DocumentQuery("conversation", owner_id=1, kind="note", limit=2), _roundtrip(notes.next)
    )
    assert [r.id for r in rest.items] == [fam_proto, fam_ctor] and rest.next is None
    assert [r.id for r in (await storage.scan_documents(DocumentQuery("session"))).items] == [
        session_doc
    ]
    assert [
        r.id for r in (await storage.scan_documents(DocumentQuery("task", owner_id=t))).items
    ] == [task_doc]
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
    assert [x.id for x in (await storage.scan_tasks(TaskQuery(status="pending"))).items] == [t]
    assert (await storage.scan_tasks(TaskQuery(status="running"))).items == []
    before = await storage.submission_by_request(1, "before")
    assert before is not None and before.id == s
    assert await storage.submission_by_request(1, "after") is None
    assert (await storage.scan_submissions(SubmissionQuery(status="placed"))).items == []
    assert await storage.entry(e) is None
    found = await storage.find_document("test.doc", "conversation", 1)
    assert found is not None and found.id == d
    assert await storage.document(clash) is None
    assert await storage.commit([_entry(e)]) > seq
