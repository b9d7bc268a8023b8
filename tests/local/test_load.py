"""Load: many actors x a few tool rounds through the HTTP API from a second process.

Slow (run with ``pytest -m slow``); the full-size figure comes from
``python tests/bench/bench_local_host.py --actors 1000 --rounds 10``.
"""

from __future__ import annotations

from dataclasses import asdict

import pytest

from tests.bench.bench_local_host import run_bench


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_200_actors_with_3_tool_rounds_each_over_http() -> None:
    result = run_bench(actors=200, rounds=3, tools=1, concurrency=64, idle_s=1.0)
    print()  # the figures, for the record (pytest -s)
    for key, value in asdict(result).items():
        print(f"{key:>31}: {value}")
    assert result.requests >= 200 * 3 * 2
    assert result.harnesses_alive_after_eviction == 0  # eviction frees every harness
    assert result.eviction_s < 10
