"""Long unattended run benchmark (issue 9): one submission, thousands of tool rounds.

Run: ``python tests/bench/bench_long_run.py`` (``--rounds N``, ``--profile``).

The agent makes ``rounds`` tool rounds, each a 100-character text plus one tool call
whose result is 2 KB, on ``FauxModel`` (128k window) with the default
``CompactionSettings`` and SQLite WAL + NORMAL; then it answers. Background
compactions must land inside the run (one at a time), every request must fit
``window - reserve`` (checked by the model function itself, for conversation and
summary requests alike) and the cost of a round must not grow with the transcript.
Prints ms/round over the first and the last 100 rounds and the compactions.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import operator
import pstats
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from core.storage import EntryQuery, TaskQuery

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from pydantic import BaseModel

from core.clock import Clock
from core.faux import FAUX_MODEL, FauxModel, FauxState, faux_message, faux_tool_call
from core.harness import (
    AssistantMessage,
    Harness,
    HarnessSettings,
    Message,
    ModelRequest,
    Registry,
    SystemMessage,
    ToolContext,
    define_extension,
    define_tool,
)
from core.harness.builtin_documents import LIVE
from core.harness.compaction import COMPACTION, SUMMARY_PROMPT, estimate_tokens
from core.harness.models import ModelInfo
from core.harness.registry import ReplayPolicy
from core.harness.usage_ledger import ledger_value
from core.records import Completed
from core.storage import Storage
from runtimes.actor.clock import SystemClock
from runtimes.local.sqlite import open_sqlite_storage

TEXT = "Reading the next page of the log to find where the request went wrong, step by step."
RESULT = "r" * 2048


class FetchArgs(BaseModel):
    page: int


async def fetch(args: FetchArgs, ctx: ToolContext) -> str:
    return RESULT


@dataclass
class LongRun:
    """What one long run measured."""

    rounds: int
    round_starts: list[float] = field(default_factory=list)  # perf_counter per request
    round_cpu: list[float] = field(default_factory=list)  # process_time per request
    summary_requests: int = 0
    largest_request: int = 0  # estimated tokens of the largest request sent
    over_limit: list[int] = field(default_factory=list)  # sizes of requests over the limit
    compactions: int = 0  # compaction tasks started
    landed: int = 0  # compaction entries in the transcript
    chunks: int = 0  # summary requests beyond the first of each compaction
    in_flight: int = 0  # a compaction still on its way when the run ended
    stale: int = 0
    seconds: float = 0.0

    def ms_per_round(self, first: int, last: int, *, cpu: bool = False) -> float:
        """Mean ms per round over rounds ``first..last`` (1-based, inclusive): wall time,
        or with ``cpu`` this process's CPU time (what other processes on a shared
        machine take from the wall clock is not in it)."""
        starts = self.round_cpu if cpu else self.round_starts
        return (starts[last] - starts[first - 1]) / (last - first + 1) * 1000


def _is_summary(request: ModelRequest) -> bool:
    first = request.messages[0] if request.messages else None
    return isinstance(first, SystemMessage) and first.content == SUMMARY_PROMPT


async def long_run(
    path: Path,
    rounds: int,
    *,
    model: ModelInfo = FAUX_MODEL,
    settings: HarnessSettings | None = None,
    clock: Clock | None = None,
    profiles: tuple[cProfile.Profile, cProfile.Profile] | None = None,
    storage: Storage | None = None,
    replay: ReplayPolicy = "unsafe",
) -> LongRun:
    """Run the workload once on a fresh SQLite file at ``path``; with ``profiles``,
    profile rounds 1-100 into the first and the last 100 rounds into the second; with
    ``storage``, run on it (already open on ``path``) instead of opening one;
    ``replay`` is the tool's replay policy."""
    settings = settings or HarnessSettings()
    limit = model.context_window - settings.compaction.reserve_tokens
    out = LongRun(rounds)

    sizes: dict[bool, tuple[list[Message], list[int]]] = {True: ([], []), False: ([], [])}

    def measure(request: ModelRequest) -> int:
        """Estimated tokens of a request. Requests repeat the previous one's messages
        (the same objects) plus a few: the shared prefix's counts are reused, so the
        check itself does not grow with the context it checks."""
        last, counts = sizes[_is_summary(request)]
        same = list(map(operator.is_, last, request.messages))  # compared in C
        shared = same.index(False) if False in same else len(same)
        counts = counts[:shared] + [estimate_tokens(m) for m in request.messages[shared:]]
        sizes[_is_summary(request)] = (list(request.messages), counts)
        return sum(counts)

    def step(request: ModelRequest, state: FauxState) -> AssistantMessage:
        size = measure(request)
        out.largest_request = max(out.largest_request, size)
        if size > limit:  # recorded, and refused as a provider would
            out.over_limit.append(size)
            raise AssertionError(f"request of {size} tokens exceeds {limit}")
        if _is_summary(request):
            out.summary_requests += 1
            return faux_message(f"Summary {out.summary_requests}: " + "s" * 1500)
        out.round_starts.append(time.perf_counter())
        out.round_cpu.append(time.process_time())
        done = len(out.round_starts) - 1
        if profiles is not None:
            window = {0: (0, True), 100: (0, False), rounds - 100: (1, True), rounds: (1, False)}
            if done in window:
                which, on = window[done]
                profiles[which].enable() if on else profiles[which].disable()
        if done < rounds:
            return faux_message(TEXT, faux_tool_call("fetch", {"page": done}, id=f"c{done}"))
        return faux_message("Found it.")

    faux = FauxModel(fallback=step, record_requests=False, models=[model])
    registry = Registry(
        [
            define_extension(
                "logs",
                tools=[
                    define_tool(
                        "fetch",
                        description="a page",
                        parameters=FetchArgs,
                        execute=fetch,
                        replay=replay,
                    )
                ],
            )
        ]
    )
    storage = storage or await open_sqlite_storage(path)
    h = await Harness.open(
        storage, models=faux, registry=registry, settings=settings, clock=clock or SystemClock()
    )
    root = await h.root(agent={"model": model.id})
    started = time.perf_counter()
    record = await (await root.submit("Find the failing request in the logs.")).wait()
    out.seconds = time.perf_counter() - started
    assert record.status == "done", record
    live = await h.session.document_value(LIVE, root.id)
    out.in_flight = int(isinstance(live, dict) and "compaction" in live)
    await root.wait_for_idle()  # a summary still on its way lands now
    await collect(h, root.id, out)
    await h.close()
    return out


