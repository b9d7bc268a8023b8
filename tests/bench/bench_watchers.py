"""Watcher benchmark: the agent loop with 0 and with 100 watchers of its conversation.

Run: ``python tests/bench/bench_watchers.py`` (``--rounds N``, ``--runs K``,
``--watchers W``).

Each watcher is drained by its own task, so every commit's delta frame is delivered to
every watcher while the loop runs. Runs alternate between the two settings (the machine's
noise hits both alike) and the median per-commit times are compared; the target of
issue 4 is a slowdown of at most 20%.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.bench.bench_agent_loop import agent_loop
from tests.bench.bench_kernel import raw_floor


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--watchers", type=int, default=100)
    args = parser.parse_args()
    alone: list[float] = []
    watched: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        floor = statistics.median(raw_floor(root / f"raw{i}.sqlite", 3000) for i in range(3))
        for i in range(args.runs):
            seconds, commits = asyncio.run(agent_loop(root / f"a{i}.sqlite", args.rounds))
            alone.append(seconds / commits * 1000)
            seconds, commits = asyncio.run(
                agent_loop(root / f"w{i}.sqlite", args.rounds, watchers=args.watchers)
            )
            watched.append(seconds / commits * 1000)
    base = statistics.median(alone)
    busy = statistics.median(watched)
    print(f"raw SQLite floor: {floor:.4f} ms/commit")
    print(f"agent loop, no watchers:        {base:.4f} ms/commit ({base / floor:.1f}x floor)")
    print(
        f"agent loop, {args.watchers} watchers:       {busy:.4f} ms/commit "
        f"({busy / floor:.1f}x floor)"
    )
    print(f"slowdown with {args.watchers} watchers: {(busy / base - 1) * 100:+.1f}% (target ≤ 20%)")


if __name__ == "__main__":
    main()
