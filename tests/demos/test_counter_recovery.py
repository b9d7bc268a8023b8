"""The counter recovery demo in real processes, killed with SIGKILL mid-count."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
INTERVAL_MS = 150


def _start(db: Path, to: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-u",
            "-m",
            "runtimes.cli.main",
            "demo",
            "counter",
            "--db",
            str(db),
            "--to",
            str(to),
            "--interval-ms",
            str(INTERVAL_MS),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def _read_until(proc: subprocess.Popen[str], wanted: str, log: list[str]) -> None:
    assert proc.stdout is not None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"process ended before {wanted!r}: {log}")
        log.append(line.rstrip("\n"))
        if log[-1] == wanted:
            return
    raise AssertionError(f"{wanted!r} not printed in time: {log}")


def test_a_killed_counter_resumes_without_repeating_or_skipping_a_tick(tmp_path: Path) -> None:
    db = tmp_path / "counter.sqlite"
    to = 12
    outputs: list[list[str]] = []
    for kill_after in (3, 7):
        log: list[str] = []
        proc = _start(db, to)
        _read_until(proc, f"tick {kill_after}", log)
        # Kill while the task waits for its next tick: the process holds no invocation.
        time.sleep(INTERVAL_MS / 2 / 1000)
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(10) == -signal.SIGKILL
        assert proc.stdout is not None
        log += [line.rstrip("\n") for line in proc.stdout]
        proc.stdout.close()
        outputs.append(log)
    final = _start(db, to)
    out, _ = final.communicate(timeout=60)
    assert final.returncode == 0, out
    outputs.append(out.splitlines())

    ticks = [line for run in outputs for line in run if line.startswith("tick ")]
    assert ticks == [f"tick {n}" for n in range(1, to + 1)]
    assert outputs[0][0].startswith("counting to 12")
    assert outputs[1][0].startswith("resuming the count") and outputs[2][0].startswith("resuming")
    assert outputs[2][-1] == "done: counted to 12"
