"""Compaction survives a real SIGKILL (issue 9): killed while a background summary is
queued for the next post-tools boundary, and while a chunked summarization is between
chunks. A fresh process reopens the SQLite file: nothing is summarized twice, nothing is
lost, the run goes on. The jobs are in ``compaction_job.py``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def _start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-u", "-m", "tests.recovery.compaction_job", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def _until_killed(proc: subprocess.Popen[str], key: str, times: int = 1) -> list[dict[str, Any]]:
    """Read the job's lines until ``times`` of them carry ``key``, then SIGKILL it."""
    assert proc.stdout is not None and proc.stderr is not None
    said: list[dict[str, Any]] = []
    for line in proc.stdout:
        said.append(json.loads(line))
        if sum(key in s for s in said) == times:
            break
    else:
        raise AssertionError(f"the job ended before {key!r}: {proc.stderr.read()}")
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(10) == -signal.SIGKILL
    proc.stdout.close()
    proc.stderr.close()
    return said


def _finish(*args: str) -> list[dict[str, Any]]:
    proc = _start(*args)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return [json.loads(line) for line in out.splitlines()]


def test_killed_while_a_summary_waits_for_the_post_tools_boundary(tmp_path: Path) -> None:
    db = str(tmp_path / "actor.sqlite")
    first = _until_killed(_start("queued", "first", db), "queued")
    assert first[-1] == {"queued": True}
    summaries = [s for s in first if "summary_request" in s]
    assert len(summaries) == 1  # summarized once, queued, not yet placed
    submitted = next(s["submitted"] for s in first if "submitted" in s)

    second = _finish("queued", "second", db, str(submitted))
    assert not any("summary_request" in s for s in second)  # not summarized again
    requests = [s for s in second if "request" in s]
    # The interrupted request is sent again; after its tool round the summary lands
    # and the run continues compacted.
    assert requests[0]["first"] == "echo one, then two"
    assert requests[-1]["first"].startswith("The conversation history before this point")
    assert "echo one, then two" not in json.dumps(requests[-1])
    (end,) = [s for s in second if "status" in s]
    assert end["status"] == "done"
    assert end["kinds"] == [
        "user",
        "assistant",
        "tool_result",
        "assistant",
        "tool_result",
        "compaction",
        "assistant",
    ]


def test_killed_between_chunks_resumes_at_the_next_chunk(tmp_path: Path) -> None:
    db = str(tmp_path / "actor.sqlite")
    # Killed while chunk 2's request hangs: chunk 1's summary is checkpointed.
    first = _until_killed(_start("chunks", "first", db), "summary_request", times=2)
    before = [s["summary_request"] for s in first if "summary_request" in s]
    assert before[0]["previous"] is None
    assert before[1]["previous"] == "summary after part 1 of first"

    second = _finish("chunks", "second", db)
    after = [s["summary_request"] for s in second if "summary_request" in s]
    # The restart sends chunk 2 again (its answer was lost), on top of chunk 1's
    # summary: chunk 1 is not summarized again.
    assert after[0] == before[1]
    covered = before[0]["questions"] + [q for r in after for q in r["questions"]]
    assert sorted(covered) == list(range(12))  # every question exactly once
    (end,) = [s for s in second if "kinds" in s]
    assert end["kinds"].count("compaction") == 1 and end["kinds"][-1] == "compaction"
    assert f"summary after part {len(after)} of second" in end["summary"]["content"]
