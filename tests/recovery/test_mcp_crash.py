"""The crash matrix for MCP tools: the harness process is SIGKILLed while an MCP call is
in flight on a real MCP server (its call log on disk proves what ran).

* a read-only tool (``readOnlyHint: true``, so ``safe``) is called again after recovery
  and the model gets its real result;
* a non-idempotent tool (no hints, so ``unsafe``) is not called again, and the model is
  told the call was interrupted.
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

from tests.mcp.support import McpProcess, mcp_server

ROOT = Path(__file__).resolve().parents[2]


def _job(db: Path, url: str, tool: str, arguments: dict[str, Any]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-u",
            "-m",
            "tests.recovery.mcp_job",
            str(db),
            url,
            tool,
            json.dumps(arguments),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def _kill_during(server: McpProcess, db: Path, tool: str, arguments: dict[str, Any]) -> None:
    """Start the job, SIGKILL it once the server has started the call, let the call go."""
    job = _job(db, server.url, f"trains__{tool}", {**arguments, "hold": True})
    deadline = time.monotonic() + 60
    while not server.calls(tool):
        assert job.poll() is None, job.communicate()
        assert time.monotonic() < deadline, "the MCP call never started"
        time.sleep(0.02)
    job.send_signal(signal.SIGKILL)
    assert job.wait(10) == -signal.SIGKILL
    for stream in (job.stdout, job.stderr):
        assert stream is not None
        stream.close()
    server.release()  # the server's call finishes; its caller is gone


def _recover(server: McpProcess, db: Path, tool: str, arguments: dict[str, Any]) -> list[Any]:
    job = _job(db, server.url, f"trains__{tool}", {**arguments, "hold": True})
    out, err = job.communicate(timeout=90)
    assert job.returncode == 0, err
    said = [json.loads(line) for line in out.splitlines()]
    assert said[-1] == {"status": "done"}
    assert not [s for s in said if "offered" in s]  # no new request before the result
    (saw,) = [s["model_saw"] for s in said if "model_saw" in s]
    return list(saw)


def test_a_read_only_mcp_call_is_called_again_after_a_sigkill(tmp_path: Path) -> None:
    with mcp_server(tmp_path) as server:
        db = tmp_path / "actor.sqlite"
        _kill_during(server, db, "search", {"to": "Graz"})
        (result,) = _recover(server, db, "search", {"to": "Graz"})
        assert result == {"error": False, "content": "IC 501 to Graz leaves at 09:12"}
        # Started twice (the killed call and the rerun), with the same arguments.
        assert [c["args"] for c in server.calls("search")] == [{"to": "Graz"}] * 2


def test_a_non_idempotent_mcp_call_is_not_called_again_after_a_sigkill(tmp_path: Path) -> None:
    with mcp_server(tmp_path) as server:
        db = tmp_path / "actor.sqlite"
        _kill_during(server, db, "book", {"train": "IC 501"})
        (result,) = _recover(server, db, "book", {"train": "IC 501"})
        assert result["error"] is True
        assert "Tool trains__book was interrupted and may have partially run" in result["content"]
        assert len(server.calls("book")) == 1  # the killed call only
