"""The performance suite: perdure beside the peers a user would pick instead.

Run: ``python tests/bench/suite.py`` (``--runs K`` timed runs per measurement, default 5;
``--quick`` a seconds-long smoke version; ``--json PATH``; ``--no-peers``;
``--only agent_loop,long_run,...``). The peers come from the ``bench`` extra
(``pip install -e '.[bench]'``); without them only perdure and the floor run.

Workloads (a *round* is one model response of a 100-character text plus one tool call,
and one tool execution returning 2 KB, each durably recorded):

* ``agent_loop``  200 rounds: perdure, LangGraph (latest outputs in the state, and a
  growing transcript) and DBOS; ms/round overall, over rounds 1-20 and 181-200, and —
  in one extra, untimed run with every SQLite statement traced — commits, statements
  per commit and bytes written per round.
* ``long_run``    2,000 rounds, first vs last 100 (LangGraph with latest outputs: its
  growing-transcript state is quadratic and would take minutes alone).
* ``recovery``    perdure: a storage with 1,000 conversations, 100,000 entries and 500
  live tasks, from process start to the first resumed phase; LangGraph and DBOS: a
  200-round run crashed (``os._exit``) in round 100's tool, from process start until
  that tool runs again.
* ``concurrency`` 1,000 conversations x 20 rounds in one perdure process: rounds/s and
  peak RSS.
* ``host``        the local host's HTTP API, 100 concurrent clients on loopback, each
  submitting inputs the scripted model answers at once and long-polling them to
  ``done``: submissions/s and acceptance latency p50/p99.
* ``floor``       raw sqlite3, one small INSERT + UPDATE per transaction.
* ``edge``        what a tool round costs at the edge, counted (not timed): on the AWS
  host on moto (``tests/bench/edge_aws.py``), per Lambda invocation calling one safe or
  one unsafe tool, DynamoDB calls, transactions and write units, S3 and Scheduler calls;
  on a Durable Object (the CPython ``ctx.storage`` stand-in), SQL statements, rows
  written and read, ``transactionSync`` and alarm calls.

Everyone runs on SQLite, WAL, ``synchronous=NORMAL``; each system's connection is
asked for both settings and the answers are printed. Each timed measurement runs in a
fresh process on a fresh file; the table shows medians and the ratio to perdure.
Every system starts from bytecode: the peers' is compiled at install, perdure's own
modules are compiled by the suite before its first child (see ``compile_bytecode``).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

__all__ = ["Config", "main", "run_suite"]

WORKLOADS = ("floor", "agent_loop", "long_run", "recovery", "concurrency", "host", "edge")


@dataclass
class Config:
    runs: int = 5
    loop_rounds: int = 200
    window: int = 20  # rounds at each end of the agent loop
    long_rounds: int = 2000
    long_window: int = 100
    conversations: int = 1000
    entries: int = 100_000
    live: int = 500
    peer_crash_rounds: int = 200
    conc_conversations: int = 1000
    conc_rounds: int = 20
    host_clients: int = 100
    host_rounds: int = 20
    floor_commits: int = 3000
    edge_rounds: int = 10
    peers: bool = True
    only: tuple[str, ...] = WORKLOADS

    @classmethod
    def quick(cls) -> Config:
        return cls(
            runs=1,
            loop_rounds=10,
            window=3,
            long_rounds=0,
            conversations=20,
            entries=400,
            live=5,
            peer_crash_rounds=6,
            conc_conversations=10,
            conc_rounds=3,
            host_clients=5,
            host_rounds=2,
            floor_commits=200,
            edge_rounds=2,
        )


def peers_installed() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("dbos", "langgraph"))


# --------------------------------------------------------------------------- children


def _child(kind: str, args: dict[str, Any]) -> dict[str, Any]:
    """Run one measurement in this (fresh) process."""
    path = Path(args["path"])
    counted = bool(args.get("count"))
    if counted:
        from tests.bench.sqltrace import install, written_bytes

        counts = install()
        wrote = written_bytes()
    out: dict[str, Any]
    if kind == "perdure_loop":
        from tests.bench.bench_long_run import long_run
        from tests.bench.perdure_side import open_storage

        async def loop() -> dict[str, Any]:
            storage, read_back = await open_storage(path)
            commits: list[tuple[float, CommitShape]] = []  # every commit, as it landed
            if counted:
                commit = storage.commit

                async def traced(writes: Any) -> int:
                    seq = await commit(writes)
                    commits.append((time.perf_counter(), commit_shape(writes)))
                    return seq

                storage.commit = traced  # type: ignore[method-assign]
            run = await long_run(path, args["rounds"], storage=storage, replay=args["replay"])
            # Commits from round 1's model call to the final answer's: the tool rounds'
            # (not the submission, first preparation or answer) and the compactions'.
            inside = [c for t, c in commits if run.round_starts[0] <= t < run.round_starts[-1]]
            kinds = classify_commits(inside)
            return {
                "pragmas": read_back,
                "stamps": run.round_starts,
                "seconds": run.seconds,
                "compactions": run.compactions,
                "compaction_commits": kinds.count("compaction"),
                "round_commits": kinds.count("round"),
            }

        out = asyncio.run(loop())
    elif kind == "langgraph_loop":
        from tests.bench.peers import langgraph_loop

        out = langgraph_loop(
            path,
            args["rounds"],
            variant=args.get("variant", "latest"),
            crash_at=args.get("crash_at"),
            resume=bool(args.get("resume")),
        )
    elif kind == "dbos_loop":
        from tests.bench.peers import dbos_loop

        out = dbos_loop(
            path, args["rounds"], crash_at=args.get("crash_at"), resume=bool(args.get("resume"))
        )
    elif kind == "perdure_store":
        from tests.bench.perdure_side import build_recovery_store

        out = asyncio.run(
            build_recovery_store(
                path,
                conversations=args["conversations"],
                entries=args["entries"],
                live=args["live"],
            )
        )
    elif kind == "perdure_recover":
        from tests.bench.perdure_side import recover

        out = asyncio.run(recover(path, args["main_wall"]))
    elif kind == "perdure_concurrency":
        from tests.bench.perdure_side import concurrency

        out = asyncio.run(
            concurrency(path, conversations=args["conversations"], rounds=args["rounds"])
        )
    else:
        raise SystemExit(f"unknown child {kind}")
    if counted:
        out["commits"], out["statements"] = counts.snapshot()
        out["bytes_written"] = written_bytes() - wrote
    return out


# --------------------------------------------------------------------------- commit classes


@dataclass(frozen=True)
class CommitShape:
    """What one perdure commit wrote, as far as telling its purpose goes: the kinds of
    its entries, and ``(id, kind, state, phase)`` of each task record."""

    entries: tuple[str, ...]
    tasks: tuple[tuple[int, str, str, str | None], ...]


def commit_shape(writes: Any) -> CommitShape:
    from core.records import Entry, Task

    tasks = []
    for w in writes:
        if isinstance(w, Task):
            cp = w.checkpoint
            phase = cp.get("phase") if isinstance(cp, dict) else None
            tasks.append((w.id, w.kind, type(w.state).__name__, phase))
    return CommitShape(
        tuple(w.kind for w in writes if isinstance(w, Entry)),
        tuple(tasks),  # type: ignore[arg-type]
    )


def classify_commits(commits: list[CommitShape]) -> list[str]:
    """``round`` or ``compaction`` for each commit of a run, in order.

    A commit is a compaction's when it writes a compaction task or a summary entry and
    no model answer or tool result: the summary's progress and settling, and the
    hand-over that places a summary at the post-tools boundary (a plain round merges its
    hand-over into its last tool result's commit; a queued summary is placed by the
    generation's own ``tools`` phase instead). Two more are the landing's: the wake of
    the generation that hand-over ends (the commit that only reserves it for its
    ``tools`` phase) and the successor's ``prepare`` commit (a plain round's successor
    is pinned at ``request`` by the hand-over; one placed after a summary plans anew, on
    the context the summary starts). A round in which a compaction *starts* has no
    commit of its own: the start rides in the round's last result commit, which counts
    as the round's.
    """
    from core.harness.compaction import COMPACTION
    from core.harness.runs import GENERATION

    def answers(c: CommitShape) -> bool:
        return any(k in ("assistant", "tool_result") for k in c.entries)

    landing: set[int] = set()  # generations a summary's hand-over ended or created
    for c in commits:
        if "compaction" in c.entries and not answers(c):
            landing |= {
                t[0]
                for t in c.tasks
                if t[1] == GENERATION and (t[2] == "Terminal" or t[3] == "prepare")
            }
    out = []
    for c in commits:
        compaction = not answers(c) and (
            "compaction" in c.entries or any(t[1] == COMPACTION for t in c.tasks)
        )
        landed = (
            all(k == "system" for k in c.entries)  # a pin may record a prompt change
            and len(c.tasks) == 1
            and c.tasks[0][1] == GENERATION
            and c.tasks[0][0] in landing
            and c.tasks[0][2:] in (("Running", "tools"), ("Running", "request"))
        )
        out.append("compaction" if compaction or landed else "round")
    return out


def _spawn(kind: str, **args: Any) -> dict[str, Any]:
    """Run a child; its last stdout line is its JSON answer. ``spawned_wall`` is
    ``time.time()`` just before the process was started."""
    spawned = time.time()
    proc = subprocess.run(
        [sys.executable, __file__, "--child", kind, json.dumps(args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=600,
    )
    if args.get("crash_at") is not None and not args.get("resume"):
        if proc.returncode != 1:
            raise RuntimeError(f"{kind} should have crashed: {proc.returncode}\n{proc.stderr}")
        return {"crashed": True}
    if proc.returncode != 0:
        raise RuntimeError(f"{kind} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    out["spawned_wall"] = spawned
    return out


# --------------------------------------------------------------------------- measurements


def _per_round(stamps: list[float], first: int, last: int) -> float:
    """Mean ms per round over rounds ``first..last`` (1-based), from the stamps taken
    as each round's model call starts (``stamps[k]`` starts round k+1)."""
    return (stamps[last] - stamps[first - 1]) / (last - first + 1) * 1000


