"""The Clock port: the only way the core learns the time or waits for it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

__all__ = ["Clock", "TimerHandle"]


class TimerHandle(Protocol):
    """A timer set by :meth:`Clock.call_at`."""

    def cancel(self) -> None:
        """Stop the callback from being called. Idempotent; harmless after it ran."""
        ...


class Clock(Protocol):
    """Epoch milliseconds and timers.

    ``now()`` is the time durable deadlines (``waiting{until}``) are compared with.
    ``call_at(when, callback)`` calls ``callback`` on the running event loop once
    ``now() >= when`` (a little later is fine; never earlier is not required: callers
    recheck ``now()``), unless the handle is cancelled first. Callbacks must be cheap
    and must not raise.
    """

    def now(self) -> int:
        """The current time in epoch milliseconds (wall clock: it may step back, so
        callers compare deadlines with it and never measure intervals by it alone)."""
        ...

    def call_at(self, when: int, callback: Callable[[], None]) -> TimerHandle:
        """Call ``callback`` once, on the running loop, no earlier than ``when``.

        A ``when`` in the past means as soon as possible. The handle cancels it.
        """
        ...