async def collect(h: Harness, conversation_id: int, out: LongRun) -> None:
    """Count compactions: started, landed, chunked, stale."""
    storage = h.session.storage
    tasks = (await storage.scan_tasks(TaskQuery(kind=COMPACTION, limit=10_000))).items
    out.compactions = len(tasks)
    for task in tasks:
        result = task.outcome.result if isinstance(task.outcome, Completed) else None
        if isinstance(result, dict) and isinstance(result.get("requests"), int):
            out.chunks += max(0, int(result["requests"]) - 1)  # type: ignore[arg-type]
    cursor = None
    while True:
        page = await storage.scan_entries(EntryQuery(conversation_id, limit=1000), cursor)
        out.landed += sum(1 for e in page.items if e.kind == "compaction")
        if page.next is None:
            break
        cursor = page.next
    live = await h.session.document_value(LIVE, conversation_id)
    usage = await ledger_value(h.session, conversation_id, live)
    noted = usage.get("compactions") if isinstance(usage, dict) else None
    out.stale = int(noted.get("stale", 0)) if isinstance(noted, dict) else 0


def report(run: LongRun) -> str:
    early, late = (1, min(100, run.rounds)), (max(1, run.rounds - 99), run.rounds)
    lines = [f"{run.rounds} tool rounds in {run.seconds:.2f} s"]
    for what, cpu in (("wall", False), ("cpu", True)):
        first, last = run.ms_per_round(*early, cpu=cpu), run.ms_per_round(*late, cpu=cpu)
        lines.append(
            f"  {what}: rounds {early[0]}-{early[1]} {first:.2f} ms/round, rounds "
            f"{late[0]}-{late[1]} {last:.2f} ms/round ({last / first:.2f}x)"
        )
    lines += [
        f"  compactions: {run.compactions} started, {run.landed} landed, "
        f"{run.in_flight} in flight when the run ended, {run.stale} stale",
        f"  summary requests: {run.summary_requests} (chunks beyond the first: {run.chunks})",
        f"  largest request: {run.largest_request} tokens",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument(
        "--profile", action="store_true", help="cProfile the first and the last 100 rounds"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "long.sqlite"
        if args.profile:
            profiles = (cProfile.Profile(), cProfile.Profile())
            run = asyncio.run(long_run(path, args.rounds, profiles=profiles))
            for name, profile in zip(("first", "last"), profiles, strict=True):
                print(f"==== {name} 100 rounds (by own time)")
                pstats.Stats(profile).sort_stats("tottime").print_stats(25)
        else:
            run = asyncio.run(long_run(path, args.rounds))
    print(report(run))


if __name__ == "__main__":
    main()
