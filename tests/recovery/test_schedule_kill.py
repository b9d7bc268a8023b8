"""A recurring schedule across real processes: ``every: 60`` for ten virtual minutes,
one process per wake, with an eviction after every clean wake, one SIGKILL just before
an occurrence's commit and one just after it, submits exactly ten messages, each once
and each answered (invariant 19)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

from core.storage import SubmissionQuery
from runtimes.local.sqlite import open_sqlite_storage

ROOT = Path(__file__).resolve().parents[2]
START = 1_700_000_000_000
MINUTE = 60_000


def _wake(db: Path, now: int, mode: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            *(sys.executable, "-u", "-m", "tests.recovery.schedule_job"),
            *(str(db), str(START), str(now), mode),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def test_every_minute_for_ten_minutes_across_kills_and_evictions_submits_ten(
    tmp_path: Path,
) -> None:
    db = tmp_path / "actor.sqlite"
    kills = {4: "kill-after", 7: "kill-before"}
    for minute in range(1, 11):
        now = START + minute * MINUTE
        if minute in kills:
            killed = _wake(db, now, kills[minute])
            assert killed.returncode == -9, (killed.returncode, killed.stdout, killed.stderr)
        done = _wake(db, now, "clean")  # the wake again, on a fresh process
        assert done.returncode == 0, (done.stdout, done.stderr)
        last = json.loads(done.stdout.splitlines()[-1])
        assert last == {"occurrence": now, "status": "done"}, done.stdout

    async def occurrences() -> list[tuple[str, str]]:
        storage = await open_sqlite_storage(db)
        try:
            page = await storage.scan_submissions(SubmissionQuery(conversation_id=1, limit=1000))
            return [(s.request_id or "", s.status) for s in page.items]
        finally:
            await storage.close()

    found = asyncio.run(occurrences())
    times = [int(r.rsplit(":", 1)[1]) for r, _ in found if r.startswith("schedule:")]
    assert times == [START + m * MINUTE for m in range(1, 11)], found
    assert {status for _, status in found} == {"done"}, found