@dataclass
class Row:
    workload: str
    system: str
    metrics: dict[str, float] = field(default_factory=dict)
    runs: dict[str, list[float]] = field(default_factory=dict)
    notes: dict[str, Any] = field(default_factory=dict)

    def add(self, **values: float) -> None:
        for key, value in values.items():
            self.runs.setdefault(key, []).append(value)

    def finish(self) -> Row:
        self.metrics = {k: statistics.median(v) for k, v in self.runs.items()}
        return self


def _loop_systems(cfg: Config, long: bool) -> list[tuple[str, str, dict[str, Any]]]:
    systems: list[tuple[str, str, dict[str, Any]]] = [
        ("perdure (safe tool)", "perdure_loop", {"replay": "safe"}),
    ]
    if not long:
        systems.append(("perdure (unsafe tool)", "perdure_loop", {"replay": "unsafe"}))
    if cfg.peers:
        systems.append(("langgraph (latest outputs)", "langgraph_loop", {"variant": "latest"}))
        if not long:
            systems.append(
                ("langgraph (growing transcript)", "langgraph_loop", {"variant": "growing"})
            )
        systems.append(("dbos (model step + tool step)", "dbos_loop", {}))
    return systems


def loop_rows(cfg: Config, tmp: Path, *, long: bool) -> list[Row]:
    rounds = cfg.long_rounds if long else cfg.loop_rounds
    window = cfg.long_window if long else cfg.window
    workload = "long_run" if long else "agent_loop"
    rows = []
    for system, kind, extra in _loop_systems(cfg, long):
        row = Row(workload, system)
        for n in range(cfg.runs):
            out = _spawn(
                kind, path=str(tmp / f"{workload}-{kind}-{n}.sqlite"), rounds=rounds, **extra
            )
            stamps = out["stamps"]
            row.add(
                ms_per_round=out["seconds"] / rounds * 1000,
                ms_first=_per_round(stamps, 1, window),
                ms_last=_per_round(stamps, rounds - window + 1, rounds),
            )
            row.notes["pragmas"] = out["pragmas"]
            if "checkpoint_bytes" in out:
                row.notes["last_checkpoint_bytes"] = out["checkpoint_bytes"]
        if not long:  # one traced run: what a round costs in SQL and bytes
            out = _spawn(
                kind, path=str(tmp / f"count-{kind}.sqlite"), rounds=rounds, count=True, **extra
            )
            row.notes["commits_per_round"] = round(out["commits"] / rounds, 2)
            if "compaction_commits" in out:  # perdure: its tool rounds' commits, apart
                row.notes["compaction_commits_per_round"] = round(
                    out["compaction_commits"] / rounds, 2
                )
                row.notes["tool_round_commits_per_round"] = round(out["round_commits"] / rounds, 2)
                row.notes["commits_in_rounds"] = (
                    f"{out['round_commits']} tool round + {out['compaction_commits']} compaction"
                    f" ({out['compactions']} compaction(s) in {rounds} rounds)"
                )
            row.notes["statements_per_commit"] = round(
                out["statements"] / max(1, out["commits"]), 2
            )
            row.notes["bytes_per_round"] = round(out["bytes_written"] / rounds)
        rows.append(row.finish())
    return rows


