"""``Storage.conversations(ids)``, the batched read a session's open uses, on every
adapter the conformance kit runs against (the kit itself stays the 24 reference cases)."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.records import ConversationOwner, ConversationRecord, Entry, Pending, Task
from tests.core.storage.adapters import PROVIDERS


@pytest.mark.parametrize("adapter", sorted(PROVIDERS))
async def test_reads_many_conversations_at_once_leaving_out_unknown_ids(
    adapter: str, tmp_path: Path
) -> None:
    async with PROVIDERS[adapter](tmp_path) as storage:
        await storage.commit([ConversationRecord(1)])
        t = await storage.mint_id()
        await storage.commit([Task(t, 1, "test.task", 1, None, Pending({"phase": "start"}))])
        convs = []
        for n in range(150):  # more ids than one SQL statement takes
            c = await storage.mint_id()
            convs.append(ConversationRecord(c, owner=ConversationOwner(1, t) if n % 2 else None))
        await storage.commit(convs)
        e = await storage.mint_id()
        await storage.commit([Entry(id=e, conversation_id=1, kind="custom")])
        unknown = await storage.mint_id()
        # Any order, duplicates, a task's, an entry's and an unminted id among them.
        wanted = [c.id for c in reversed(convs)] + [convs[0].id, t, e, unknown, 1]
        assert await storage.conversations(wanted) == [ConversationRecord(1), *convs]
        assert await storage.conversations([]) == []
        assert await storage.conversations([t, e, unknown]) == []
