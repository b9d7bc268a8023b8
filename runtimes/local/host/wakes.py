"""The in-process timer heap: when each evicted actor must be woken again."""

from __future__ import annotations

import heapq
from collections.abc import Callable

from core.clock import Clock, TimerHandle

__all__ = ["WakeHeap"]


class WakeHeap:
    """Earliest-first wake times of actors that are not open, behind a single clock timer.

    ``set(actor, when)`` replaces the actor's wake; ``discard(actor)`` forgets it. When the
    clock reaches an actor's time, ``fire(actor)`` is called once (on the event loop, from
    the clock's timer: it must be cheap and must not raise) and the entry is dropped; the
    host re-arms it from ``next_wake()`` at the next eviction. Firing is only a hint: the
    durable deadline lives in the actor's storage, and opening an actor and calling
    ``resume()`` is idempotent, so an early, late or duplicate fire is harmless.

    Replaced entries stay in the heap and are skipped when they surface (lazy deletion),
    so ``set`` and ``discard`` are O(log n) / O(1).
    """

    def __init__(self, clock: Clock, fire: Callable[[str], None]) -> None:
        self._clock = clock
        self._fire = fire
        self._heap: list[tuple[int, str]] = []
        self._due: dict[str, int] = {}
        self._timer: TimerHandle | None = None
        self._timer_at: int | None = None
        self._closed = False

    def set(self, actor: str, when: int) -> None:
        if self._closed:
            return
        self._due[actor] = when
        heapq.heappush(self._heap, (when, actor))
        self._arm()

    def discard(self, actor: str) -> None:
        self._due.pop(actor, None)  # its heap entry is skipped when it surfaces

    def pending(self) -> dict[str, int]:
        """A snapshot: actor → wake time (epoch ms)."""
        return dict(self._due)

    def __len__(self) -> int:
        return len(self._due)

    def close(self) -> None:
        """Forget everything and cancel the timer (the deadlines stay in storage)."""
        self._closed = True
        self._cancel()
        self._heap.clear()
        self._due.clear()

    def _arm(self) -> None:
        self._drop_stale()
        if not self._heap:
            self._cancel()
            return
        when = self._heap[0][0]
        if self._timer is not None and self._timer_at == when:
            return
        self._cancel()
        self._timer_at = when
        self._timer = self._clock.call_at(when, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = self._timer_at = None
        if self._closed:
            return
        now = self._clock.now()
        due: list[str] = []
        while self._heap and self._heap[0][0] <= now:
            when, actor = heapq.heappop(self._heap)
            if self._due.get(actor) == when:
                del self._due[actor]
                due.append(actor)
        self._arm()
        for actor in due:
            self._fire(actor)

    def _drop_stale(self) -> None:
        heap = self._heap
        while heap and self._due.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._timer_at = None
