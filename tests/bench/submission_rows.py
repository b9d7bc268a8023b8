"""Rows one submission writes in a Durable Object, in issue 36's shape: the model asks
for two tool calls at once, then answers (two model rounds, two tool calls), counted
on the CPython ``ctx.storage`` stand-in (the cursors' ``rowsWritten``), by table.

    python tests/bench/submission_rows.py                  # this tree, first submission
    python tests/bench/submission_rows.py --submission 2   # a later one, same conversation
    python tests/bench/submission_rows.py --verbose        # every write, with its records
    PYTHONPATH=<other checkout> python <this file>         # the same count of another tree

Only public interfaces that have not changed since the issue was filed, so an older
checkout counts the same way (the tree the issue was filed against, 2812ec8, counts 35
rows with a safe tool and 41 with an unsafe one). ``tests/cloudflare/test_round_costs.py``
pins today's figure."""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from core.faux import FauxModel, FauxState, faux_message, faux_tool_call
from core.harness import ModelRequest, ToolContext, define_extension, define_tool
from core.testing.clock import VirtualClock
from runtimes.actor import ActorConfig
from runtimes.cloudflare.actor import DurableActor
from tests.cloudflare.standin import DurableObjectHome

MODEL = "faux/faux-1"


class _NoArgs(BaseModel):
    pass


async def _noop(args: _NoArgs, ctx: ToolContext) -> str:
    return "ok"


def _two_calls_then_an_answer(request: ModelRequest, state: FauxState) -> Any:
    if request.messages[-1].role == "user":
        n = state.call_count
        return faux_message(*(faux_tool_call("noop", {}, id=f"call_{n}_{i}") for i in range(2)))
    return faux_message("done")


def written_table(query: str) -> str:
    """The table a writing statement writes: UPDATE t, INSERT [OR REPLACE] INTO t,
    DELETE FROM t."""
    words = query.split()
    after = "UPDATE" if words[0] == "UPDATE" else "INTO" if "INTO" in words else "FROM"
    return words[words.index(after) + 1]


async def count(replay: str, submission: int, verbose: bool) -> dict[str, int]:
    """Rows written by the ``submission``-th submission of a new actor's root
    conversation (the request creating the actor is not counted), by table."""
    by_table: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as scratch:
        home = DurableObjectHome(Path(scratch) / "actor.sqlite")
        storage = home.open()
        counting = False
        exec_ = storage.sql.exec

        def counted(query: str, /, *bindings: Any) -> Any:
            cursor = exec_(query, *bindings)
            if counting and cursor.rowsWritten:
                table = written_table(query)
                by_table[table] = by_table.get(table, 0) + cursor.rowsWritten
                if verbose:
                    records = [str(b)[:200] for b in bindings if str(b).startswith("{")]
                    print(f"  {cursor.rowsWritten} {' '.join(query.split()[:3])} {records}")
            return cursor

        storage.sql.exec = counted
        tool = define_tool(
            "noop", description="does nothing", parameters=_NoArgs, execute=_noop, replay=replay
        )
        config = ActorConfig(
            models=FauxModel(fallback=_two_calls_then_an_answer, record_requests=False),
            extensions=[define_extension("bench", tools=[tool])],
        )
        actor = DurableActor(storage, config, clock=VirtualClock(), alarm_report=print, actor="a")
        async with actor.serving() as harness:
            await harness.root(agent={"model": MODEL})
        await actor.settle()
        for n in range(1, submission + 1):
            counting = n == submission
            async with actor.serving() as harness:
                placed = await (await harness.root()).submit("go")
            record = await placed.wait()
            await actor.settle()
            assert record.status == "done", record
        counting = False
        await actor.close()
        home.close()
    return by_table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--submission", type=int, default=1, help="which one to count")
    parser.add_argument("--verbose", action="store_true", help="print every write")
    args = parser.parse_args()
    for replay in ("safe", "unsafe"):
        if args.verbose:
            print(f"{replay}:")
        by_table = asyncio.run(count(replay, args.submission, args.verbose))
        tables = ", ".join(f"{t} {n}" for t, n in sorted(by_table.items()))
        print(f"{replay:<7} {sum(by_table.values()):>3} rows  ({tables})")


if __name__ == "__main__":
    main()
