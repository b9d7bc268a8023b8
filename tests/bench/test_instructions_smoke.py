"""The instruction counter's children run (without valgrind, at a tiny size), so the
figures in docs/performance.md can be measured again."""

from __future__ import annotations

from pathlib import Path

from tests.bench.instructions import ROOT, count, count_later_run, count_open_path


def test_the_counted_children_run_to_the_first_resumed_phase(tmp_path: Path) -> None:
    counts = count(
        ROOT, tmp_path, store={"conversations": 3, "entries": 30, "live": 2}, valgrind=False
    )
    assert set(counts) == {"round", "import", "first_phase"}


def test_the_open_path_child_runs() -> None:
    assert count_open_path(ROOT, valgrind=False) == 0


def test_the_later_run_child_runs(tmp_path: Path) -> None:
    assert count_later_run(ROOT, tmp_path, valgrind=False) == 0
