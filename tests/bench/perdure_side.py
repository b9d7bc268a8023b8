"""perdure's side of the suite: the recovery store, the recovery run, the concurrency run.

* :func:`build_recovery_store` writes a storage through the real harness: ``conversations``
  conversations with ``entries`` transcript entries between them (appended in batches
  of 1,000 per commit through the session, as a long history would have accumulated),
  and ``live`` of them in the middle of a run whose model request blocks. The harness
  is then closed, which writes no outcome: the live generations stay ``running``, as a
  crash leaves them.
* :func:`recover` is the measured process: it opens that storage, opens the harness,
  resumes, and reports when the first resumed phase (a generation's ``request``,
  i.e. a model call) starts.
* :func:`concurrency` drives ``conversations`` conversations of one harness at once,
  ``rounds`` tool rounds each (the suite's round: a 100-character text, one tool call
  returning 2 KB), under the local host's collector settings (``ServingCollector``).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from core.faux import FauxModel, FauxState, faux_block, faux_message, faux_tool_call
from core.harness import (
    AssistantMessage,
    Harness,
    ModelRequest,
    Registry,
    ToolContext,
    UserMessage,
    define_extension,
    define_tool,
)
from core.harness.messages import message_to_json
from core.session.transaction import Tx
from core.storage.sqlite import SqliteStorage
from runtimes.actor.clock import SystemClock
from runtimes.local.collector import ServingCollector
from runtimes.local.sqlite import CheckpointedDatabase

__all__ = ["build_recovery_store", "concurrency", "open_storage", "recover"]

TEXT = "Reading the next page of the log to find where the request went wrong, step by step."
RESULT = "r" * 2048
AGENT: dict[str, Any] = {"model": "faux/faux-1", "tools": ["fetch"]}


class FetchArgs(BaseModel):
    page: int


async def fetch(args: FetchArgs, ctx: ToolContext) -> str:
    return RESULT


def _registry() -> Registry:
    tool = define_tool(
        "fetch", description="a page", parameters=FetchArgs, execute=fetch, replay="safe"
    )
    return Registry([define_extension("logs", tools=[tool])])


async def open_storage(path: Path) -> tuple[SqliteStorage, dict[str, str]]:
    """The local host's default storage (the inline sqlite3 facade, WAL + NORMAL, WAL
    checkpoints in the background: what ``open_sqlite_storage`` opens) and the journal
    mode and synchronous setting read back from its connection."""
    db = CheckpointedDatabase.open(path, synchronous="NORMAL")
    journal = await db.fetch("PRAGMA journal_mode")
    sync = await db.fetch("PRAGMA synchronous")
    names = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
    read_back = {"journal_mode": str(journal[0][0]).upper(), "synchronous": names[int(sync[0][0])]}
    return await SqliteStorage.open(db), read_back


# --------------------------------------------------------------------------- recovery


async def build_recovery_store(
    path: Path, *, conversations: int = 1000, entries: int = 100_000, live: int = 500
) -> dict[str, Any]:
    started = time.perf_counter()
    blocked = asyncio.Event()

    def block(request: ModelRequest, state: FauxState) -> Any:
        if state.call_count >= live:
            blocked.set()
        return faux_block()

    faux = FauxModel(fallback=block, record_requests=False)
    storage, _ = await open_storage(path)
    h = await Harness.open(storage, models=faux, registry=_registry(), clock=SystemClock())
    convs = [await h.create_conversation(agent=AGENT) for _ in range(conversations)]
    user = message_to_json(UserMessage(content="Look at page 3 of the log, please."))
    reply = message_to_json(AssistantMessage(content=[{"type": "text", "text": TEXT}]))
    per_conv = entries // conversations
    pending = [(c.id, n) for c in convs for n in range(per_conv)]
    for start in range(0, len(pending), 1000):
        batch = pending[start : start + 1000]

        async def write(tx: Tx, batch: list[tuple[int, int]] = batch) -> None:
            for conv, n in batch:
                kind = "user" if n % 2 == 0 else "assistant"
                await tx.append_entry(conv, kind, message=user if n % 2 == 0 else reply)

        await h.session.commit(write)
    subs = [await c.submit("Find the failing request.") for c in convs[:live]]
    # Each live conversation's generation is now blocked inside its model request.
    await blocked.wait()
    live_tasks = sum(1 for _ in h.session.tasks)
    await h.close()
    return {"seconds": time.perf_counter() - started, "live_tasks": live_tasks, "runs": len(subs)}


async def recover(path: Path, wall_at_start: float) -> dict[str, Any]:
    """Open, resume, and time the first resumed phase; ``wall_at_start`` is the
    ``time.time()`` at which this process's ``main`` began (after imports)."""
    first: list[float] = []
    done = asyncio.Event()

    def step(request: ModelRequest, state: FauxState) -> AssistantMessage:
        if not first:
            first.append(time.time())
            done.set()
        return faux_message("Found it.")

    t0 = time.time()
    storage, read_back = await open_storage(path)
    t1 = time.time()
    h = await Harness.open(
        storage,
        models=FauxModel(fallback=step, record_requests=False),
        registry=_registry(),
        clock=SystemClock(),
    )
    t2 = time.time()
    live = len(h.session.tasks)
    h.resume()
    await done.wait()
    return {
        "pragmas": read_back,
        "live_tasks": live,
        "main_to_open_ms": (t0 - wall_at_start) * 1000,
        "open_storage_ms": (t1 - t0) * 1000,
        "open_harness_ms": (t2 - t1) * 1000,
        "resume_to_phase_ms": (first[0] - t2) * 1000,
        "first_phase_wall": first[0],
    }


