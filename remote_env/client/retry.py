"""Backoff for retrying requests that failed to reach the server (safe thanks to op ids)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field

__all__ = ["RetryPolicy"]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how patiently to retry a request that could not reach the server.

    ``attempts`` counts tries in total (1 = no retry). The n-th wait is
    ``min(initial_delay * multiplier ** (n - 1), max_delay)``. ``sleep`` is injectable so tests
    can make waits short or record them.

    Examples: ``RetryPolicy()`` tries 6 times over about 3 s; ``RetryPolicy(attempts=1)`` never
    retries; ``RetryPolicy(attempts=50, initial_delay=0.05, max_delay=0.1)`` keeps trying for a
    few seconds with short waits.
    """

    attempts: int = 6
    initial_delay: float = 0.1
    max_delay: float = 2.0
    multiplier: float = 2.0
    sleep: Callable[[float], Awaitable[None]] = field(default=asyncio.sleep, compare=False)

    def __post_init__(self) -> None:
        if self.attempts < 1 or self.initial_delay < 0 or self.max_delay < 0:
            raise ValueError("attempts must be >= 1 and delays >= 0")
        if self.multiplier < 1:
            raise ValueError("multiplier must be >= 1")

    def delays(self) -> Iterator[float]:
        """The waits between tries (``attempts - 1`` of them)."""
        delay = self.initial_delay
        for _ in range(self.attempts - 1):
            yield min(delay, self.max_delay)
            delay *= self.multiplier