def recovery_rows(cfg: Config, tmp: Path) -> list[Row]:
    rows = []
    store = tmp / "recovery-store.sqlite"
    built = _spawn(
        "perdure_store",
        path=str(store),
        conversations=cfg.conversations,
        entries=cfg.entries,
        live=cfg.live,
    )
    row = Row("recovery", "perdure")
    row.notes["store"] = (
        f"{cfg.conversations} conversations, {cfg.entries} entries, "
        f"{built['live_tasks']} live tasks, built in {built['seconds']:.1f} s"
    )
    for n in range(cfg.runs):
        copy = tmp / f"recovery-{n}.sqlite"
        shutil.copyfile(store, copy)
        for suffix in ("-wal", "-shm"):
            if Path(f"{store}{suffix}").exists():
                shutil.copyfile(f"{store}{suffix}", f"{copy}{suffix}")
        out = _spawn("perdure_recover", path=str(copy), main_wall=0.0)
        row.add(
            ms_to_first_phase=(out["first_phase_wall"] - out["spawned_wall"]) * 1000,
            ms_open_to_first_phase=out["open_storage_ms"]
            + out["open_harness_ms"]
            + out["resume_to_phase_ms"],
            open_harness_ms=out["open_harness_ms"],
        )
        row.notes["pragmas"] = out["pragmas"]
        row.notes["live_tasks_after_open"] = out["live_tasks"]
    rows.append(row.finish())
    if cfg.peers:
        k = cfg.peer_crash_rounds // 2
        for system, kind in (
            ("langgraph (latest outputs)", "langgraph_loop"),
            ("dbos (model step + tool step)", "dbos_loop"),
        ):
            row = Row("recovery", system)
            row.notes["store"] = f"one {cfg.peer_crash_rounds}-round run crashed in round {k + 1}"
            for n in range(cfg.runs):
                path = str(tmp / f"recovery-{kind}-{n}.sqlite")
                _spawn(kind, path=path, rounds=cfg.peer_crash_rounds, crash_at=k)
                out = _spawn(kind, path=path, rounds=cfg.peer_crash_rounds, resume=True)
                row.add(ms_to_first_phase=(out["resumed_wall"] - out["spawned_wall"]) * 1000)
                row.notes["pragmas"] = out["pragmas"]
            rows.append(row.finish())
    return rows


