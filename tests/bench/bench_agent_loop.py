"""Agent loop benchmark: 200 tool rounds of a scripted model, on SQLite WAL + NORMAL.

Run: ``python tests/bench/bench_agent_loop.py`` (``--rounds N``, ``--runs K``).

Each round is one model response asking for one no-op tool call, the tool task, and the
hand-over to the next generation; after the last round the model answers. Prints ms
per tool round, commits per round, and the ratio to the raw SQLite floor measured in
the same run (one INSERT + one UPDATE per transaction). The peers (LangGraph, DBOS) are
measured beside perdure in the same run by ``tests/bench/suite.py``; docs/performance.md
has the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from pydantic import BaseModel

from core.faux import FauxModel, FauxState, faux_message, faux_tool_call
from core.harness import (
    AssistantMessage,
    Harness,
    ModelRequest,
    Registry,
    ToolContext,
    define_extension,
    define_tool,
)
from core.harness.watch import Watch
from runtimes.actor.clock import SystemClock
from runtimes.local.sqlite import open_sqlite_storage
from tests.bench.bench_kernel import raw_floor


class NoArgs(BaseModel):
    pass


async def noop(args: NoArgs, ctx: ToolContext) -> str:
    return "ok"


async def agent_loop(path: Path, rounds: int, watchers: int = 0) -> tuple[float, int]:
    """Seconds for ``rounds`` tool rounds and the commits they took, with ``watchers``
    watches of the conversation drained concurrently."""

    def step(request: ModelRequest, state: FauxState) -> AssistantMessage:
        if state.call_count <= rounds:
            return faux_message(faux_tool_call("noop", {}, id=f"call_{state.call_count}"))
        return faux_message("done")

    faux = FauxModel([step] * (rounds + 1))
    registry = Registry(
        [
            define_extension(
                "bench",
                tools=[
                    define_tool("noop", description="does nothing", parameters=NoArgs, execute=noop)
                ],
            )
        ]
    )
    storage = await open_sqlite_storage(path)
    harness = await Harness.open(storage, models=faux, registry=registry, clock=SystemClock())
    commits = 0

    def count(_: object) -> None:
        nonlocal commits
        commits += 1

    harness.session.subscribe(count)
    root = await harness.root(agent={"model": "faux/faux-1"})
    frames = 0

    async def drain(watch: Watch) -> None:
        nonlocal frames
        async for _ in watch:
            frames += 1

    watches = [await root.watch() for _ in range(watchers)]
    drains = [asyncio.create_task(drain(w)) for w in watches]
    start = time.perf_counter()
    record = await (await root.submit("loop")).wait()
    elapsed = time.perf_counter() - start
    assert record.status == "done", record
    for w in watches:
        w.stop()
    await asyncio.gather(*drains)
    assert frames >= watchers * rounds  # every watcher saw every round
    await harness.close()
    return elapsed, commits


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        floor = statistics.median(
            raw_floor(root / f"raw{i}.sqlite", 3000) for i in range(args.runs)
        )
        results = [
            asyncio.run(agent_loop(root / f"loop{i}.sqlite", args.rounds)) for i in range(args.runs)
        ]
    seconds = statistics.median(r[0] for r in results)
    commits = results[0][1]
    per_round = seconds / args.rounds * 1000
    per_commit = seconds / commits * 1000
    print(f"raw SQLite floor (INSERT+UPDATE per txn): {floor:.4f} ms/commit")
    print(f"agent loop, {args.rounds} tool rounds: {seconds:.3f} s total")
    print(f"  per tool round:     {per_round:.3f} ms  ({per_round / floor:.0f}x floor)")
    print(f"  commits per round:  {commits / args.rounds:.2f}")
    print(f"  per commit:         {per_commit:.4f} ms  ({per_commit / floor:.1f}x floor)")
    print("peers on the same machine class (peers.md): LangGraph 1.6, DBOS 2.3 ms/round")


if __name__ == "__main__":
    main()
