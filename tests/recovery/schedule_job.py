"""One wake of a recurring schedule in its own process, to be SIGKILLed or to exit.

``python -m tests.recovery.schedule_job DB START NOW MODE`` opens the SQLite actor ``DB``
on a virtual clock at ``START``, creates (idempotently, request id ``every-minute``) the
schedule ``every: 60`` — its occurrences at ``START + k * 60 s`` — then moves the clock
to ``NOW`` as a host's wake would and runs the actor until the occurrence due at ``NOW``
is answered. ``MODE``: ``clean`` closes the actor afterwards (an eviction: its next
deadline stays in storage); ``kill-before`` / ``kill-after`` SIGKILLs the process just
before / just after the commit that admits the occurrence. Every line printed is JSON.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from core.faux import FauxModel, faux_message
from core.harness import Harness, Registry
from core.storage import Storage
from core.storage.port import Write
from core.testing import VirtualClock
from core.testing.wrappers import DelegatingStorage
from runtimes.local.sqlite import open_sqlite_storage

REQUEST_ID = "every-minute"


def say(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


def _admits_occurrence(writes: Sequence[Write]) -> bool:
    return any((getattr(w, "request_id", None) or "").startswith("schedule:") for w in writes)


class KillAround(DelegatingStorage):
    """SIGKILLs the process before or after the first commit that admits an occurrence."""

    def __init__(self, inner: Storage, when: str | None) -> None:
        self.inner = inner
        self.when = when

    async def commit(self, writes: Sequence[Write]) -> int:
        hit = self.when is not None and _admits_occurrence(writes)
        if hit and self.when == "before":
            os.kill(os.getpid(), signal.SIGKILL)
        seq = await self.inner.commit(writes)
        if hit and self.when == "after":
            os.kill(os.getpid(), signal.SIGKILL)
        return seq


async def main(db: Path, start: int, now: int, mode: str) -> None:
    clock = VirtualClock(start)
    when = {"kill-before": "before", "kill-after": "after"}.get(mode)
    storage = KillAround(await open_sqlite_storage(db), when)
    model = FauxModel(fallback=faux_message("tock"))
    harness = await Harness.open(storage, models=model, registry=Registry(), clock=clock)
    root = await harness.root(agent={"model": "faux/faux-1"})
    schedule = await root.schedule("tick", every=60, request_id=REQUEST_ID)
    say(schedule=schedule.id, next_at=schedule.next_at)
    clock.set(now)
    harness.resume()
    request_id = f"schedule:{schedule.id}:{now}"
    while (submission := await root.submission_by_request(request_id)) is None:  # noqa: ASYNC110
        await asyncio.sleep(0.01)
    record = await submission.wait(timeout=30)
    say(occurrence=now, status=record.status)
    await harness.close()


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]))
