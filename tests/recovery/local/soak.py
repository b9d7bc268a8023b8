"""The soak: SIGKILL and restart the local host process many times under steady load.

``python -m tests.recovery.local.soak --cycles 200`` (the full run, well under 20 minutes here;
``.ci/run`` runs a shortened one). One host process (``tests.local.host_proc``, on a
fixed loopback port and one data directory) is killed at a random moment of each cycle
and started again at once; a second process (``tests.recovery.local.soak_load``) keeps
inputs coming over HTTP the whole time, retrying with the same request id while the host
is down; every 25th input of a worker goes to a new actor, and the host journals every
new actor's first input (``journal_when_opening=0``), so kills also land around the
admission journal's moves. At the end the load stops, every accepted input is waited
for, the host is stopped and every actor's SQLite is checked (``PRAGMA integrity_check``
and the consistency checker, settled) and counted.

Reported: inputs accepted (and of them answered ``mailed``), answered, unanswered, lost
(accepted, never settled: must be 0), duplicated (a request id with more than one
submission, or a submission placed or answered more than once: must be 0), and p99
latency (first send to settle) of the inputs settled in the ``window`` seconds before
each kill and after each restart (these include time the host was down), and of the
inputs whose wait overlapped no downtime. Exit status 1 if anything was lost or
duplicated or a check failed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from core.testing.consistency import check_consistency, load_world
from runtimes.actor.sqlite import Sqlite3Database
from runtimes.local.sqlite import open_sqlite_storage
from tests.local.support import ROOT, start_host_process, stop
from tests.remote_env.support import free_port

__all__ = ["SoakResult", "run_soak"]


@dataclass
class SoakResult:
    cycles: int
    seconds: float
    accepted: int
    mailed: int  # accepted with no id yet: into the host's admission journal
    answered: int
    unanswered: int
    lost: int
    duplicated: int
    wrong_answers: int
    problems: list[str] = field(default_factory=list)
    p99_before_ms: list[float] = field(default_factory=list)  # per cycle, before the kill
    p99_after_ms: list[float] = field(default_factory=list)  # per cycle, after the restart
    p99_steady_ms: float = 0.0  # inputs whose wait overlapped no downtime
    slowest_ms: float = 0.0
    slowest_spanned_kills: int = 0  # how many kills happened while the slowest one waited

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.wrong_answers or self.problems)

    def summary(self) -> dict[str, Any]:
        def stats(values: list[float]) -> dict[str, float]:
            ordered = sorted(values) or [0.0]
            return {
                "median": round(ordered[len(ordered) // 2], 1),
                "p90": round(ordered[int(0.9 * (len(ordered) - 1))], 1),
                "max": round(ordered[-1], 1),
            }

        body = {k: v for k, v in asdict(self).items() if not k.startswith("p99_")}
        body["p99_steady_ms"] = self.p99_steady_ms
        body["p99_before_kill_ms"] = stats(self.p99_before_ms)
        body["p99_after_restart_ms"] = stats(self.p99_after_ms)
        return body


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] if ordered else 0.0


def _ready(url: str, timeout: float = 30.0) -> float:
    """Wait until the restarted host answers; returns the time it did."""
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/v1/health", timeout=1.0).status_code < 500:
                return time.time()
        except httpx.HTTPError:
            pass
        time.sleep(0.02)
    raise TimeoutError("the host did not come back")


def run_soak(
    cycles: int,
    *,
    data: Path,
    uptime_s: tuple[float, float] = (0.3, 2.0),
    actors: int = 4,
    workers: int = 8,
    window_s: float = 1.0,
    drain_s: float = 90.0,
    seed: int = 15,
    fresh_every: int = 25,
    journal_when_opening: int = 0,
) -> SoakResult:
    rng = random.Random(seed)
    data.mkdir(parents=True, exist_ok=True)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log, stop_file = data.parent / "load.jsonl", data.parent / "load.stop"
    started = time.monotonic()
    # Every new actor's first input journaled, and a new actor every ``fresh_every``
    # inputs of a worker: kills land around the journal's moves too.
    host_args = (
        *("--port", str(port), "--idle", "3600"),
        *("--journal-when-opening", str(journal_when_opening)),
    )
    host, _ = start_host_process(data, *host_args)
    load = subprocess.Popen(
        [
            *(
                sys.executable,
                "-m",
                "tests.recovery.local.soak_load",
                url,
                str(log),
                str(stop_file),
            ),
            *("--actors", str(actors), "--workers", str(workers)),
            *("--fresh-every", str(fresh_every)),
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    kills: list[tuple[float, float]] = []  # (killed at, ready again at), epoch seconds
    try:
        _ready(url)
        for _ in range(cycles):
            time.sleep(rng.uniform(*uptime_s))
            host.send_signal(signal.SIGKILL)
            killed = time.time()
            stop(host)
            host, _ = start_host_process(data, *host_args)
            kills.append((killed, _ready(url)))
        time.sleep(window_s)  # the last restart's "after" window
        stop_file.touch()
        try:
            _, err = load.communicate(timeout=drain_s)
        except subprocess.TimeoutExpired:
            load.kill()  # something never settled: counted as lost below
            _, err = load.communicate()
        if load.returncode not in (0, -signal.SIGKILL):
            raise RuntimeError(f"the load process failed: {err[-3000:]}")
    finally:
        if load.poll() is None:
            load.kill()
            load.communicate()
        if host.poll() is None:
            host.send_signal(signal.SIGTERM)
            try:
                host.wait(15)
            except subprocess.TimeoutExpired:
                host.kill()
            stop(host)
    return _result(cycles, time.monotonic() - started, log, data, kills, window_s)


def _result(
    cycles: int,
    seconds: float,
    log: Path,
    data: Path,
    kills: list[tuple[float, float]],
    window_s: float,
) -> SoakResult:
    accepted: dict[str, tuple[str, int | None]] = {}
    settled: dict[str, dict[str, Any]] = {}
    duplicated = 0
    for line in log.read_text().splitlines():
        record = json.loads(line)
        if "accepted" in record:
            accepted[record["rid"]] = (record["actor"], record["accepted"])
        elif "status" in record:
            if record["rid"] in settled:
                duplicated += 1
            settled[record["rid"]] = record
    mailed = sum(1 for _, sid in accepted.values() if sid is None)
    for rid, (actor, sid) in accepted.items():
        if sid is None and rid in settled:  # answered mailed: the id came with the settle
            accepted[rid] = (actor, settled[rid]["id"])
    wrong = 0
    for rid, record in settled.items():
        text = (record.get("answer") or {}).get("text", "")
        want = "tools done" if record["content"] == "tools:1" else f"echo: hello {rid}"
        if record["status"] == "done" and text != want:
            wrong += 1
    problems, stored_dupes = asyncio.run(_check_actors(sorted(data.glob("*.sqlite")), accepted))
    latencies = [(r["settled"], 1000 * (r["settled"] - r["sent"])) for r in settled.values()]
    before = [_p99([ms for t, ms in latencies if k - window_s <= t < k]) for k, _ in kills]
    after = [_p99([ms for t, ms in latencies if r < t <= r + window_s]) for _, r in kills]
    steady = [
        1000 * (r["settled"] - r["sent"])
        for r in settled.values()
        if not any(r["sent"] <= ready and killed <= r["settled"] for killed, ready in kills)
    ]
    slowest = max(settled.values(), key=lambda r: r["settled"] - r["sent"], default=None)
    spanned = (
        sum(1 for k, _ in kills if slowest["sent"] <= k <= slowest["settled"]) if slowest else 0
    )
    return SoakResult(
        cycles=cycles,
        seconds=round(seconds, 1),
        accepted=len(accepted),
        mailed=mailed,
        answered=sum(1 for r in settled.values() if r["status"] == "done"),
        unanswered=sum(1 for r in settled.values() if r["status"] == "unanswered"),
        lost=len(set(accepted) - set(settled)),
        duplicated=duplicated + stored_dupes,
        wrong_answers=wrong,
        problems=problems,
        p99_before_ms=[round(v, 1) for v in before],
        p99_after_ms=[round(v, 1) for v in after],
        p99_steady_ms=round(_p99(steady), 1),
        slowest_ms=round(1000 * (slowest["settled"] - slowest["sent"]), 1) if slowest else 0.0,
        slowest_spanned_kills=spanned,
    )


async def _check_actors(
    paths: list[Path], accepted: dict[str, tuple[str, int | None]]
) -> tuple[list[str], int]:
    """The consistency checker on every actor file, and the stored side of "exactly
    once": one submission per request id, the one the client was given."""
    problems: list[str] = []
    dupes = 0
    for path in paths:
        storage = await open_sqlite_storage(path)
        db = Sqlite3Database.open(path)
        try:
            problems += [
                f"{path.stem}: {p}" for p in await check_consistency(storage, settled=True, db=db)
            ]
            world = await load_world(storage)
        finally:
            await storage.close()
            await db.close()
        by_rid: dict[str, list[int]] = {}
        for sub in world.submissions.values():
            if sub.request_id is not None:
                by_rid.setdefault(sub.request_id, []).append(sub.id)
        for rid, ids in by_rid.items():
            if len(ids) > 1:
                dupes += 1
                problems.append(f"{path.stem}: request {rid} has submissions {ids}")
            elif rid in accepted and accepted[rid] != (path.stem, ids[0]):
                problems.append(
                    f"{path.stem}: request {rid} stored as {ids[0]}, not {accepted[rid]}"
                )
    return problems, dupes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=200)
    parser.add_argument("--data", type=Path, default=None)
    parser.add_argument("--report", type=Path, default=None, help="write the figures as JSON")
    parser.add_argument("--seed", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="perdure-soak-") as tmp:
        data = args.data or Path(tmp) / "data"
        result = run_soak(args.cycles, data=data, seed=args.seed)
    summary = result.summary()
    print(json.dumps(summary, indent=2))
    if args.report is not None:
        args.report.write_text(json.dumps({**summary, **asdict(result)}, indent=2))
    sys.exit(0 if result.ok else 1)


if __name__ == "__main__":
    main()
