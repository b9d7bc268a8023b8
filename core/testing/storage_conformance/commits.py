"""Conformance cases for commits: the reserved root conversation, atomic
mixed-table commits and their rollback, and detached (copied) records and writes.
"""

from __future__ import annotations

from dataclasses import replace

from core.jsonvalue import JsonObject
from core.records import ConversationRecord, Running
from core.storage.port import EntryQuery, Storage
from core.testing.storage_conformance.kit import (
    StorageCase,
    _doc,
    _entry,
    _rejects,
    _root,
    _sub,
    _task,
    registrar,
)

__all__ = ["CASES"]

CASES: list[StorageCase] = []
"""The cases of this module, in definition order."""
_case = registrar(CASES)

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
    # 3 unless the storage was reopened in between: a reopen may skip ids (an adapter may
    # store its counters as bounds), never go back below a committed one.
    assert await storage.mint_id() >= 3


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
    page = await storage.scan_entries(EntryQuery(conv))
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
