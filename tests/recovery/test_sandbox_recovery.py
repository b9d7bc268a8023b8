"""Recovery end to end with real processes: a harness and a sandbox server, each SIGKILLed.

1. The harness process dies while ``bash`` runs a 3-second command on the sandbox; a new
   harness process recovers the call through the op log: the command ran once and the
   model sees its real exit code and output, not "interrupted".
2. The sandbox server dies mid-command and restarts; the op is reported ``lost`` and the
   model gets an interrupted result that says so.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.remote_env.support import server_process, token

ROOT = Path(__file__).resolve().parents[2]
WORKSPACE = "actor-sandbox"


def _job(db: Path, url: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-u", "-m", "tests.recovery.sandbox_job", str(db), url, token(WORKSPACE)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def _wait_for(path: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def _finish(proc: subprocess.Popen[str]) -> list[dict[str, Any]]:
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == 0, err
    return [json.loads(line) for line in out.splitlines()]


def test_a_killed_harness_recovers_the_bash_result_from_the_op_log(tmp_path: Path) -> None:
    with server_process(tmp_path) as server:
        workspace = server.root / WORKSPACE
        db = tmp_path / "actor.sqlite"
        first = _job(db, server.url)
        _wait_for(workspace / "trace.txt")
        first.send_signal(signal.SIGKILL)
        assert first.wait(10) == -signal.SIGKILL
        for stream in (first.stdout, first.stderr):
            assert stream is not None
            stream.close()

        said = _finish(_job(db, server.url))
        assert said[-1] == {"status": "done"}
        (saw,) = [s["model_saw"] for s in said if "model_saw" in s]
        (result,) = saw
        assert "output-text" in result["content"] and "7" in result["content"]
        assert "interrupted" not in result["content"]
        assert (workspace / "out.txt").read_text() == "line\n"  # appended exactly once
        assert (workspace / "trace.txt").read_text() == "started\n"


def test_a_killed_sandbox_reports_the_op_lost_and_the_model_is_told(tmp_path: Path) -> None:
    with server_process(tmp_path) as server:
        workspace = server.root / WORKSPACE
        job = _job(tmp_path / "actor.sqlite", server.url)
        _wait_for(workspace / "trace.txt")
        started = time.monotonic()
        server.kill()
        server.start()
        said = _finish(job)
        assert said[-1] == {"status": "done"}
        (saw,) = [s["model_saw"] for s in said if "model_saw" in s]
        (result,) = saw
        assert result["error"]
        assert "Tool bash was interrupted and may have partially run" in result["content"]
        assert "lost the operation" in result["content"]
        # The restarted server killed the orphaned command: it never appends its line.
        time.sleep(max(0.0, 3.5 - (time.monotonic() - started)))
        assert not (workspace / "out.txt").exists()
