"""Instruction counts (callgrind) of a tool round and of recovery, for any checkout.

Run: ``python tests/bench/instructions.py [--root DIR ...]`` (valgrind must be
installed). Wall-clock figures on a shared machine move by tens of percent with its
load; instructions do not, so a change is compared with its merge base by both: the
suite's medians (alternating the two checkouts) and these counts. Each ``--root`` is a
checkout (for example a ``git worktree add --detach`` of the merge base); its own code is
imported (``PYTHONPATH`` and working directory), so every checkout runs the same
workload through the suite's own children:

* ``round``: a safe tool round, ``(I(220 rounds) - I(20 rounds)) / 200`` of the suite's
  ``perdure_loop`` child (start-up and the first rounds cancel out);
* ``import``: ``import tests.bench.perdure_side``, what the recovery child imports;
* ``first_phase``: from process start to the first resumed phase of the suite's recovery
  store (1,000 conversations, 100,000 entries, 500 live tasks): the process exits inside
  the first model call, so nothing that runs after it is counted. (The suite's
  ``perdure_recover`` child keeps running until its event loop has shut down, which
  costs several times as much as the path to the first phase.)

``--open-path`` counts instead what a fresh Durable Object isolate does before its
actor is open (issue 36), as CPython can stand for it: import ``core.harness`` and every
module ``runtimes/cloudflare/worker.py`` imports at module level (but the Workers SDK,
which runs only in Pyodide), then open a harness and resume it to idle, with every
module compiled from source (an empty ``pycache_prefix``, as Pyodide has no bytecode),
less a process that imports only what Pyodide's start-up and the SDK import anyway.

``--later-run`` counts instead a safe tool round of a conversation's later run, which
carries what its first run left in ``live`` (the usage ledger) from its first round:
``(I(220 rounds) - I(20 rounds)) / 200`` of a second submission, after a first one of
one round.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = [
    "FIRST_PHASE_CHILD",
    "LATER_RUN_CHILD",
    "OPEN_PATH_CHILD",
    "count",
    "count_later_run",
    "count_open_path",
    "main",
]

ROOT = Path(__file__).resolve().parents[2]

FIRST_PHASE_CHILD = """
import asyncio, os, sys
from pathlib import Path
from core.faux import FauxModel
from core.harness import Harness
from tests.bench.perdure_side import SystemClock, _registry, open_storage

async def main():
    def step(request, state):
        os._exit(0)  # the first resumed phase has reached its model call

    storage, _ = await open_storage(Path(sys.argv[1]))
    h = await Harness.open(
        storage, models=FauxModel(fallback=step), registry=_registry(), clock=SystemClock()
    )
    h.resume()
    await asyncio.sleep(120)
    raise SystemExit("no phase resumed")

asyncio.run(main())
"""


# What Pyodide's start-up (its event loop, package loading) and the Workers SDK import
# before the open path: counted on both sides of --open-path's difference.
OPEN_PATH_BASE = (
    "import asyncio, dataclasses, inspect, json, re, typing, shutil, tempfile, zipfile,"
    " tarfile, importlib.metadata, email.parser, email.message, http.client, urllib.parse\n"
)
OPEN_PATH_CHILD = (
    OPEN_PATH_BASE
    + """
import ast, asyncio, importlib
from pathlib import Path
import core.harness
tree = ast.parse(Path("runtimes/cloudflare/worker.py").read_text())
modules = [a.name for n in tree.body if isinstance(n, ast.Import) for a in n.names]
modules += [n.module for n in tree.body if isinstance(n, ast.ImportFrom) and n.level == 0]
for module in modules:
    if module and module != "workers":
        importlib.import_module(module)
from core.faux import FauxModel, faux_message
from core.harness import Harness, Registry
from core.storage import MemoryStorage
from runtimes.actor.clock import SystemClock

async def main():
    models = FauxModel(fallback=lambda request, state: faux_message("ok"))
    h = await Harness.open(
        MemoryStorage(), models=models, registry=Registry([]), clock=SystemClock()
    )
    root = await h.root(agent={"model": "faux/faux-1"})
    h.resume()
    await root.wait_for_idle()
    await h.close()

asyncio.run(main())
"""
)


# Public API only, so it runs in any checkout: argv is the SQLite path and the number of
# tool rounds of the second submission (each response reports usage, so the first run's
# end writes the ledger).
LATER_RUN_CHILD = """
import asyncio, sys
from pathlib import Path
from pydantic import BaseModel
from core.faux import FAUX_MODEL, FauxModel, faux_message, faux_tool_call
from core.harness import Harness, Registry, Usage, define_extension, define_tool
from runtimes.actor.clock import SystemClock
from runtimes.local.sqlite import open_sqlite_storage

class Page(BaseModel):
    page: int

async def fetch(args, ctx):
    return "r" * 2048

