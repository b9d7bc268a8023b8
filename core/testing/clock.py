"""VirtualClock: deterministic time for tests."""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

__all__ = ["VirtualClock"]


def _nothing() -> None:
    pass


@dataclass(order=True)
class _Timer:
    when: int
    order: int
    callback: Callable[[], None] = field(compare=False)
    cancelled: bool = field(default=False, compare=False)
    clock: VirtualClock | None = field(default=None, compare=False, repr=False)

    def cancel(self) -> None:
        if self.cancelled:
            return
        self.cancelled = True
        # Let go of the callback (and what it holds) now: time may never reach ``when``.
        self.callback = _nothing
        if self.clock is not None:
            self.clock._cancelled_one()


class VirtualClock:
    """A :class:`core.clock.Clock` that only moves when told to.

    ``advance(ms)`` moves time forward and fires, synchronously and in deadline order,
    every timer that became due. Nothing fires on its own, so a test decides exactly
    when a durable wait may end.
    """

    def __init__(self, start: int = 1_700_000_000_000) -> None:
        self._now = start
        self._timers: list[_Timer] = []
        self._order = 0
        self._cancelled = 0  # cancelled timers still in the heap

    def now(self) -> int:
        return self._now

    def call_at(self, when: int, callback: Callable[[], None]) -> _Timer:
        self._order += 1
        timer = _Timer(int(when), self._order, callback, clock=self)
        heapq.heappush(self._timers, timer)
        return timer

    def _cancelled_one(self) -> None:
        # Like asyncio's loop: once most of the heap is cancelled timers, rebuild it, so a
        # clock that is never advanced does not keep every timer ever set.
        self._cancelled += 1
        if self._cancelled > 64 and self._cancelled * 2 > len(self._timers):
            self._timers = [t for t in self._timers if not t.cancelled]
            heapq.heapify(self._timers)
            self._cancelled = 0

    def advance(self, ms: int) -> int:
        """Move time forward by ``ms`` and fire due timers; return how many fired."""
        if ms < 0:
            raise ValueError("time does not go backwards")
        return self.set(self._now + ms)

    def set(self, now: int) -> int:
        if now < self._now:
            raise ValueError("time does not go backwards")
        self._now = now
        fired = 0
        while self._timers and self._timers[0].when <= now:
            timer = heapq.heappop(self._timers)
            timer.clock = None  # out of the heap: a late cancel() counts nothing
            if timer.cancelled:
                self._cancelled -= 1
            else:
                fired += 1
                timer.callback()
        return fired

    @property
    def next_timer(self) -> int | None:
        """The deadline of the earliest pending timer."""
        while self._timers and self._timers[0].cancelled:
            heapq.heappop(self._timers).clock = None
            self._cancelled -= 1
        return self._timers[0].when if self._timers else None


if TYPE_CHECKING:  # mypy proves the adapter satisfies its port
    from core.clock import Clock

    def _conforms(adapter: VirtualClock) -> Clock:
        return adapter
