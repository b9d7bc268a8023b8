"""A seconds-long run of the search benchmark (tests/bench/bench_search.py), so it cannot
rot: every part runs at a tiny size and prints its figures. The figures are not judged
here; tests/remote_env/test_search_bounds.py holds the bounds."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_search_benchmark_runs_at_a_tiny_size() -> None:
    done = subprocess.run(
        [sys.executable, "tests/bench/bench_search.py", "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    for prefix in ("gil: RE2", "gil: Python re"):
        assert any(line.startswith(prefix) for line in lines), done.stdout
    for name in ("grep", "find", "health", "read"):
        assert any(line.startswith(f"stall: {name}: ") for line in lines), done.stdout
    assert sum("stopped_by=" in line for line in lines if line.startswith("rss:")) == 2
