"""The Clock port: the only way the core learns the time or waits for it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

__all__ = ["Clock", "TimerHandle"]


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    """Epoch milliseconds and timers.

    ``now()`` is the time durable deadlines (``waiting{until}``) are compared with.
    ``call_at(when, callback)`` calls ``callback`` on the running event loop once
    ``now() >= when`` (a little later is fine; never earlier is not required: callers
    recheck ``now()``), unless the handle is cancelled first. Callbacks must be cheap
    and must not raise.
    """

    def now(self) -> int: ...

    def call_at(self, when: int, callback: Callable[[], None]) -> TimerHandle: ...
