"""The system clock (kept at this path for the local host's callers; it lives in the
host-neutral layer, which every host shares)."""

from __future__ import annotations

from runtimes.actor.clock import SystemClock

__all__ = ["SystemClock"]
