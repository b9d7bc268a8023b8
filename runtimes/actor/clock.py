"""The wall clock every production host runs on: epoch milliseconds, event-loop timers.

Host-neutral (no thread, no OS call beyond reading the time): the same class serves the
local host and a Durable Object, where the clock only advances across I/O, so durable
deadlines are compared with the time the current event started.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from core.clock import TimerHandle

__all__ = ["SystemClock"]


class SystemClock:
    """:class:`core.clock.Clock` on the wall clock.

    Timers are event-loop timers: they fire while this process (isolate) lives. Durable
    deadlines themselves live in storage, so a timer lost to a crash or an eviction is
    re-armed from ``next_wake()`` by whoever reopens the storage.
    """

    def now(self) -> int:
        return time.time_ns() // 1_000_000

    def call_at(self, when: int, callback: Callable[[], None]) -> TimerHandle:
        delay = max(0.0, (when - self.now()) / 1000)
        return asyncio.get_running_loop().call_later(delay, callback)


if TYPE_CHECKING:  # mypy proves the adapter satisfies its port
    from core.clock import Clock

    def _conforms(adapter: SystemClock) -> Clock:
        return adapter
