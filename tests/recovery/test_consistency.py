"""The consistency checker finds what it promises to find: each check is shown failing on
a store broken on purpose (committed straight to storage, or edited with raw SQL), and
passing on the same store before it was broken."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from core.jsonvalue import JsonObject
from core.records import Completed, Entry, SubmissionRecord, Task, Terminal, Waiting
from core.session.session import CommitEvent
from core.storage import EntryQuery, Storage, SubmissionQuery, TaskQuery
from core.storage.port import DocumentChange
from core.testing.consistency import SettlementLog, check_consistency
from runtimes.actor.sqlite import Sqlite3Database
from tests.recovery.support import MODEL, World


async def _settled_world(tmp_path: Path, backend: str = "memory") -> tuple[World, Storage]:
    world = World(tmp_path, backend)  # type: ignore[arg-type]
    h = await world.open()
    root = await h.root(agent={"model": MODEL})
    world.call("quick")
    await (await root.submit("go")).wait()
    await world.settle()
    await world.close()
    storage = await world.storage()
    assert await check_consistency(storage, settled=True) == []
    return world, storage


async def _one(storage: Storage, kind: str) -> Entry:
    entries = (await storage.scan_entries(EntryQuery(1, order="asc", limit=100))).items
    return next(e for e in entries if e.kind == kind)


async def test_a_second_result_for_one_call_is_found(tmp_path: Path) -> None:
    _, storage = await _settled_world(tmp_path)
    result = await _one(storage, "tool_result")
    await storage.commit(
        [
            Entry(
                await storage.mint_id(),
                1,
                "tool_result",
                result.message,
                result.data,
                by_task_id=result.by_task_id,
            )
        ]
    )
    problems = await check_consistency(storage)
    assert any("has results" in p for p in problems), problems
    await storage.close()


@pytest.mark.parametrize("stored", [True, False])
async def test_a_call_without_its_result_is_found_once_settled(
    tmp_path: Path, stored: bool
) -> None:
    """``stored``: the call's tool task was written (ended without its result); else it
    was kept in memory (a round whose calls started at their intent) and only the
    completed generation vouches that the call ran."""
    _, storage = await _settled_world(tmp_path)
    assistant = await _one(storage, "assistant")
    gen = next(
        t
        for t in (await storage.scan_tasks(TaskQuery(limit=100))).items
        if t.kind == "perdure.generation"
    )
    assert isinstance(gen.outcome, Completed)
    # Another call of the generation that never got its result.
    message: JsonObject = dict(assistant.message)  # type: ignore[arg-type]
    entry_id = await storage.mint_id()
    tool = Task(
        await storage.mint_id(),
        1,
        "perdure.tool",
        1,
        {"assistant": entry_id, "call_id": "c9"},
        Terminal(Completed()),
        owner=gen.id,
    )
    await storage.commit(
        [
            *([tool] if stored else []),
            Entry(
                entry_id,
                1,
                "assistant",
                {
                    **message,
                    "content": [
                        {"type": "tool_call", "id": "c9", "name": "quick", "arguments": {}}
                    ],
                },
                by_task_id=gen.id,
            ),
        ]
    )
    assert await check_consistency(storage) == []  # only a settled store must have it
    problems = await check_consistency(storage, settled=True)
    assert any("has no result entry" in p or "answer no call" in p for p in problems), problems
    await storage.close()


async def test_an_unsettled_input_and_a_live_task_are_found_once_settled(tmp_path: Path) -> None:
    _, storage = await _settled_world(tmp_path)
    sub = (await storage.scan_submissions(SubmissionQuery(limit=10))).items[0]
    task = next(
        t for t in (await storage.scan_tasks(TaskQuery(limit=100))).items if t.owner is None
    )
    await storage.commit(
        [
            SubmissionRecord(sub.id, 1, "input", "queued", created_at=sub.created_at),
            task.evolve(state=Waiting({"phase": "x"}, until=None)),
        ]
    )
    assert await check_consistency(storage, settled=False) != []  # queued but in no inbox
    problems = await check_consistency(storage, settled=True)
    assert any("is not settled" in p for p in problems), problems
    assert any("when settled" in p for p in problems), problems
    await storage.close()


async def test_leftover_live_state_is_found_once_settled(tmp_path: Path) -> None:
    _, storage = await _settled_world(tmp_path)
    live = await storage.find_document("live", "conversation", 1)
    assert live is not None
    state = await storage.document(live.id)
    assert state is not None
    await storage.commit([DocumentChange(live.id, state.version, value={"tools": {"c0": {}}})])
    problems = await check_consistency(storage, settled=True)
    assert any("live keeps ['tools']" in p for p in problems), problems
    await storage.close()


async def test_sqlite_cross_table_damage_is_found(tmp_path: Path) -> None:
    world, storage = await _settled_world(tmp_path, "sqlite")
    await storage.close()
    db = Sqlite3Database.open(world.path)
    assert await check_consistency(await world.storage(), db=db) == []
    await db.close()
    conn = sqlite3.connect(world.path, isolation_level=None)
    entry_id = conn.execute("SELECT max(id) FROM entries").fetchone()[0]
    # The entry's id owned twice: a conversation row takes it too.
    conn.execute(
        "INSERT INTO conversations (id, record) VALUES (?, ?)", (entry_id, f'{{"id":{entry_id}}}')
    )
    conn.execute(  # a stray chunk for a record stored inline
        "INSERT INTO record_parts (tbl, key, part, data) VALUES ('tasks', ("
        "SELECT CAST(min(id) AS TEXT) FROM tasks), 0, '{}')"
    )
    conn.close()
    db = Sqlite3Database.open(world.path)
    storage = await world.storage()
    problems = await check_consistency(storage, db=db)
    assert any("not owned as entry" in p for p in problems), problems
    assert any("disagree with their parts" in p for p in problems), problems
    await storage.close()
    await db.close()


def test_the_settlement_log_sees_a_second_settlement() -> None:
    log = SettlementLog()
    log.on_commit(CommitEvent(1, submissions=[SubmissionRecord(5, 1, "input", "placed", entry=6)]))
    log.on_commit(CommitEvent(2, submissions=[SubmissionRecord(5, 1, "input", "done", answer=7)]))
    assert log.problems == []
    log.on_commit(
        CommitEvent(
            3, submissions=[SubmissionRecord(5, 1, "input", "unanswered", reason="aborted")]
        )
    )
    assert log.problems and "rewritten after it settled" in log.problems[0]
