"""An id minted before a commit is never minted again, on every adapter the conformance
kit runs against (the kit itself stays the 24 reference cases), across the reopening
adapters' reopen after each commit too: a generation's checkpoint names the tasks it
kept in memory, whose ids no record holds (docs/design.md, "Tasks kept in memory").
``tests/core/storage/test_sqlite.py`` checks the same across a crash (no close)."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.records import ConversationRecord, Pending, Task
from tests.core.storage.adapters import PROVIDERS


@pytest.mark.parametrize("adapter", sorted(PROVIDERS))
async def test_an_id_minted_before_a_commit_is_never_minted_again(
    adapter: str, tmp_path: Path
) -> None:
    async with PROVIDERS[adapter](tmp_path) as storage:
        await storage.commit([ConversationRecord(1)])
        named = [await storage.mint_id() for _ in range(3)]
        await storage.commit([Task(named[0], 1, "t", 1, None, Pending({"phase": "go"}))])
        assert await storage.mint_id() > named[-1]
