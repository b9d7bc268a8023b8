"""Kernel benchmark: raw SQLite floor vs Session.commit vs a 1,000-task chain.

Run: ``python tests/bench/bench_kernel.py`` (add ``--quick`` for a smoke run).

(a) raw floor: stdlib sqlite3, WAL + synchronous=NORMAL, one INSERT + one UPDATE per
    transaction — what any durable step costs at minimum;
(b) ``Session.commit`` of one task update through SqliteStorage, on each facade;
(c) a chain of 1,000 tasks, each running 3 phases (every phase commits a checkpoint or
    an outcome; the last phase creates the next task), through the Engine.

Targets (issue 2): (b) ≤ 10x (a); (c) ≤ 1.5 s on a 2-core machine. The machine is noisy:
read the ratios, and rerun before believing a regression.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from core.engine import Engine
from core.records import Running, Task
from core.session import Session, Tx
from core.tasks import TaskRegistry, TaskRuntime, define_task
from core.tasks.creation import TaskFactory
from core.testing.clock import VirtualClock
from runtimes.local.sqlite import open_sqlite_storage

LABELS = {"sqlite3": "sqlite3 inline, default", "aiosqlite": "aiosqlite thread"}


def raw_floor(path: Path, n: int) -> float:
    conn = sqlite3.connect(str(path), isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("CREATE TABLE log (id INTEGER PRIMARY KEY, body TEXT)")
    conn.execute("CREATE TABLE state (id INTEGER PRIMARY KEY, step INTEGER)")
    conn.execute("INSERT INTO state VALUES (1, 0)")
    body = '{"phase":"step","n":0,"payload":"' + "x" * 64 + '"}'
    start = time.perf_counter()
    for i in range(n):
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO log (body) VALUES (?)", (body,))
        conn.execute("UPDATE state SET step = ? WHERE id = 1", (i,))
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - start
    conn.close()
    return elapsed / n * 1000


async def session_commits(path: Path, n: int, driver: str) -> float:
    storage = await open_sqlite_storage(path, driver=driver)  # type: ignore[arg-type]
    session = await Session.open(storage, VirtualClock())
    noop = define_task("bench.noop", phases={"step": _never})
    session.task_layer = TaskFactory({"bench.noop": noop}.get)

    async def create(tx: Tx) -> Task:
        return await tx.create_task(noop, {"payload": "x" * 64})

    task = await session.commit(create)
    start = time.perf_counter()
    for i in range(n):
        nxt = replace(task, state=Running({"phase": "step", "n": i}))

        async def update(tx: Tx, nxt: Task = nxt) -> None:
            await tx.put_task(nxt)

        await session.commit(update)
    elapsed = time.perf_counter() - start
    await session.close()
    return elapsed / n * 1000


async def _never(task: Task, rt: TaskRuntime) -> None:
    raise AssertionError("not run")


async def task_chain(path: Path, length: int, driver: str) -> tuple[float, int]:
    async def first(task: Task, rt: TaskRuntime) -> None:
        await rt.checkpoint({"phase": "second"})

    async def second(task: Task, rt: TaskRuntime) -> None:
        await rt.checkpoint({"phase": "third"})

    async def third(task: Task, rt: TaskRuntime) -> None:
        index = int(task.input["i"])  # type: ignore[call-overload,index]

        async def finish(tx: Tx, current: Task) -> object:
            if index + 1 < length:
                await tx.create_task(chain, {"i": index + 1})
            from core.records import Completed

            return Completed(index)

        await rt.commit(finish)

    chain = define_task("bench.chain", phases={"first": first, "second": second, "third": third})
    storage = await open_sqlite_storage(path, driver=driver)  # type: ignore[arg-type]
    engine = await Engine.open(storage, tasks=TaskRegistry([chain]), clock=VirtualClock())
    commits = 0

    def count(_: object) -> None:
        nonlocal commits
        commits += 1

    engine.session.subscribe(count)
    start = time.perf_counter()
    await engine.create_task(chain, {"i": 0})
    engine.resume()
    await engine.wait_for_idle()
    elapsed = time.perf_counter() - start
    await engine.close()
    return elapsed, commits


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke run)")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    n = 300 if args.quick else 3000
    length = 100 if args.quick else 1000
    runs = 1 if args.quick else args.runs

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)

        def fresh(name: str) -> Path:
            fresh.counter += 1  # type: ignore[attr-defined]
            return root / f"{name}-{fresh.counter}.sqlite"  # type: ignore[attr-defined]

        fresh.counter = 0  # type: ignore[attr-defined]
        floor = statistics.median(raw_floor(fresh("raw"), n) for _ in range(runs))
        rows: list[tuple[str, float, str]] = [
            ("(a) raw sqlite3 INSERT+UPDATE per txn", floor, "1.0x")
        ]
        for driver in ("sqlite3", "aiosqlite"):
            ms = statistics.median(
                asyncio.run(session_commits(fresh("session"), n, driver)) for _ in range(runs)
            )
            rows.append(
                (
                    f"(b) Session.commit, one task update [{LABELS[driver]}]",
                    ms,
                    f"{ms / floor:.1f}x",
                )
            )
        for driver in ("sqlite3", "aiosqlite"):
            results = [asyncio.run(task_chain(fresh("chain"), length, driver)) for _ in range(runs)]
            seconds = statistics.median(r[0] for r in results)
            commits = results[0][1]
            per_commit = seconds / commits * 1000
            rows.append(
                (
                    f"(c) {length}-task chain x 3 phases [{LABELS[driver]}]: {seconds:.3f} s, "
                    f"{commits} commits",
                    per_commit,
                    f"{per_commit / floor:.1f}x",
                )
            )

    width = max(len(r[0]) for r in rows)
    print(f"{'benchmark'.ljust(width)}  {'ms/commit':>10}  {'vs floor':>9}")
    for name, ms, ratio in rows:
        print(f"{name.ljust(width)}  {ms:>10.4f}  {ratio:>9}")


if __name__ == "__main__":
    main()
