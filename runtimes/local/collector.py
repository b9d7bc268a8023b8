"""The garbage collector's settings for a process that serves many conversations.

A full collection walks every tracked object and pauses the one event loop that runs
every actor. Measured under the suite's workloads (``tests/bench/suite.py``, timed with
``gc.callbacks``):

* the host benchmark (a hundred active actors over HTTP): every slowest-1% warm
  acceptance overlapped a full collection, five or six a run of 70-280 ms each on a
  shared 2-core machine;
* the concurrency workload (1,000 conversations x 20 tool rounds in one process, ~190 MB
  live): 21 full collections took 5.8 s of a 38 s run, and the collector 7.8 s in all.

Two causes, two settings:

* start-up's objects (modules, the app, its routes and models: ~76,000 of the ~159,000
  the host's full collections walked) live as long as the process: ``gc.freeze()``
  moves them out of the collector's sight;
* at Python's default of 700 allocations per young collection, objects that live a
  round or two (a request's, a commit's) are often caught alive and promoted; the
  promoted ones that die later are what makes full collections due. At 5,000 nearly all
  die young. A young collection takes longer (~9 ms instead of ~1 ms on the loaded
  machine), far below the full ones it spares: the host went from five or six full
  collections a run to one, the concurrency workload from 21 (7.8 s of collector time)
  to 4 (2.4 s);
* with many conversations answered at once, a round's objects live while every other
  conversation's round runs too, so at Python's default of 10 young collections per
  middle one they reach the old generation and make full collections due again. At 40
  they die in the middle one: the concurrency workload went from 30 middle collections
  and 3 full ones (2.5-3.0 s of collector time) to 8 and none (1.4-1.6 s), and ~950 to
  ~1,020 rounds/s on a quiet machine. A middle collection takes about twice as long
  (~60 ms instead of ~30 ms at 1,000 conversations), a full one ~160 ms.

The local server applies them while it serves; a program that embeds the harness and
serves many conversations in one process can do the same with :class:`ServingCollector`.
"""

from __future__ import annotations

import gc
from types import TracebackType

__all__ = ["GEN0_THRESHOLD", "GEN1_THRESHOLD", "ServingCollector"]

GEN0_THRESHOLD = 5_000
"""Allocations (net) between young collections while serving; Python's default is 700."""

GEN1_THRESHOLD = 40
"""Young collections between middle ones while serving; Python's default is 10."""


class ServingCollector:
    """Tunes the process's collector from :meth:`start` to :meth:`stop` (or as a ``with``
    block): collects once, freezes what exists, and raises the young and middle
    generations' thresholds to :data:`GEN0_THRESHOLD` and :data:`GEN1_THRESHOLD`;
    :meth:`stop` unfreezes and puts the thresholds back, since a process (the tests) may
    serve many times. Process-wide: while one is started, every other part of the
    process runs under the same settings."""

    def __init__(self) -> None:
        self._before: tuple[int, int, int] | None = None

    @property
    def started(self) -> bool:
        return self._before is not None

    def start(self) -> None:
        """Tune the collector; a second call while started changes nothing."""
        if self._before is not None:
            return
        before = gc.get_threshold()
        gc.collect()
        gc.freeze()
        gc.set_threshold(max(before[0], GEN0_THRESHOLD), max(before[1], GEN1_THRESHOLD), before[2])
        self._before = before

    def stop(self) -> None:
        """Put back what :meth:`start` changed; without a start, changes nothing."""
        if self._before is None:
            return
        gc.unfreeze()  # what start-up made may be garbage by now
        gc.set_threshold(*self._before)
        self._before = None

    def __enter__(self) -> ServingCollector:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
