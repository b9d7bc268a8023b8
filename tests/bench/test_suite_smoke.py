"""A seconds-long run of the performance suite, so it cannot rot.

Every workload runs once at a tiny size (``Config.quick``). perdure and the raw SQLite
floor always run; LangGraph and DBOS run only when the ``bench`` extra is installed
(``pip install -e '.[bench]'``) — without it this test says so and checks perdure alone.
The numbers are not judged here (that is the full suite's job, on a quiet machine):
the test checks that every measurement produced sane values on WAL + NORMAL.
"""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest

from tests.bench.suite import WORKLOADS, Config, peers_installed, render, run_suite


def test_the_suite_runs_every_workload_at_a_tiny_size() -> None:
    cfg = Config.quick()
    cfg.peers = peers_installed()  # see the next test for what it says when they are not
    result = run_suite(cfg)
    rows = result["rows"]
    assert {r["workload"] for r in rows} == set(WORKLOADS) - {"long_run"}  # quick skips it
    for row in rows:
        pragmas = row["notes"]["pragmas"]
        assert pragmas["journal_mode"] == "WAL", row
        assert str(pragmas["synchronous"]).startswith("NORMAL"), row
        assert row["median"] and all(v > 0 for v in row["median"].values()), row
    systems = {r["system"] for r in rows if r["workload"] == "agent_loop"}
    assert {"perdure (safe tool)", "perdure (unsafe tool)"} <= systems
    if cfg.peers:
        assert any(s.startswith("langgraph") for s in systems)
        assert any(s.startswith("dbos") for s in systems)
    loop = {r["system"]: r["notes"] for r in rows if r["workload"] == "agent_loop"}
    for notes in loop.values():
        assert notes["commits_per_round"] > 0 and notes["bytes_per_round"] > 0, notes
    assert result["targets"]
    assert "== agent_loop" in render(result)


def test_the_peers_measured_are_the_pinned_ones() -> None:
    if not peers_installed():
        pytest.skip("bench extra not installed: the smoke run measured perdure and the floor only")
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    pins = pyproject["project"]["optional-dependencies"]["bench"]
    for pin in pins:
        name, wanted = re.fullmatch(r"([A-Za-z0-9_.-]+)==(\S+)", pin).groups()  # type: ignore[union-attr]
        assert version(name) == wanted, f"{name} {version(name)} is installed, {wanted} pinned"