async def main():
    plan = {"done": 0, "rounds": 1}

    def step(request, state):
        plan["done"] += 1
        usage = Usage(input=100, output=10, cost=0.01)
        if plan["done"] <= plan["rounds"]:
            call = faux_tool_call("fetch", {"page": plan["done"]}, id=f"c{plan['done']}")
            return faux_message("next page", call, usage=usage)
        return faux_message("found", usage=usage)

    tool = define_tool("fetch", description="a page", parameters=Page, execute=fetch, replay="safe")
    h = await Harness.open(
        await open_sqlite_storage(Path(sys.argv[1])),
        models=FauxModel(fallback=step, record_requests=False, models=[FAUX_MODEL]),
        registry=Registry([define_extension("logs", tools=[tool])]),
        clock=SystemClock(),
    )
    root = await h.root(agent={"model": FAUX_MODEL.id})
    assert (await (await root.submit("first")).wait()).status == "done"
    plan["done"], plan["rounds"] = 0, int(sys.argv[2])
    assert (await (await root.submit("second")).wait()).status == "done"
    await h.close()

asyncio.run(main())
"""


def count_later_run(root: Path, tmp: Path, *, valgrind: bool = True) -> float:
    """Instructions of a later run's tool round (see the module docstring)."""
    runs = {
        rounds: _run(
            root,
            ["-c", LATER_RUN_CHILD, str(tmp / f"later-{rounds}.sqlite"), str(rounds)],
            valgrind=valgrind,
        )
        for rounds in (20, 220)
    }
    return (runs[220] - runs[20]) / 200


def count_open_path(root: Path, *, valgrind: bool = True) -> float:
    """Instructions of the open path from sources (see the module docstring)."""
    counts = []
    for code in (OPEN_PATH_CHILD, OPEN_PATH_BASE):
        with tempfile.TemporaryDirectory() as cache:
            argv = ["-B", "-X", f"pycache_prefix={cache}", "-c", code]
            counts.append(_run(root, argv, valgrind=valgrind))
    return float(counts[0] - counts[1])


def _run(root: Path, argv: list[str], *, valgrind: bool = True) -> int:
    """Run ``python argv`` in ``root``; return its instruction count (0 without valgrind)."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    prefix = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"] if valgrind else []
    proc = subprocess.run(
        [*prefix, sys.executable, *argv], cwd=root, env=env, capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[:2]} failed in {root}:\n{proc.stderr[-3000:]}")
    if not valgrind:
        return 0
    found = re.search(r"Collected : (\d+)", proc.stderr)
    assert found is not None, proc.stderr[-2000:]
    return int(found.group(1))


def _child(root: Path, kind: str, **args: object) -> list[str]:
    return [str(root / "tests/bench/suite.py"), "--child", kind, json.dumps(args)]


def count(
    root: Path, tmp: Path, *, store: dict[str, int], valgrind: bool = True
) -> dict[str, float]:
    """The three counts for the checkout at ``root`` (see the module docstring)."""
    out: dict[str, float] = {}
    loops = {}
    for rounds in (20, 220):
        path = tmp / f"loop-{rounds}.sqlite"
        loops[rounds] = _run(
            root,
            _child(root, "perdure_loop", path=str(path), rounds=rounds, replay="safe"),
            valgrind=valgrind,
        )
    out["round"] = (loops[220] - loops[20]) / 200
    out["import"] = _run(root, ["-c", "import tests.bench.perdure_side"], valgrind=valgrind)
    built = tmp / "store.sqlite"
    _run(root, _child(root, "perdure_store", path=str(built), **store), valgrind=False)
    out["first_phase"] = _run(root, ["-c", FIRST_PHASE_CHILD, str(built)], valgrind=valgrind)
    return out


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, action="append", help="a checkout (repeatable)")
    parser.add_argument(
        "--open-path", action="store_true", help="count a Durable Object's open path instead"
    )
    parser.add_argument(
        "--later-run", action="store_true", help="count a later run's tool round instead"
    )
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    store = {"conversations": 1000, "entries": 100_000, "live": 500}
    results: dict[str, dict[str, float]] = {}
    for root in args.root or [ROOT]:
        if args.open_path:
            results[str(root)] = {"open_path": count_open_path(root.resolve())}
            continue
        if args.later_run:
            with tempfile.TemporaryDirectory() as tmp:
                later = count_later_run(root.resolve(), Path(tmp))
            results[str(root)] = {"later_round": later}
            continue
        with tempfile.TemporaryDirectory() as tmp:
            results[str(root)] = count(root.resolve(), Path(tmp), store=store)
    first = next(iter(results.values()))
    for name, counts in results.items():
        cells = []
        for key, value in counts.items():
            change = f" ({(value / first[key] - 1) * 100:+.1f}%)" if counts is not first else ""
            cells.append(f"{key}={value / 1e6:,.2f} M{change}")
        print(f"{name}: " + "  ".join(cells))
    return results


if __name__ == "__main__":
    main()
