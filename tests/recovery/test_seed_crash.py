"""The crash test from the seed articles, with real processes and a real SIGKILL.

A scripted model asks for ``search`` (replay safe, 2 s) and ``book`` (unsafe, 2 s) at
once; the process is killed at 1.5 s; a new process resubmits ``job-42`` and gets the
original submission back; ``search`` runs again, ``book`` does not, and the model is told
the booking was interrupted and may have partially run; the submission ends ``done``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def _start(db: Path, log: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-u", "-m", "tests.recovery.seed_job", str(db), str(log)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def test_a_killed_job_resumes_reruns_the_safe_search_and_reports_the_booking(
    tmp_path: Path,
) -> None:
    db, log = tmp_path / "actor.sqlite", tmp_path / "effects.log"
    check_seed_crash(lambda attempt: _start(db, log), log)


def check_seed_crash(start: Callable[[int], subprocess.Popen[str]], log: Path) -> None:
    """The scenario, for any host: ``start(1)`` and ``start(2)`` launch the job process
    (the first is killed), writing its effects to ``log``."""
    first = start(1)
    assert first.stdout is not None
    submitted = json.loads(first.stdout.readline())["submitted"]
    started = time.monotonic()
    deadline = started + 10
    while time.monotonic() < deadline:
        lines = log.read_text().splitlines() if log.exists() else []
        if {"search start", "book start"} <= set(lines):
            break
        time.sleep(0.01)
    time.sleep(max(0.0, 1.5 - (time.monotonic() - started)))
    first.send_signal(signal.SIGKILL)
    assert first.wait(10) == -signal.SIGKILL
    first.stdout.close()
    assert first.stderr is not None
    first.stderr.close()
    assert sorted(log.read_text().splitlines()) == ["book start", "search start"]

    second = start(2)
    out, err = second.communicate(timeout=60)
    assert second.returncode == 0, err
    said: list[dict[str, Any]] = [json.loads(line) for line in out.splitlines()]
    assert said[0] == {"submitted": submitted}  # job-42 is the original submission
    (saw,) = [s["model_saw"] for s in said if "model_saw" in s]
    by_tool = {r["tool"]: r for r in saw}
    assert by_tool["search"] == {
        "tool": "search",
        "error": False,
        "content": "Train IC 511 Vienna-Graz departs 10:02",
    }
    assert by_tool["book"]["error"]
    assert "Tool book was interrupted and may have partially run" in by_tool["book"]["content"]
    assert said[-1]["status"] == "done"
    effects = log.read_text().splitlines()
    assert effects.count("search start") == 2 and effects.count("search end") == 1
    assert effects.count("book start") == 1 and "book end" not in effects