# --------------------------------------------------------------------------- concurrency


def _peak_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _io() -> dict[str, int]:
    """This process's write calls and bytes written so far (every thread; Linux's
    ``/proc/self/io``, empty elsewhere): exact counts, whatever the machine's load."""
    try:
        text = Path("/proc/self/io").read_text()
    except OSError:
        return {}
    fields = dict(line.split(": ") for line in text.splitlines())
    return {"syscw": int(fields["syscw"]), "wchar": int(fields["wchar"])}


async def concurrency(path: Path, *, conversations: int = 1000, rounds: int = 20) -> dict[str, Any]:
    counts: dict[object, int] = {}

    def step(request: ModelRequest, state: FauxState) -> AssistantMessage:
        # The conversation's first message (its submission, unique per conversation)
        # identifies it; by content, since a harness may reload a range it dropped.
        first = request.messages[0] if request.messages else None
        key = first.content if isinstance(first, UserMessage) else None
        n = counts.get(key, 0)
        counts[key] = n + 1
        if n < rounds:
            return faux_message(TEXT, faux_tool_call("fetch", {"page": n}, id=f"c{n}"))
        return faux_message("Found it.")

    storage, read_back = await open_storage(path)
    h = await Harness.open(
        storage,
        models=FauxModel(fallback=step, record_requests=False),
        registry=_registry(),
        clock=SystemClock(),
    )
    # A process serving many conversations runs with the local host's collector
    # settings (what `perdure dev` applies once it serves): start-up's objects frozen,
    # young collections every 5,000 allocations. Without them, full collections over the
    # ~190 MB the conversations hold took ~20% of this run (runtimes/local/collector.py).
    with ServingCollector():
        convs = [await h.create_conversation(agent=AGENT) for _ in range(conversations)]
        started, io_before = time.perf_counter(), _io()
        subs = [await c.submit(f"Find the failing request {c.id}.") for c in convs]
        records = await asyncio.gather(*(s.wait() for s in subs))
        seconds, io_after = time.perf_counter() - started, _io()
    assert all(r.status == "done" for r in records), [r for r in records if r.status != "done"][:1]
    await h.close()
    return {
        "pragmas": read_back,
        "seconds": seconds,
        "rounds_per_s": conversations * rounds / seconds,
        "peak_rss_mb": _peak_rss_mb(),
        # The WAL's frames (two write calls each) and the checkpoints' pages, per round.
        "writes_per_round": {
            k: (io_after[k] - io_before[k]) / (conversations * rounds) for k in io_after
        },
    }