def concurrency_rows(cfg: Config, tmp: Path) -> list[Row]:
    row = Row("concurrency", "perdure")
    row.notes["shape"] = f"{cfg.conc_conversations} conversations x {cfg.conc_rounds} rounds"
    row.notes["collector"] = "the local host's serving settings (runtimes.local.ServingCollector)"
    for n in range(cfg.runs):
        out = _spawn(
            "perdure_concurrency",
            path=str(tmp / f"conc-{n}.sqlite"),
            conversations=cfg.conc_conversations,
            rounds=cfg.conc_rounds,
        )
        row.add(rounds_per_s=out["rounds_per_s"], peak_rss_mb=out["peak_rss_mb"])
        written = out["writes_per_round"]
        if written:  # exact counts (Linux), unlike the timings
            row.add(
                write_calls_per_round=written["syscw"],
                kib_written_per_round=written["wchar"] / 1024,
            )
        row.notes["pragmas"] = out["pragmas"]
    return [row.finish()]


def host_rows(cfg: Config) -> list[Row]:
    from tests.bench.bench_local_host import run_bench

    row = Row("host", "perdure (local host, HTTP)")
    row.notes["shape"] = (
        f"{cfg.host_clients} concurrent clients x {cfg.host_rounds} submissions, answered at once"
    )
    for _ in range(cfg.runs):
        r = run_bench(
            actors=cfg.host_clients,
            rounds=cfg.host_rounds,
            tools=0,
            concurrency=cfg.host_clients,
            idle_s=30.0,
            wait_eviction=False,
            raw_client=True,  # httpx with 100 pooled connections measured itself
        )
        row.add(
            submissions_per_s=r.submissions_per_s,
            accept_p50_ms=r.accept_p50_ms,
            accept_p99_ms=r.accept_p99_ms,
            accept_p99_active_ms=r.accept_p99_active_ms,
        )
    row.notes["pragmas"] = {"journal_mode": "WAL", "synchronous": "NORMAL (HostConfig default)"}
    return [row.finish()]


