"""The crash matrix: the scenario of :mod:`tests.recovery.crash_scenario` SIGKILLed at each
named point of :mod:`tests.recovery.crash_points`, on each host that has the point; a
fresh process on the same storage runs the client script to idle and reports.

For every case: the crash process really died of SIGKILL exactly at the point; every
accepted input settled exactly once (one submission per request id, settled, never
rewritten after it settled — across both processes); the tool that waits for approval
ran exactly once, after the approval; the schedule's occurrence was submitted exactly
once (by its request id) and the next one armed; the unsafe tool ran at most once
(and the model was told it was interrupted when it did not finish); the safe tool
finished at least once; the recoverable command ran exactly once on the sandbox (a real
server process); one sub-agent, one fork, one reminder that fired once; every task
terminal; ``PRAGMA integrity_check`` and the consistency checker clean. On the Durable
Object host the fresh isolate is woken by the alarm the killed one left (no request).

The default run takes the points marked ``quick`` (a representative subset on every
host); ``pytest -m slow`` runs the rest of the matrix. Cases run in parallel
subprocesses (a module fixture runs every selected case at once, each test asserts its
own); the terminal summary lists the points covered per host.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.recovery.crash_points import POINTS, CrashPoint
from tests.remote_env.support import SECRET, ServerProcess, free_port

ROOT = Path(__file__).resolve().parents[2]
LEASE_MS = 60_000
WORKERS = 4


@dataclass(frozen=True)
class Case:
    host: str
    point: CrashPoint

    @property
    def id(self) -> str:
        return f"{self.host}-{self.point.name}"

    @property
    def slug(self) -> str:
        return re.sub(r"[^A-Za-z0-9_-]", "_", self.id)


@dataclass
class Outcome:
    crash: list[dict[str, Any]] = field(default_factory=list)
    crash_rc: int | None = None
    recover: list[dict[str, Any]] = field(default_factory=list)
    recover_rc: int | None = None
    final: list[dict[str, Any]] = field(default_factory=list)  # lease expiry: a third holder
    stderr: str = ""
    work: Path = Path()
    seconds: float = 0.0

    def said(self, key: str, lines: list[dict[str, Any]] | None = None) -> list[Any]:
        return [line[key] for line in (self.recover if lines is None else lines) if key in line]


CASES = [Case(host, point) for point in POINTS for host in point.hosts]


def _params() -> list[Any]:
    return [
        pytest.param(
            case, id=case.id, marks=() if case.host in case.point.quick else pytest.mark.slow
        )
        for case in CASES
    ]


@pytest.fixture(scope="module")
def base() -> Iterator[Path]:
    """A directory of the matrix's own: other pytest runs on this machine rotate the
    shared basetemp away while a long run still works in it."""
    path = Path(tempfile.mkdtemp(prefix="perdure-matrix-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def sandbox(base: Path) -> Iterator[ServerProcess]:
    tmp = base / "sandbox"
    (tmp / "root").mkdir(parents=True)
    (tmp / "secret").write_bytes(SECRET)
    server = ServerProcess(root=tmp / "root", port=free_port(), secret_file=tmp / "secret")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def moto(request: pytest.FixtureRequest) -> Iterator[str | None]:
    if not any(c.host == "lambda" for c in _selected(request)):
        yield None
        return
    from moto.server import ThreadedMotoServer

    from tests.aws.conftest import REGION, create_resources

    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": REGION,
    }.items():
        os.environ.setdefault(name, value)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    create_resources(endpoint)
    try:
        yield endpoint
    finally:
        server.stop()


def _selected(request: pytest.FixtureRequest) -> list[Case]:
    found = []
    for item in request.session.items:
        callspec = getattr(item, "callspec", None)
        if item.module is request.module and callspec is not None and "case" in callspec.params:
            found.append(callspec.params["case"])
    return found


def _child(spec: dict[str, Any]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-u", "-m", "tests.recovery.crash_scenario", json.dumps(spec)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def _lines(text: str) -> list[dict[str, Any]]:
    out = []
    for line in text.splitlines():
        if line.startswith("{"):
            out.append(json.loads(line))
    return out


def run_case(case: Case, base: Path, sandbox: ServerProcess, moto: str | None) -> Outcome:
    started = time.monotonic()
    work = base / "cases" / case.slug
    work.mkdir(parents=True)
    spec: dict[str, Any] = {
        "host": case.host,
        "point": case.point.name,
        "dir": str(work),
        "sandbox_url": sandbox.url,
        "sandbox_root": str(sandbox.root),
        "workspace": case.slug,
        "moto": moto,
    }
    out = Outcome(work=work)
    crash = _child({**spec, "attempt": "crash"})
    if case.point.name == "lambda.lease_expiry":
        _lease_expiry(crash, spec, work, out)
    else:
        stdout, stderr = crash.communicate(timeout=90)
        out.crash, out.crash_rc, out.stderr = _lines(stdout), crash.returncode, stderr[-3000:]
        offset = LEASE_MS + 1_000  # a new invocation after the killed one's lease ran out
        recover = _child({**spec, "attempt": "recover", "lease_offset_ms": offset})
        stdout, stderr = recover.communicate(timeout=90)
        out.recover, out.recover_rc = _lines(stdout), recover.returncode
        out.stderr += stderr[-3000:]
    out.seconds = time.monotonic() - started
    return out


def _lease_expiry(
    crash: subprocess.Popen[str], spec: dict[str, Any], work: Path, out: Outcome
) -> None:
    """The holder stalls mid-request past its lease; a new invocation takes the actor over
    and finishes everything; then the stale holder wakes up and tries to commit."""
    assert crash.stdout is not None
    for line in crash.stdout:
        out.crash.append(json.loads(line))
        if "paused" in out.crash[-1]:
            break
    offset = LEASE_MS + 1_000
    recover = _child({**spec, "attempt": "recover", "lease_offset_ms": offset})
    stdout, stderr = recover.communicate(timeout=90)
    out.recover, out.recover_rc, out.stderr = _lines(stdout), recover.returncode, stderr[-3000:]
    (work / "resume").touch()
    for line in crash.stdout:  # it stops by itself once its commit is refused
        out.crash.append(json.loads(line))
        if "commit_error" in out.crash[-1]:
            break
    with contextlib.suppress(ProcessLookupError):
        crash.send_signal(signal.SIGKILL)
    stdout, stderr = crash.communicate(timeout=30)
    out.crash += _lines(stdout)
    out.crash_rc = crash.returncode
    out.stderr += stderr[-3000:]
    final = _child({**spec, "attempt": "recover", "lease_offset_ms": 2 * offset})
    stdout, stderr = final.communicate(timeout=90)
    out.final = _lines(stdout)
    out.stderr += stderr[-3000:]


@pytest.fixture(scope="module")
def outcomes(
    request: pytest.FixtureRequest,
    sandbox: ServerProcess,
    moto: str | None,
    base: Path,
) -> dict[str, Outcome]:
    cases = _selected(request)
    with ThreadPoolExecutor(WORKERS) as pool:
        futures = {c.id: pool.submit(run_case, c, base, sandbox, moto) for c in cases}
        results = {cid: f.result() for cid, f in futures.items()}
    covered: dict[str, list[str]] = {}
    for case in cases:
        covered.setdefault(case.host, []).append(case.point.name)
    request.config.stash[COVERAGE] = covered
    return results


COVERAGE = pytest.StashKey[dict[str, list[str]]]()


def _effects(work: Path) -> list[str]:
    path = work / "effects.log"
    return path.read_text().splitlines() if path.exists() else []


def _settled_once(work: Path) -> list[str]:
    """From every returned commit of both processes: no submission written again after
    it settled."""
    problems: list[str] = []
    settled: dict[int, str] = {}
    for line in (work / "commits.jsonl").read_text().splitlines():
        record = json.loads(line)
        for sub_id, status, _request in record["subs"]:
            if sub_id in settled:
                problems.append(f"submission {sub_id} rewritten ({status}) after {settled[sub_id]}")
            if status in ("done", "unanswered"):
                settled[sub_id] = status
    return problems


@pytest.mark.timeout(900)  # the first test waits for the whole selection (module fixture)
@pytest.mark.parametrize("case", _params())
def test_a_kill_at_the_point_loses_nothing_and_repeats_nothing(
    case: Case, outcomes: dict[str, Outcome], sandbox: ServerProcess
) -> None:
    out = outcomes[case.id]
    context = f"{case.id}: stderr={out.stderr}"
    if case.point.name == "lambda.lease_expiry":
        # The stale holder's first commit after the take-over is refused: its session is
        # poisoned and it stops (or it is killed if it does not).
        assert out.crash_rc != 0, context
    else:
        assert out.crash_rc == -signal.SIGKILL, context
    reached = out.said("reached", out.crash) + out.said("paused", out.crash)
    assert reached == [case.point.name], f"point not reached: {context}"
    assert out.recover_rc == 0, context
    (report,) = out.said("report")
    assert report["problems"] == [], report["problems"]
    subs: dict[str, list[str]] = report["submissions"]
    for request_id, statuses in subs.items():
        assert len(statuses) == 1, f"request {request_id} has submissions {statuses}"
        assert statuses[0] in ("done", "unanswered"), (request_id, statuses)
    assert subs["r1"] == ["done"] and subs["f1"] == ["done"] and subs["r2"] == ["unanswered"]
    assert subs["r3"] == ["done"], subs
    for prefix in ("subagent:", "reminder:"):
        found = [s for r, s in subs.items() if r.startswith(prefix)]
        assert found == [["done"]], (prefix, subs)
    # The schedule's first occurrence submitted exactly once, by its request id, and the
    # next one armed a minute later (killed before or after the occurrence's commit).
    (schedule,) = report["schedules"]
    fired = [r for r in subs if r.startswith("schedule:")]
    assert len(fired) == 1 and subs[fired[0]] == ["done"], subs
    _, task_id, at = fired[0].split(":")
    assert int(task_id) == schedule["id"], (fired, schedule)
    assert schedule["status"] == "waiting", schedule
    assert schedule["checkpoint"]["due"] == int(at) + 60_000, schedule
    assert (schedule["checkpoint"]["fired"], schedule["checkpoint"]["skipped"]) == (1, 0), schedule
    if case.host == "lambda":
        assert subs["mail-1"] == ["done"], subs
    assert (report["owned"], report["forks"], report["reminders"]) == (1, 1, 1), report
    assert report["compactions"] >= 1, report

    work = out.work
    effects = _effects(work)
    results = report["tool_results"]
    unsafe = [e for e in effects if e.startswith("unsafe start")]
    assert len(unsafe) <= 1, effects  # unsafe: at most once
    if unsafe and not any(e.startswith("unsafe end") for e in effects):
        assert results["call_unsafe"] is True, results  # told it was interrupted
    assert any(e.startswith("safe end") for e in effects), effects  # safe: at least once
    assert results["call_safe"] is False, report["tool_texts"]
    asks = [e for e in effects if e.startswith("ask start")]
    assert len(asks) == 1, effects  # approved once: the tool ran exactly once (invariant 17)
    assert results["call_ask"] is False, report["tool_texts"]
    marker = sandbox.root / case.slug / "rec_effects.txt"
    rec = marker.read_text().splitlines() if marker.exists() else []
    if results["call_rec"]:
        # Killed after the intent, before the command reached the sandbox: the op log has
        # no record, so (invariant 7) the model is told it was interrupted; it never ran.
        assert "no record of the operation" in report["tool_texts"]["call_rec"], report
        assert rec == [], rec
    else:
        assert rec == ["run"], rec  # recoverable: exactly once
    assert _settled_once(work) == []
    if case.host == "do":
        (alarm,) = out.said("alarm_only")
        assert alarm["armed"] is not None, "the killed isolate left no alarm"
        if case.point.name.startswith("do."):
            assert "r1" in alarm["settled"], alarm  # the alarm alone finished the run
    if case.point.name == "lambda.lease_expiry":
        errors = out.said("commit_error", out.crash)
        assert errors == ["LeaseLost"], f"the stale holder's commit was not refused: {out.crash}"
        (final,) = out.said("report", out.final)
        assert final == report, "the stale holder changed the committed state"
