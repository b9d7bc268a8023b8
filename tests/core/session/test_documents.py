"""Documents in the session: get-or-create, base/delta revisions, versions, scopes."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from pydantic import BaseModel

from core.errors import DocumentError, InvalidJson, UnknownRecord
from core.jsonvalue import JsonValue
from core.records import Completed, Terminal
from core.session import CommitEvent, DocDefinition, DocHandle, Session, Tx, define_doc
from core.storage import EntryQuery, MemoryState, MemoryStorage
from core.tasks import define_task
from core.tasks.creation import TaskFactory
from core.testing.clock import VirtualClock


async def _noop(task: object, rt: object) -> None:
    return None


NOOP = define_task("test.noop", phases={"start": _noop})
NOTES = define_doc("test.notes", initial=lambda: {"items": []}, history="rewindable")


async def open_session(state: MemoryState) -> Session:
    session = await Session.open(MemoryStorage(state), VirtualClock())
    session.task_layer = TaskFactory({NOOP.name: NOOP}.get)
    await session.commit(lambda tx: tx.ensure_root())
    return session


def append(item: JsonValue, definition=NOTES):  # type: ignore[no-untyped-def]
    async def change(tx: Tx) -> DocHandle:
        doc = await tx.doc(definition, 1)
        doc.value["items"].append(item)  # type: ignore[call-overload,index,union-attr]
        return doc

    return change


async def test_first_access_creates_a_base_and_later_changes_are_deltas() -> None:
    state = MemoryState()
    session = await open_session(state)
    events: list[CommitEvent] = []
    session.subscribe(events.append)
    handle = await session.commit(append("a"))
    await session.commit(append("b"))
    stored = await session.storage.document(handle.id)
    assert stored is not None and stored.value == {"items": ["a", "b"]}
    assert stored.deltas_since_base == 1
    assert [d.ops for e in events for d in e.documents] == [
        None,
        [["p", ["items"], 1, 0, ["b"]]],
    ]
    assert events[0].documents[0].created


async def test_an_unchanged_document_writes_nothing() -> None:
    session = await open_session(MemoryState())
    await session.commit(append("a"))
    seq = session.last_seq

    async def touch(tx: Tx) -> None:
        doc = await tx.doc(NOTES, 1)
        doc.value = {"items": ["a"]}  # equal value, new object

    await session.commit(touch)
    assert session.last_seq == seq


async def test_checkpoint_when_decides_bases_with_the_delta_count() -> None:
    calls: list[int] = []

    def every_third(value: JsonValue, ops: list[JsonValue], deltas: int) -> bool:
        calls.append(deltas)
        return deltas >= 2

    counter = define_doc("test.counter", initial=lambda: 0, checkpoint_when=every_third)
    state = MemoryState()
    session = await open_session(state)
    kinds = []
    session.subscribe(
        lambda e: kinds.extend("base" if d.ops is None else "delta" for d in e.documents)
    )

    async def bump(tx: Tx) -> None:
        doc = await tx.doc(counter, 1)
        doc.value = int(doc.value) + 1  # type: ignore[arg-type]

    for _ in range(7):
        await session.commit(bump)
    assert kinds == ["base", "delta", "delta", "base", "delta", "delta", "base"]
    assert calls == [0, 1, 2, 0, 1, 2]
    # The count survives a reopen: deltas since base come from storage.
    await session.close()
    again = await open_session(state)
    for _ in range(2):
        await again.commit(bump)
    state_now = await again.storage.find_document("test.counter", "conversation", 1)
    assert state_now is not None
    value = await again.storage.document(state_now.id)
    assert value is not None and value.value == 9 and value.deltas_since_base == 2


async def test_a_document_left_at_its_initial_value_is_not_created() -> None:
    """Every reader of a missing document gets its initial value, so a commit that opens
    one where none exists and leaves it there stores nothing for it. It keeps the id it
    was given until a commit changes it, which creates it under that id."""
    state = MemoryState()
    session = await open_session(state)
    quiet = define_doc("test.quiet", initial=lambda: {"items": []})
    events: list[CommitEvent] = []
    session.subscribe(events.append)
    seq = session.last_seq

    async def look(tx: Tx) -> int:
        return (await tx.doc(quiet, 1)).id

    doc_id = await session.commit(look)
    assert session.last_seq == seq and events == []  # nothing else staged: no commit
    assert await session.storage.find_document("test.quiet", "conversation", 1) is None
    assert await session.document_value(quiet, 1) == {"items": []}

    async def look_and_write(tx: Tx) -> int:
        await tx.append_entry(1, "custom")
        return (await tx.doc(quiet, 1)).id

    assert await session.commit(look_and_write) == doc_id  # not a new id per commit
    assert session.last_seq != seq and [d for e in events for d in e.documents] == []
    assert await session.storage.find_document("test.quiet", "conversation", 1) is None

    created = await session.commit(append("a", quiet))
    assert created.id == doc_id and events[-1].documents[0].created
    await session.commit(append("b", quiet))
    await session.close()
    session = await open_session(state)  # a new process reads what was stored
    assert await session.document_value(quiet, 1) == {"items": ["a", "b"]}
    record = await session.storage.find_document("test.quiet", "conversation", 1)
    assert record is not None and record.id == doc_id

    # A rewindable document is created at its initial value all the same: a read as of
    # an earlier commit tells "no incarnation yet" from "initial".
    await session.commit(lambda tx: tx.doc(NOTES, 1))
    assert await session.storage.find_document("test.notes", "conversation", 1) is not None
    # Equal to the initial value in Python but not as JSON (``False`` is not ``0``).
    zero = define_doc("test.zero", initial=lambda: {"n": 0})
    await session.commit(create(zero, {"n": False}))
    assert await session.document_value(zero, 1) == {"n": False}
    assert await session.storage.find_document("test.zero", "conversation", 1) is not None


async def test_a_task_document_left_initial_is_neither_created_nor_retired() -> None:
    scratch = define_doc("test.untouched", scope="task", initial=lambda: {"n": 0})
    state = MemoryState()
    session = await open_session(state)
    task = await session.commit(lambda tx: tx.create_task(NOOP))
    await session.commit(lambda tx: tx.doc(scratch, task.id))
    assert await session.storage.find_document("test.untouched", "task", task.id) is None
    events: list[CommitEvent] = []
    session.subscribe(events.append)

    async def end(tx: Tx) -> None:
        await tx.doc(scratch, task.id)
        await tx.put_task(replace(task, state=Terminal(Completed(None))))

    await session.commit(end)
    assert [d for e in events for d in e.documents] == []
    assert await session.storage.find_document("test.untouched", "task", task.id) is None


def create(definition: DocDefinition[Any], value: JsonValue):  # type: ignore[no-untyped-def]
    """A commit that creates ``definition``'s document of conversation 1 at ``value`` (a
    document only touched at its initial value is not created)."""

    async def make(tx: Tx) -> None:
        (await tx.doc(definition, 1)).value = value

    return make


async def test_a_throwing_base_decision_rolls_back_every_change_of_the_commit() -> None:
    def broken(value: JsonValue, ops: list[JsonValue], deltas: int) -> bool:
        raise RuntimeError("no decision")

    bad = define_doc("test.bad", initial=lambda: 0, checkpoint_when=broken)
    session = await open_session(MemoryState())
    await session.commit(create(bad, 5))  # creation is always a base

    async def change(tx: Tx) -> None:
        await tx.append_entry(1, "custom")
        doc = await tx.doc(bad, 1)
        doc.value = 1

    seq = session.last_seq
    with pytest.raises(RuntimeError):
        await session.commit(change)
    assert session.last_seq == seq
    assert (await session.storage.scan_entries(EntryQuery(1))).items == []


async def test_version_changes_migrate_lazily_and_store_a_base() -> None:
    state = MemoryState()
    session = await open_session(state)
    v1 = define_doc("test.shape", initial=lambda: {"n": 0})
    await session.commit(create(v1, {"n": 1}))
    await session.close()

    def migrate(value: JsonValue, from_version: int) -> JsonValue:
        assert from_version == 1
        return {"count": value["n"], "shape": 2}  # type: ignore[call-overload,index]

    v2 = define_doc("test.shape", version=2, initial=lambda: {"count": 0}, migrate=migrate)
    session = await open_session(state)
    # Read-only access migrates in memory and writes nothing.
    seq = session.last_seq
    assert await session.document_value(v2, 1) == {"count": 1, "shape": 2}
    assert session.last_seq == seq
    events: list[CommitEvent] = []
    session.subscribe(events.append)

    async def touch(tx: Tx) -> None:
        await tx.doc(v2, 1)

    await session.commit(touch)
    (event,) = [d for e in events for d in e.documents]
    assert event.ops is None and event.version == 2
    rec = await session.storage.find_document("test.shape", "conversation", 1)
    assert rec is not None
    stored = await session.storage.document(rec.id)
    assert stored is not None and (stored.version, stored.value) == (2, {"count": 1, "shape": 2})
    # An older definition cannot read what a newer one wrote.
    with pytest.raises(DocumentError, match="newer"):
        await session.commit(lambda tx: tx.doc(v1, 1))


async def test_missing_migrations_and_mismatched_definitions_are_refused() -> None:
    session = await open_session(MemoryState())
    v1 = define_doc("test.mig", initial=lambda: 1)
    await session.commit(create(v1, 2))
    v2 = define_doc("test.mig", version=2, initial=lambda: 1)
    with pytest.raises(DocumentError, match="no migration"):
        await session.commit(lambda tx: tx.doc(v2, 1))
    other_history = define_doc("test.mig", history="rewindable", initial=lambda: 1)
    with pytest.raises(DocumentError, match="stored as"):
        await session.commit(lambda tx: tx.doc(other_history, 1))


async def test_scopes_need_the_right_owner() -> None:
    session = await open_session(MemoryState())
    session_doc = define_doc("test.s", scope="session", initial=lambda: 0)
    task_doc = define_doc("test.t", scope="task", initial=lambda: 0)
    with pytest.raises(DocumentError):
        await session.commit(lambda tx: tx.doc(session_doc, 1))
    with pytest.raises(UnknownRecord):
        await session.commit(lambda tx: tx.doc(NOTES, 999))
    with pytest.raises(DocumentError, match="live task"):
        await session.commit(lambda tx: tx.doc(task_doc, 999))
    await session.commit(lambda tx: tx.doc(session_doc))
    assert await session.document_value(session_doc) == 0


async def test_task_documents_are_retired_in_the_commit_that_ends_the_task() -> None:
    task_doc = define_doc("test.scratch", scope="task", initial=lambda: {"n": 0})
    state = MemoryState()
    session = await open_session(state)
    task = await session.commit(lambda tx: tx.create_task(NOOP))

    async def use(tx: Tx) -> int:
        doc = await tx.doc(task_doc, task.id)
        doc.value = {"n": 1}
        return doc.id

    doc_id = await session.commit(use)
    await session.close()
    session = await open_session(state)  # the task's document set must come from storage

    async def finish(tx: Tx) -> None:
        await tx.put_task(replace(task, state=Terminal(Completed(None))))

    events: list[CommitEvent] = []
    session.subscribe(events.append)
    await session.commit(finish)
    assert await session.storage.document(doc_id) is None
    assert [d.retired for e in events for d in e.documents] == [True]
    assert events[0].tasks[0].status == "terminal"


async def test_retire_and_recreate_starts_a_new_incarnation() -> None:
    session = await open_session(MemoryState())
    first = await session.commit(append("x"))

    async def retire(tx: Tx) -> None:
        (await tx.doc(NOTES, 1)).retire()

    await session.commit(retire)
    second = await session.commit(append("y"))
    assert second.id != first.id
    assert await session.document_value(NOTES, 1) == {"items": ["y"]}
    old = await session.storage.document(first.id, first.record.created_at or 2)
    assert old is not None


class Todo(BaseModel):
    title: str
    done: bool = False


class TodoList(BaseModel):
    items: list[Todo] = []


async def test_typed_documents_validate_against_their_model() -> None:
    todos = define_doc("test.todos", model=TodoList)
    session = await open_session(MemoryState())

    async def add(tx: Tx) -> None:
        doc = await tx.doc(todos, 1)
        doc.value["items"].append({"title": "write tests"})  # type: ignore[call-overload,index,union-attr]

    await session.commit(add)
    assert await session.document_value(todos, 1) == {
        "items": [{"title": "write tests", "done": False}]
    }

    async def bad(tx: Tx) -> None:
        doc = await tx.doc(todos, 1)
        doc.value["items"].append({"done": "maybe"})  # type: ignore[call-overload,index,union-attr]

    seq = session.last_seq
    with pytest.raises(DocumentError, match="fails its model"):
        await session.commit(bad)
    assert session.last_seq == seq


async def test_document_values_must_be_json() -> None:
    session = await open_session(MemoryState())

    async def bad(tx: Tx) -> None:
        doc = await tx.doc(NOTES, 1)
        doc.value = {"items": [float("nan")]}

    with pytest.raises(InvalidJson):
        await session.commit(bad)


async def test_handles_are_private_copies() -> None:
    session = await open_session(MemoryState())
    await session.commit(append("a"))
    leaked: list[DocHandle] = []

    async def peek(tx: Tx) -> None:
        doc = await tx.doc(NOTES, 1)
        leaked.append(doc)
        raise RuntimeError("abandon")

    with pytest.raises(RuntimeError):
        await session.commit(peek)
    leaked[0].value["items"].append("mutated")  # type: ignore[call-overload,index,union-attr]
    assert await session.document_value(NOTES, 1) == {"items": ["a"]}


async def test_a_committed_value_is_detached_from_the_handle_that_wrote_it() -> None:
    # The commit admits only what changed and shares the rest with the committed value:
    # nothing a caller kept (the handle, its value, parts of it) reaches committed state.
    session = await open_session(MemoryState())

    async def start(tx: Tx) -> None:
        (await tx.doc(NOTES, 1)).value = {"items": [{"n": 1}], "meta": {"tags": ["a"]}}

    await session.commit(start)
    kept: list[DocHandle] = []

    async def change(tx: Tx) -> None:
        doc = await tx.doc(NOTES, 1)
        doc.value["items"].append({"n": 2})  # type: ignore[call-overload,index,union-attr]
        kept.append(doc)

    events: list[CommitEvent] = []
    session.subscribe(events.append)
    await session.commit(change)
    handle = kept[0]
    committed = {"items": [{"n": 1}, {"n": 2}], "meta": {"tags": ["a"]}}
    value = handle.value
    value["items"][0]["n"] = "x"  # type: ignore[call-overload,index]
    value["items"][1]["n"] = "y"  # type: ignore[call-overload,index]
    value["meta"]["tags"].append("b")  # type: ignore[call-overload,index]
    assert await session.document_value(NOTES, 1) == committed
    assert events[0].documents[0].value == committed

    async def read(tx: Tx) -> JsonValue:
        return (await tx.doc(NOTES, 1)).value

    assert await session.commit(read) == committed
    stored = await session.storage.document(handle.id)
    assert stored is not None and stored.value == committed
