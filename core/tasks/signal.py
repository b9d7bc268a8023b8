"""CancelSignal: how an invocation learns that it should stop (abort or close)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

__all__ = ["CancelSignal"]


class CancelSignal:
    """Set once, with a reason; observable by polling, awaiting or callback."""

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self.reason: str | None = None
        self._callbacks: list[Callable[[str], None]] = []

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def set(self, reason: str) -> None:
        if self._event.is_set():
            return
        self.reason = reason
        self._event.set()
        for cb in self._callbacks:
            cb(reason)

    async def wait(self) -> str:
        await self._event.wait()
        assert self.reason is not None
        return self.reason

    def add_callback(self, callback: Callable[[str], None]) -> None:
        if self.reason is not None:
            callback(self.reason)
        else:
            self._callbacks.append(callback)
