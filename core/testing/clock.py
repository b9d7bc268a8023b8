"""VirtualClock: deterministic time for tests."""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

__all__ = ["VirtualClock"]


@dataclass(order=True)
class _Timer:
    when: int
    order: int
    callback: Callable[[], None] = field(compare=False)
    cancelled: bool = field(default=False, compare=False)

    def cancel(self) -> None:
        self.cancelled = True


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

    def now(self) -> int:
        return self._now

    def call_at(self, when: int, callback: Callable[[], None]) -> _Timer:
        self._order += 1
        timer = _Timer(int(when), self._order, callback)
        heapq.heappush(self._timers, timer)
        return timer

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
            if not timer.cancelled:
                fired += 1
                timer.callback()
        return fired

    @property
    def next_timer(self) -> int | None:
        """The deadline of the earliest pending timer."""
        while self._timers and self._timers[0].cancelled:
            heapq.heappop(self._timers)
        return self._timers[0].when if self._timers else None


if TYPE_CHECKING:  # mypy proves the adapter satisfies its port
    from core.clock import Clock

    def _conforms(adapter: VirtualClock) -> Clock:
        return adapter
