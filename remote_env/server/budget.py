"""What one search may spend: a wall-clock deadline and a number of bytes to read.

A search runs in a worker thread; it checks :meth:`SearchBudget.exhausted` between bounded
steps (a chunk read, a directory, a batch of lines) and stops, keeping what it found, once
the deadline passed, the scan cap is spent or the server is shutting down.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from remote_env.protocol import SearchStop

__all__ = ["SearchBudget"]


@dataclass(slots=True)
class SearchBudget:
    """The limits of one search, and which of them stopped it (``stopped_by``)."""

    deadline: float
    """``time.monotonic()`` value after which the search stops."""
    scan_left: int
    """Bytes of file content the search may still read."""
    shutdown: threading.Event = field(default_factory=threading.Event)
    stopped_by: SearchStop | None = None

    @classmethod
    def start(
        cls, *, timeout_s: float, max_scan_bytes: int, shutdown: threading.Event | None = None
    ) -> SearchBudget:
        """A budget whose deadline is ``timeout_s`` from now."""
        return cls(
            deadline=time.monotonic() + timeout_s,
            scan_left=max_scan_bytes,
            shutdown=shutdown if shutdown is not None else threading.Event(),
        )

    def stop(self, reason: SearchStop) -> None:
        """Record why the search stopped (the first reason wins)."""
        if self.stopped_by is None:
            self.stopped_by = reason

    def exhausted(self) -> bool:
        """True once the search must stop; records ``deadline`` when time is up."""
        if self.stopped_by is not None and self.stopped_by != "limit":
            return True
        if self.shutdown.is_set() or time.monotonic() >= self.deadline:
            self.stop("deadline")
            return True
        return False

    def charge(self, size: int) -> None:
        """Count ``size`` bytes read."""
        self.scan_left = max(0, self.scan_left - size)
