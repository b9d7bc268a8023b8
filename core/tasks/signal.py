"""CancelSignal: how an invocation learns that it should stop (abort or close)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

__all__ = ["CancelSignal"]


class CancelSignal:
    """Set once, with a reason; observable by polling, awaiting or callback."""

    __slots__ = ("_callbacks", "_event", "reason")

    def __init__(self) -> None:
        # Made by the first ``wait``: every invocation has a signal, few ever await it.
        self._event: asyncio.Event | None = None
        self.reason: str | None = None
        self._callbacks: list[Callable[[str], None]] = []

    @property
    def cancelled(self) -> bool:
        return self.reason is not None

    def set(self, reason: str) -> None:
        if self.reason is not None:
            return
        self.reason = reason
        if self._event is not None:
            self._event.set()
        for cb in self._callbacks:
            cb(reason)

    async def wait(self) -> str:
        if self.reason is None:
            if self._event is None:
                self._event = asyncio.Event()
            await self._event.wait()
        assert self.reason is not None
        return self.reason

    def add_callback(self, callback: Callable[[str], None]) -> None:
        if self.reason is not None:
            callback(self.reason)
        else:
            self._callbacks.append(callback)
