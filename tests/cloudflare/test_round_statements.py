"""SQL statements and rows read per tool round in a Durable Object, counted on the CPython
``ctx.storage`` stand-in (the loop of ``workload.durable_rounds``): a submission in a new
isolate, after the one that ran the actor's first submission was evicted, costs what the
first submission's rounds cost. That is the usual case in a Durable Object, whose isolate
rarely outlives an idle actor (issue 36; docs/performance.md, "At the edge")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.cloudflare.standin import DurableObjectHome
from tests.pyodide.inside import workload

ROUNDS = 20


async def _per_round(path: Path, *, reopened: bool) -> dict[str, Any]:
    home = DurableObjectHome(path)

    def counters() -> dict[str, int]:
        assert home.current is not None
        sql = home.current.sql
        return {"statements": sql.statements, "rows_read": sql.rows_read}

    reopen = home.open if reopened else None
    try:
        return await workload.durable_rounds(
            home.open(), counters, ROUNDS, replay="safe", reopen=reopen
        )
    finally:
        home.close()  # also when it refuses: an unclosed connection warns when collected


async def test_a_submission_in_a_new_isolate_runs_the_statements_of_the_first(
    tmp_path: Path,
) -> None:
    first = await _per_round(tmp_path / "first.sqlite", reopened=False)
    later = await _per_round(tmp_path / "later.sqlite", reopened=True)
    # A new isolate reads each live document's row and latest revisions once, on its
    # first commits (13 statements here, at 10, 20 or 40 rounds), then nothing again.
    # Before, it read the documents' rows on every commit that wrote them: 54 statements
    # more at 20 rounds, growing with the rounds.
    extra = round((later["statements"] - first["statements"]) * ROUNDS)
    assert extra <= 16, (extra, first, later)


async def test_durable_rounds_refuses_an_actor_that_already_worked(tmp_path: Path) -> None:
    await _per_round(tmp_path / "a.sqlite", reopened=False)
    with pytest.raises(AssertionError, match="needs a new actor"):
        await _per_round(tmp_path / "a.sqlite", reopened=False)
