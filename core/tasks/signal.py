"""CancelSignal: how an invocation learns that it should stop (abort or close)."""

from __future__ import annotations

import asyncio

__all__ = ["CancelSignal"]


class CancelSignal:
    """Set once, with a reason; observable by polling or awaiting."""

    __slots__ = ("_event", "reason")

    def __init__(self) -> None:
        # Made by the first ``wait``: every invocation has a signal, few ever await it.
        self._event: asyncio.Event | None = None
        self.reason: str | None = None

    @property
    def cancelled(self) -> bool:
        return self.reason is not None

    def set(self, reason: str) -> None:
        if self.reason is not None:
            return
        self.reason = reason
        if self._event is not None:
            self._event.set()

    async def wait(self) -> str:
        if self.reason is None:
            if self._event is None:
                self._event = asyncio.Event()
            await self._event.wait()
        assert self.reason is not None
        return self.reason
