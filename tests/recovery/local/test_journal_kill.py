"""The admission journal across SIGKILL: a new actor's first input, accepted into the
local host's journal and answered ``mailed``, with the host killed before its move into
the actor, or after the move's commit and before the journal forgot it. The next host
process moves it (again): the input is admitted once, answered once, and the journal is
empty. Real processes: ``tests/recovery/local/journal_job.py``."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from core import UnknownRecord
from core.harness import Harness
from runtimes.actor import UnknownActor
from runtimes.local.host import ActorHost
from runtimes.local.host.journal import JOURNAL_NAME
from tests.local.support import ROOT, host_config
from tests.local.test_journal import api, settled, submissions
from tests.recovery.local.journal_job import ACTOR, CONTENT, POINTS, REQUEST_ID

pytestmark = pytest.mark.timeout(120)


def journal_rows(data: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(data / JOURNAL_NAME) as conn:
        return conn.execute("SELECT actor, request_id FROM journaled").fetchall()


def admitted(data: Path) -> list[str]:
    """The request ids of the actor's root submissions, read by a host that neither
    resumes the actor nor moves anything (none if it has no file or no root yet)."""

    async def look() -> list[str]:
        host = ActorHost(host_config(data, journal_when_opening=None))

        async def read(harness: Harness) -> list[str]:
            try:
                root = await harness.conversation(1)
            except UnknownRecord:
                return []
            page = await root.submissions(limit=10)
            return [s.request_id or "" for s in page.items]

        try:
            return await host.look(ACTOR, read)
        except UnknownActor:
            return []
        finally:
            await host.close()

    return asyncio.run(look())


def crash(data: Path, point: str) -> dict[str, Any]:
    job = subprocess.run(
        [sys.executable, "-m", "tests.recovery.local.journal_job", str(data), point],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert job.returncode == -signal.SIGKILL, job.stdout + job.stderr
    accepted: dict[str, Any] = json.loads(job.stdout.splitlines()[0])
    return accepted


@pytest.mark.parametrize("point", POINTS)
def test_a_journaled_input_survives_a_kill_around_its_move_and_is_answered_once(
    tmp_path: Path, point: str
) -> None:
    data = tmp_path / "data"
    accepted = crash(data, point)
    assert accepted == {
        "status_code": 202,
        "id": None,
        "conversation_id": 1,
        "type": "input",
        "status": "mailed",
        "request_id": REQUEST_ID,
    }
    assert journal_rows(data) == [(ACTOR, REQUEST_ID)]
    assert admitted(data) == ([] if point == "journaled" else [REQUEST_ID])

    async def restart() -> None:
        async with api(data, journal_when_opening=0) as (host, client):
            # The host's start moves it in, with no request naming the actor.
            for _ in range(200):
                if ACTOR in host.active and not journal_rows(data):
                    break
                await asyncio.sleep(0.05)
            assert journal_rows(data) == [] and ACTOR in host.active
            state = await settled(client, ACTOR, REQUEST_ID)
            assert state["status"] == "done", state
            assert state["answer"]["text"] == f"echo: {CONTENT}", state
            (only,) = await submissions(client, ACTOR)
            assert only["request_id"] == REQUEST_ID and only["status"] == "done", only
            r = await client.get(f"/v1/actors/{ACTOR}/conversations/1/entries")
            kinds = [e["kind"] for e in r.json()["entries"]]
            assert kinds == ["user", "assistant"], kinds  # asked once, answered once

    asyncio.run(restart())
    assert journal_rows(data) == []
    assert admitted(data) == [REQUEST_ID]
