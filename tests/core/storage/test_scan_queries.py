"""Scans take one frozen query record (``TaskQuery`` and its siblings) and a cursor, on
every adapter the conformance kit runs against (the kit itself stays the 24 reference
cases): ``scan_all`` walks a record's pages, and a cursor is bound to the record's filters.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from core.errors import InvalidCursor
from core.records import ConversationRecord, Entry, Pending, Task
from core.storage import EntryQuery, TaskQuery, scan_all
from tests.core.storage.adapters import PROVIDERS


@pytest.mark.parametrize("adapter", sorted(PROVIDERS))
async def test_scan_all_walks_every_page_of_one_query_record(adapter: str, tmp_path: Path) -> None:
    async with PROVIDERS[adapter](tmp_path) as storage:
        await storage.commit([ConversationRecord(1)])
        ids = [await storage.mint_id() for _ in range(5)]
        entries = [await storage.mint_id() for _ in range(5)]
        await storage.commit(
            [
                *(Task(i, 1, "test.task", 1, None, Pending({"phase": "start"})) for i in ids),
                *(Entry(id=e, conversation_id=1, kind="custom") for e in entries),
            ]
        )
        query = TaskQuery(status="pending", order="desc", limit=2)
        assert [t.id async for t in scan_all(storage.scan_tasks, query)] == ids[::-1]
        tail = EntryQuery(1, min_id=entries[1], order="asc", limit=2)
        assert [e.id async for e in scan_all(storage.scan_entries, tail)] == entries[1:]

        # An equal record continues a page (its order comes from the cursor); a record
        # with other filters is refused the cursor.
        first = await storage.scan_tasks(query)
        cursor = json.loads(json.dumps(first.next))
        again = await storage.scan_tasks(TaskQuery(status="pending", limit=2), cursor)
        assert [t.id for t in again.items] == ids[::-1][2:4]
        other = dataclasses.replace(query, kind="other.task")
        with pytest.raises(InvalidCursor, match="filters"):
            await storage.scan_tasks(other, cursor)


def test_a_query_record_is_frozen_and_states_the_filters_its_cursors_carry() -> None:
    query = TaskQuery(conversation_id=7, background=True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        query.limit = 5  # type: ignore[misc]
    assert query.filters() == {
        "conversation_id": 7,
        "kind": None,
        "status": None,
        "abort_requested": None,
        "background": True,
    }
    assert query == TaskQuery(conversation_id=7, background=True)
