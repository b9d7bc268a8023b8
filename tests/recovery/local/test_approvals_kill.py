"""Tool approvals across SIGKILL on the local host (issue 34): a call pending approval,
the host process killed, hours passing (the next process's clock runs ahead), then

* an approval over HTTP: the tool runs exactly once, the run answers, and a second,
  different decision is refused with nothing written;
* no request at all: an expiring approval is denied at its deadline by the host's own
  wake-up (watched in the SQLite file, not over HTTP).

Real processes: ``tests/local/host_proc.py`` with ``--approvals``."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.local.support import TOKEN, snapshot, start_host_process, stop, wait_until

ACTOR = "ann"
HOURS = 5 * 3600 * 1000
pytestmark = pytest.mark.timeout(120)


def client(url: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"authorization": f"Bearer {TOKEN}"}, timeout=30)


def pending(c: httpx.Client) -> list[Any]:
    r = c.get(f"/v1/actors/{ACTOR}/approvals")
    assert r.status_code == 200, r.text
    approvals: list[Any] = r.json()["approvals"]
    return approvals


def ask_then_kill(data: Path, content: str) -> tuple[int, dict[str, Any]]:
    proc, url = start_host_process(data, "--approvals", "3600")
    try:
        with client(url) as c:
            r = c.post(
                f"/v1/actors/{ACTOR}/submissions",
                json={"type": "input", "content": content, "request_id": "job-1"},
            )
            assert r.status_code == 202, r.text
            wait_until(lambda: bool(pending(c)))
            (one,) = pending(c)
    finally:
        proc.send_signal(signal.SIGKILL)
        stop(proc)
    assert proc.returncode == -signal.SIGKILL
    return r.json()["id"], one


def test_an_approval_after_a_kill_and_hours_runs_the_tool_once(tmp_path: Path) -> None:
    data, effects = tmp_path / "data", tmp_path / "effects.txt"
    sid, one = ask_then_kill(data, f"guard:{effects}")
    proc, url = start_host_process(data, "--approvals", "3600", "--clock-offset-ms", str(HOURS))
    try:
        with client(url) as c:
            (still,) = pending(c)
            assert still == one  # the same question, asked before the kill
            assert not effects.exists()
            r = c.post(f"/v1/actors/{ACTOR}/approvals/{one['id']}", json={"decision": "approve"})
            assert r.status_code == 200, r.text
            assert r.json()["decided_at"] >= one["asked_at"] + HOURS
            state = c.get(f"/v1/actors/{ACTOR}/submissions/{sid}", params={"wait": 20}).json()
            assert state["status"] == "done", state
            assert state["answer"]["text"].startswith("guarded finished: guarded wrote")
            assert effects.read_text() == "ran\n"
            db = data / f"{ACTOR}.sqlite"
            before = snapshot(db)
            r = c.post(f"/v1/actors/{ACTOR}/approvals/{one['id']}", json={"decision": "deny"})
            assert r.status_code == 409 and r.json()["error"]["code"] == "approval_decided"
            assert snapshot(db) == before
    finally:
        stop(proc)
    assert effects.read_text() == "ran\n"


def _denied(db: Path) -> bool:
    rows = (snapshot(db) or {}).get("entries", [])
    return any("tool_result" in repr(row) and "denied" in repr(row) for row in rows)


def test_an_expiring_approval_is_denied_at_its_deadline_with_no_request(tmp_path: Path) -> None:
    data, effects = tmp_path / "data", tmp_path / "effects.txt"
    sid, one = ask_then_kill(data, f"expire:{effects}")
    assert one["expires_at"] == one["asked_at"] + 3_600_000
    db = data / f"{ACTOR}.sqlite"
    assert not _denied(db)
    # Hours later a new process starts; nobody sends it anything about the actor.
    proc, url = start_host_process(data, "--approvals", "3600", "--clock-offset-ms", str(HOURS))
    try:
        wait_until(lambda: _denied(db), timeout=30)
        with client(url) as c:
            state = c.get(f"/v1/actors/{ACTOR}/submissions/{sid}", params={"wait": 20}).json()
            assert state["status"] == "done"
            assert "expired" in state["answer"]["text"]
            r = c.post(f"/v1/actors/{ACTOR}/approvals/{one['id']}", json={"decision": "approve"})
            assert r.status_code == 409 and "expired" in r.json()["error"]["message"]
    finally:
        stop(proc)
    assert not effects.exists()
