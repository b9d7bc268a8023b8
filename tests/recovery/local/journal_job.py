"""A local host killed around its admission journal's move, run as its own process.

``python -m tests.recovery.local.journal_job DATA POINT`` starts the local host on
``DATA`` (every new actor's first input journaled), submits ``hello`` to the new actor
``ann`` under request id ``job-1``, prints the ``202`` as a JSON line, and SIGKILLs
itself at ``POINT``:

* ``journaled`` — the input is committed to the journal, the actor's file is open, and
  nothing was moved into it;
* ``moved`` — the input's admission is committed to the actor's file, and the journal's
  row is not deleted yet.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from unittest import mock

import httpx

from runtimes.actor import OpenActor
from runtimes.actor.api import ApiConfig, create_app
from runtimes.local.host import ActorHost, HostConfig
from runtimes.local.host.journal import AdmissionJournal, JournaledInput
from tests.local.support import TOKEN, host_config

ACTOR, REQUEST_ID, CONTENT = "ann", "job-1", "hello"
POINTS = ("journaled", "moved")


def die(*_: object) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class CrashingHost(ActorHost):
    """Moves journaled input only once the ``202`` was printed, then dies at ``point``."""

    def __init__(self, config: HostConfig, point: str) -> None:
        super().__init__(config)
        self.point = point
        self.answered = asyncio.Event()

    async def activated(self, entry: OpenActor) -> None:
        await self.answered.wait()
        if self.point == "journaled":
            die()

        def remove(journal: AdmissionJournal, item: JournaledInput) -> None:
            die()

        with mock.patch.object(AdmissionJournal, "remove", remove):
            await super().activated(entry)


async def main(data: Path, point: str) -> None:
    host = CrashingHost(host_config(data, journal_when_opening=0), point)
    app = create_app(host, ApiConfig(TOKEN))
    await host.start()
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://host",
        headers={"authorization": f"Bearer {TOKEN}"},
    ) as client:
        r = await client.post(
            f"/v1/actors/{ACTOR}/submissions",
            json={"type": "input", "content": CONTENT, "request_id": REQUEST_ID},
        )
        print(json.dumps({"status_code": r.status_code, **r.json()}), flush=True)
        host.answered.set()
        await asyncio.sleep(30)
    print(json.dumps({"error": "not killed"}), flush=True)
    sys.exit(3)


if __name__ == "__main__":
    assert sys.argv[2] in POINTS, sys.argv
    asyncio.run(main(Path(sys.argv[1]), sys.argv[2]))