def floor_rows(cfg: Config, tmp: Path) -> list[Row]:
    import sqlite3

    from tests.bench.bench_kernel import raw_floor
    from tests.bench.sqltrace import pragmas

    row = Row("floor", "raw sqlite3 (INSERT+UPDATE per txn)")
    for n in range(cfg.runs):
        path = tmp / f"floor-{n}.sqlite"
        row.add(ms_per_commit=raw_floor(path, cfg.floor_commits))
        conn = sqlite3.connect(str(path))
        conn.execute("PRAGMA synchronous = NORMAL")  # what raw_floor set on its connection
        row.notes["pragmas"] = pragmas(conn)
        conn.close()
    return [row.finish()]


def edge_rows(cfg: Config) -> list[Row]:
    """Counts, so one run is exact: the AWS host's calls per tool round (moto)."""
    for name, value in {
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        os.environ.setdefault(name, value)  # fake: moto answers, botocore must not look
    from moto import mock_aws

    from tests.bench.edge_aws import measure

    rows: list[Row] = []
    for tool in ("safe", "unsafe"):
        with mock_aws():
            cost = asyncio.run(measure(tool, rounds=cfg.edge_rounds, actors=2))
        row = Row("edge", f"perdure on AWS (moto), {tool} tool")
        row.add(**{k: cost[k] for k in ("dynamodb_calls", "transactions", "wru")})
        row.notes["per_round"] = {
            k: round(v, 2) for k, v in cost.items() if k in ("s3_calls", "scheduler_calls")
        }
        row.notes["operations"] = {k: round(v, 2) for k, v in cost.items() if "." in k}
        row.notes["pragmas"] = {"journal_mode": "WAL", "synchronous": "NORMAL (replica default)"}
        rows.append(row.finish())
    rows.extend(durable_object_edge_rows(cfg))
    return rows


def durable_object_edge_rows(cfg: Config) -> list[Row]:
    """The Durable Object's counts per tool round on the CPython ``ctx.storage`` stand-in
    (the same workload ``tests/pyodide/run.py --only-round-costs`` runs in Pyodide)."""
    from tests.pyodide.run import cpython_round_costs

    with tempfile.TemporaryDirectory(prefix="perdure-edge-") as tmp:
        costs = asyncio.run(cpython_round_costs(Path(tmp), rounds=max(10, cfg.edge_rounds * 5)))
    rows: list[Row] = []
    for tool in ("safe", "unsafe"):
        cost = costs[tool]
        row = Row("edge", f"perdure on a Durable Object (stand-in), {tool} tool")
        # Names of their own: a transactionSync is no DynamoDB transaction to compare to.
        row.add(
            sql_statements=cost["statements"],
            rows_written=cost["rows_written"],
            transaction_syncs=cost["transactions"],
        )
        row.notes["per_round"] = {
            k: round(cost[k], 2) for k in ("alarm_calls", "rows_read", "cpu_ms_per_round")
        }
        row.notes["pragmas"] = {"journal_mode": "WAL", "synchronous": "NORMAL (the stand-in's)"}
        rows.append(row.finish())
    return rows


# --------------------------------------------------------------------------- report


def compile_bytecode() -> None:
    """Compile perdure's own modules to bytecode before any child starts, as installing
    a package does: the peers run from site-packages compiled at install, and a child of
    an environment with ``PYTHONDONTWRITEBYTECODE`` would otherwise compile every module
    of the repository from source at each start (about a third of the recovery time)."""
    import compileall

    for package in ("core", "runtimes", "remote_env", "tests"):
        compileall.compile_dir(ROOT / package, quiet=1)


def run_suite(cfg: Config) -> dict[str, Any]:
    started = time.perf_counter()
    compile_bytecode()
    rows: list[Row] = []
    took: dict[str, float] = {}  # seconds per workload: where the suite's time goes
    with tempfile.TemporaryDirectory(prefix="perdure-suite-") as name:
        tmp = Path(name)
        workloads: dict[str, Any] = {
            "floor": lambda: floor_rows(cfg, tmp),
            "agent_loop": lambda: loop_rows(cfg, tmp, long=False),
            "long_run": lambda: loop_rows(cfg, tmp, long=True) if cfg.long_rounds else [],
            "recovery": lambda: recovery_rows(cfg, tmp),
            "concurrency": lambda: concurrency_rows(cfg, tmp),
            "host": lambda: host_rows(cfg),
            "edge": lambda: edge_rows(cfg),
        }
        for workload, measure in workloads.items():
            if workload in cfg.only:
                began = time.perf_counter()
                rows += measure()
                took[workload] = round(time.perf_counter() - began, 1)
    return {
        "config": {k: v for k, v in vars(cfg).items()},
        "seconds": round(time.perf_counter() - started, 1),
        "seconds_per_workload": took,
        "peers": cfg.peers,
        "rows": [
            {
                "workload": r.workload,
                "system": r.system,
                "median": r.metrics,
                "runs": r.runs,
                "notes": r.notes,
            }
            for r in rows
        ],
        "targets": targets(rows),
    }


def _metric(rows: list[Row], workload: str, prefix: str, key: str) -> float | None:
    for r in rows:
        if r.workload == workload and r.system.startswith(prefix) and key in r.metrics:
            return r.metrics[key]
    return None


def targets(rows: list[Row]) -> list[dict[str, Any]]:
    """The issue's acceptance targets, each judged on numbers from this run."""
    out: list[dict[str, Any]] = []

    def check(name: str, value: float | None, limit: float | None, le: bool = True) -> None:
        if value is None or limit is None:
            return
        met = value <= limit if le else value >= limit
        out.append({"target": name, "value": round(value, 3), "limit": round(limit, 3), "met": met})

    ours = _metric(rows, "agent_loop", "perdure (safe", "ms_per_round")
    lg = _metric(rows, "agent_loop", "langgraph (latest", "ms_per_round")
    dbos = _metric(rows, "agent_loop", "dbos", "ms_per_round")
    check("agent loop ms/round <= 1.0x LangGraph (latest outputs)", ours, lg)
    check("agent loop ms/round <= 0.5x DBOS", ours, dbos * 0.5 if dbos else None)
    for r in rows:
        # Tool rounds' commits: those from round 1's model call to the answer's, but the
        # background compactions' own (see classify_commits; reported beside them).
        for replay in ("safe", "unsafe"):
            if r.workload == "agent_loop" and r.system == f"perdure ({replay} tool)":
                check(
                    f"commits per {replay} tool round <= 2",
                    r.notes.get("tool_round_commits_per_round"),
                    2.0,
                )
    check(
        "recovery ms to first resumed phase <= 300",
        _metric(rows, "recovery", "perdure", "ms_to_first_phase"),
        300.0,
    )
    check(
        "concurrency rounds/s >= 1000",
        _metric(rows, "concurrency", "perdure", "rounds_per_s"),
        1000.0,
        le=False,
    )
    check(
        "host submissions/s >= 300",
        _metric(rows, "host", "perdure", "submissions_per_s"),
        300.0,
        le=False,
    )
    check("host acceptance p99 ms <= 100", _metric(rows, "host", "perdure", "accept_p99_ms"), 100.0)
    for tool, transactions, wru in (("safe", 2.0, 12.0), ("unsafe", 3.0, 20.0)):
        edge = f"perdure on AWS (moto), {tool} tool"
        check(
            f"AWS {tool} tool round: DynamoDB transactions <= {transactions:.0f}",
            _metric(rows, "edge", edge, "transactions"),
            transactions,
        )
        check(f"AWS {tool} tool round: WRU <= {wru:.0f}", _metric(rows, "edge", edge, "wru"), wru)
        calls = next((r.notes["per_round"] for r in rows if r.system == edge), None)
        check(
            f"AWS {tool} tool round: Scheduler calls = 0 (deadline unchanged)",
            None if calls is None else calls["scheduler_calls"],
            0.0,
        )
        durable = f"perdure on a Durable Object (stand-in), {tool} tool"
        alarms = next((r.notes["per_round"] for r in rows if r.system == durable), None)
        check(
            f"Durable Object {tool} tool round: alarm calls = 0 (deadline unchanged)",
            None if alarms is None else alarms["alarm_calls"],
            0.0,
        )
    return out


def render(result: dict[str, Any]) -> str:
    lines = [
        f"perdure performance suite — medians of {result['config']['runs']} run(s), "
        f"{result['seconds']} s" + ("" if result["peers"] else " — PEERS NOT RUN")
    ]
    by_workload: dict[str, list[dict[str, Any]]] = {}
    for row in result["rows"]:
        by_workload.setdefault(row["workload"], []).append(row)
    took = result.get("seconds_per_workload", {})
    for workload, rows in by_workload.items():
        lines.append("")
        lines.append(f"== {workload}" + (f" ({took[workload]} s)" if workload in took else ""))
        ours = next((r for r in rows if r["system"].startswith("perdure")), None)
        for row in rows:
            cells = []
            for key, value in row["median"].items():
                cell = f"{key}={value:.3f}" if value < 100 else f"{key}={value:.0f}"
                base = ours["median"].get(key) if ours and row is not ours else None
                if base:
                    cell += f" ({value / base:.2f}x perdure)"
                cells.append(cell)
            lines.append(f"  {row['system']:<38} " + "  ".join(cells))
            extras = {k: v for k, v in row["notes"].items() if k != "pragmas"}
            pragma = row["notes"].get("pragmas", {})
            lines.append(
                f"  {'':<38} read back: journal_mode={pragma.get('journal_mode')} "
                f"synchronous={pragma.get('synchronous')}"
                + "".join(f"; {k}={v}" for k, v in extras.items())
            )
    if result["targets"]:
        lines.append("")
        lines.append("== targets (measured in this run)")
        for t in result["targets"]:
            mark = "MET    " if t["met"] else "NOT MET"
            lines.append(f"  {mark} {t['target']}: {t['value']} (limit {t['limit']})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int)
    parser.add_argument("--quick", action="store_true", help="a seconds-long smoke version")
    parser.add_argument("--json", type=Path, default=Path("bench-suite.json"))
    parser.add_argument("--no-peers", action="store_true")
    parser.add_argument("--only", help=f"comma-separated subset of {','.join(WORKLOADS)}")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        kind, raw = args.child
        payload = json.loads(raw)
        if kind == "perdure_recover":
            payload["main_wall"] = time.time()
        out = _child(kind, payload)
        if kind.endswith("_loop") and out.get("resumed") is not None:
            # Convert the child's perf_counter stamp to wall time for the parent.
            out["resumed_wall"] = time.time() - (time.perf_counter() - out["resumed"])
        print(json.dumps(out), flush=True)
        os._exit(0)  # no lingering threads (DBOS workers) or harness shutdown timed
    cfg = Config.quick() if args.quick else Config()
    if args.runs:
        cfg.runs = args.runs
    cfg.peers = not args.no_peers and peers_installed()
    if args.only:
        cfg.only = tuple(args.only.split(","))
    result = run_suite(cfg)
    if not cfg.peers:
        print(
            "peers not run: "
            + (
                "--no-peers"
                if args.no_peers
                else "dbos/langgraph not installed (pip install -e '.[bench]')"
            )
        )
    print(render(result))
    args.json.write_text(json.dumps(result, indent=2))
    print(f"\nJSON: {args.json}")
    return result


if __name__ == "__main__":
    main()
