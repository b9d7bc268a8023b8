"""What only the local host is configured with: its data directory, SQLite, eviction."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from core import Clock
from runtimes.actor import ActorConfig
from runtimes.actor.sqlite import Synchronous

__all__ = ["HostConfig"]


@dataclass(frozen=True)
class HostConfig:
    """The configuration of an :class:`~runtimes.local.host.ActorHost`.

    ``data_dir`` holds ``<actor>.sqlite`` (plus its WAL files) and ``<actor>.lock`` per
    actor; it is created if missing. ``actor``: what every host gives its actors (models,
    extensions, env, settings, default agent, observers).

    ``idle_evict_s``: an actor that had no request, no commit and nothing running or
    runnable for this long is evicted (parked; its next durable deadline goes to the wake
    heap). ``recover_on_start``: at start, look at every actor in ``data_dir`` once and
    wake those with pending work (a crash may have left some); without it, an actor comes
    back only when a request names it. ``synchronous``: SQLite's durability level.
    ``clock`` defaults to the system clock.

    ``journal_when_opening``: a new actor's first input is accepted into the host's
    admission journal (answered ``mailed``, moved into the actor once its file is open:
    :mod:`runtimes.local.host.journal`) when at least this many actor opens are under
    way — a burst of new actors — rather than wait for its own file; ``0`` journals
    every new actor's first input, ``None`` none. The default, ``1``, journals as soon
    as one other open is under way: a lone new actor on a quiet host is admitted at
    once (its answer has an id), and of a burst only the first waits for its file; it
    gave the lowest p99 of 100 new actors arriving at once among 0, 1, 2, 4 and 8
    (docs/performance.md § The local host under load). Only with
    ``synchronous="NORMAL"`` (under ``FULL`` a journal commit would wait for an fsync on
    the event loop).
    """

    data_dir: Path
    actor: ActorConfig
    idle_evict_s: float = 60.0
    recover_on_start: bool = True
    synchronous: Synchronous = "NORMAL"
    clock: Clock | None = None
    journal_when_opening: int | None = 1

    def __post_init__(self) -> None:
        if not isinstance(self.idle_evict_s, int | float) or self.idle_evict_s < 0:
            raise ValueError(f"idle_evict_s must be >= 0 seconds, got {self.idle_evict_s!r}")
        if self.journal_when_opening is not None and (
            type(self.journal_when_opening) is not int or self.journal_when_opening < 0
        ):
            raise ValueError(
                "journal_when_opening must be None or an int >= 0, "
                f"got {self.journal_when_opening!r}"
            )
