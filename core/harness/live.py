"""Adaptive throttling of progress commits (partial responses, tool output).

The first change after a quiet period commits at once — unless the throttle starts
*quiet*: then the first commit waits until ``quiet_ms`` have passed since it was made
(or the change has grown to ``quiet_bytes``), so a stream that ends sooner commits no
progress at all (its outcome commit carries everything). After each commit the next one
waits at least ``interval_ms`` and at least as long as writing its bytes takes at
100 KiB/s; changes made in between coalesce into that next commit. A crash loses at
most the changes of the current window (the quiet start is one such window).
Throttles that share a :class:`ProgressPace` (a harness's model responses) share a budget
of progress commits per second: while more of them stream at once than the budget
feeds at ``interval_ms``, each one's windows (its quiet start included) lengthen in
proportion, so a process streaming a thousand responses writes about as many progress
commits per second as one streaming a few (unpaced, a thousand conversations on one loop
wrote a partial commit per round: a third of their commits). A crash then loses at most
a longer window of each stream; outcomes are not delayed.
``close()`` stops the timer and waits for the commit in flight, so no stale progress
lands after the outcome; a commit that was started but has not begun to run yet (the
stream never yielded to the loop since) is dropped instead: the outcome commit that
follows supersedes it at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from core.clock import Clock, TimerHandle

__all__ = ["ProgressPace", "Throttle"]

_BYTES_PER_MS = 100 * 1024 / 1000


class ProgressPace:
    """The progress-commit budget shared by the throttles streaming at once."""

    __slots__ = ("_per_s", "streaming")

    def __init__(self, commits_per_s: int) -> None:
        """``commits_per_s`` <= 0: no budget (every throttle keeps its own windows)."""
        self._per_s = commits_per_s
        self.streaming = 0  # throttles made with this pace and not closed yet

    def window_ms(self) -> int:
        """Each stream's share of the budget: the shortest window that keeps the
        streams' progress commits, all together, within ``commits_per_s``."""
        return self.streaming * 1000 // self._per_s if self._per_s > 0 else 0


class Throttle:
    def __init__(
        self,
        clock: Clock,
        interval_ms: int,
        commit: Callable[[], Awaitable[int]],
        report: Callable[[BaseException], None],
        *,
        quiet_ms: int = 0,
        quiet_bytes: int | None = None,
        pace: ProgressPace | None = None,
    ) -> None:
        """``commit()`` writes the latest state and returns how many bytes it wrote;
        ``quiet_ms`` / ``quiet_bytes`` / ``pace``: see the module docstring. A throttle
        made with a ``pace`` must be closed (it counts as streaming until then)."""
        self._clock = clock
        self._interval = interval_ms
        self._commit = commit
        self._report = report
        self._pace = pace
        if pace is not None:
            pace.streaming += 1
            quiet_ms = max(quiet_ms, pace.window_ms()) if quiet_ms > 0 else 0
        self._next_at = clock.now() + quiet_ms if quiet_ms > 0 else 0
        self._quiet_bytes = quiet_bytes if quiet_ms > 0 else None
        self._timer: TimerHandle | None = None
        self._inflight: asyncio.Task[None] | None = None
        self._begun = False
        self._dirty = False
        self._closed = False

    def changed(self, size: int = 0) -> None:
        """Something changed; ``size`` is how big the changed state is now (what
        ``quiet_bytes`` is compared with)."""
        if self._closed:
            return
        self._dirty = True
        if self._inflight is not None:
            return
        if self._quiet_bytes is not None and size >= self._quiet_bytes:
            self._quiet_bytes = None  # grown past the quiet start: commit now
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._start()
            return
        if self._timer is not None:
            return
        now = self._clock.now()
        if now >= self._next_at:
            self._start()
        else:
            self._timer = self._clock.call_at(self._next_at, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        if self._dirty and self._inflight is None and not self._closed:
            self._start()

    def _start(self) -> None:
        self._dirty = False
        self._begun = False
        self._inflight = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        self._begun = True
        self._quiet_bytes = None  # the quiet start is over once anything commits
        try:
            written = await self._commit()
            delay = max(self._interval, int(written / _BYTES_PER_MS))
            if self._pace is not None:
                delay = max(delay, self._pace.window_ms())
            self._next_at = self._clock.now() + delay
        except Exception as e:  # progress is best effort; the outcome commit is not
            self._report(e)
        finally:
            self._inflight = None
        if self._dirty and not self._closed:
            self.changed()

    async def close(self) -> None:
        if self._pace is not None and not self._closed:
            self._pace.streaming -= 1
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._inflight is not None:
            if not self._begun:
                self._inflight.cancel()  # never ran: nothing of it can be in flight
            await asyncio.wait([self._inflight])
