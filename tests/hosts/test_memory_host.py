"""The host scenario kit on the in-memory host."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from runtimes.actor.testing import HOST_CHECKS, KitTarget, MemoryTarget


@pytest.mark.parametrize("check", HOST_CHECKS, ids=lambda c: c.__name__)
async def test_memory_host(check: Callable[[KitTarget], Awaitable[None]]) -> None:
    await check(MemoryTarget())
