"""The storage conformance kit, case by case, against every adapter."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.testing.storage_conformance import StorageCase, storage_cases
from tests.core.storage.adapters import PROVIDERS

CASES = storage_cases()


def test_the_kit_covers_the_24_reference_cases() -> None:
    assert len(CASES) == 24
    assert len({c.name for c in CASES}) == 24


@pytest.mark.parametrize("adapter", sorted(PROVIDERS))
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_conformance(case: StorageCase, adapter: str, tmp_path: Path) -> None:
    async with PROVIDERS[adapter](tmp_path) as storage:
        await case.run(storage)
