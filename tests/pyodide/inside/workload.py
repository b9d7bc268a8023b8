"""Workloads run the same way on CPython and inside Pyodide, so their costs compare.

Pure: the caller hands in an opened storage. ``tool_rounds`` is the agent-loop benchmark
(one scripted model response asking for one no-op tool, the tool task, the hand-over;
then the answer); ``durable_rounds`` is the same loop on a Durable Object's host (the
``DurableActor`` over ``ctx.storage``), counting what each round costs there;
``long_actor`` fills a root conversation with ``entries`` entries by
real submit/answer rounds; ``cold_open`` is what an isolate does on its first request:
open the harness, take the root conversation, ``resume()``.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from pydantic import BaseModel

from core.faux import FauxModel, FauxState, faux_message, faux_tool_call
from core.harness import (
    AssistantMessage,
    Extension,
    Harness,
    ModelRequest,
    Registry,
    ToolContext,
    define_extension,
    define_tool,
)
from core.storage import EntryQuery, Storage
from core.testing.clock import VirtualClock

__all__ = [
    "ADAPTER_MODULES",
    "APP_MODULES",
    "DEPLOYED_MODULES",
    "FEATURE_MODULES",
    "FRONT_DOOR_MODULES",
    "MODEL",
    "NOT_ON_THE_OPEN_PATH",
    "RUNTIME_MODULES",
    "cold_open",
    "durable_rounds",
    "long_actor",
    "noop_extension",
    "noop_registry",
    "tool_rounds",
]

MODEL = "faux/faux-1"

# The cold start's imports, in the benchmark's three groups (run.py and cold_start.py
# import exactly these, on CPython and in Pyodide).
#
# The runtime: what ``runtimes.cloudflare.worker`` (the front door and the Durable
# Object class) imports, besides core and the Workers SDK: every isolate imports these
# before it can open its actor. (Pyodide imports ``runtimes.cloudflare.worker`` itself
# too; CPython cannot, it needs the SDK.)
RUNTIME_MODULES = (
    "runtimes.actor",
    "runtimes.actor.clock",
    "runtimes.cloudflare.actor",
    "runtimes.cloudflare.alarm",
    "runtimes.cloudflare.storage",
    "runtimes.cloudflare.watch",
    "runtimes.cloudflare.settings",
    "runtimes.cloudflare.names",
)
# The HTTP app: imported by the runtime on an object's first HTTP request only.
APP_MODULES = ("fastapi", "runtimes.actor.api")
# The Worker's front door (``Default.fetch``): its checks and route table, the scopes,
# the listing, the token minting and the inspector's files. A Durable Object's isolate
# need not serve the front door at all; ``runtimes.cloudflare.worker`` imports these
# where they are used (issue 36).
FRONT_DOOR_MODULES = (
    "runtimes.cloudflare.front_door",
    "runtimes.cloudflare.listing",
    "runtimes.cloudflare.minting",
    "runtimes.actor.inspector_files",
    "runtimes.actor.scopes",
)
# The adapters the default configuration (from the Worker's vars and secrets) builds on
# an object's first event: the model over httpx, the sandbox client, the coding tools.
ADAPTER_MODULES = (
    "runtimes.cloudflare.fetch_transport",
    "runtimes.actor.sandbox",
    "runtimes.models.openai_http",
    "remote_env.client",
    "core.tools",
)
# What the deployed entry module (infra/cloudflare/src/entry.py) imports eagerly, for
# the deploy-time memory snapshot.
DEPLOYED_MODULES = (*RUNTIME_MODULES, *FRONT_DOOR_MODULES, *APP_MODULES, *ADAPTER_MODULES)
# The harness's features an open and a turn do not use: the compaction task (a turn only
# asks whether one is needed), reminders, recurring schedules (and their cron), forks,
# sub-agents; imported when one is used (issue 36).
FEATURE_MODULES = (
    "core.harness.compaction",
    "core.harness.reminders",
    "core.harness.schedules",
    "core.harness.schedule_tools",
    "core.harness.cadence",
    "core.harness.forks",
    "core.harness.subagents",
)
# Modules the import + open of an isolate must leave unimported (the HTTP app, the
# front door, the adapters and the features above come later, if at all): a regression
# here fails the suite.
NOT_ON_THE_OPEN_PATH = (
    "fastapi",
    "starlette",
    "httpx",
    "pydantic.v1",
    "runtimes.actor.api",
    *FRONT_DOOR_MODULES,
    *FEATURE_MODULES,
)


class NoArgs(BaseModel):
    pass


async def _noop(args: NoArgs, ctx: ToolContext) -> str:
    return "ok"


def noop_extension() -> Extension:
    tool = define_tool("noop", description="does nothing", parameters=NoArgs, execute=_noop)
    return define_extension("bench", tools=[tool])


def noop_registry() -> Registry:
    return Registry([noop_extension()])


async def tool_rounds(storage: Storage, rounds: int) -> dict[str, Any]:
    """Seconds for ``rounds`` tool rounds on ``storage`` (closed afterwards)."""

    def step(request: ModelRequest, state: FauxState) -> AssistantMessage:
        if state.call_count <= rounds:
            return faux_message(faux_tool_call("noop", {}, id=f"call_{state.call_count}_0"))
        return faux_message("done")

    faux = FauxModel([step] * (rounds + 1), record_requests=False)
    harness = await Harness.open(
        storage, models=faux, registry=noop_registry(), clock=VirtualClock()
    )
    commits = 0

    def count(_: object) -> None:
        nonlocal commits
        commits += 1

    harness.session.subscribe(count)
    root = await harness.root(agent={"model": MODEL})
    start = time.perf_counter()
    record = await (await root.submit("loop")).wait()
    elapsed = time.perf_counter() - start
    assert record.status == "done", record
    await harness.close()
    return {"seconds": elapsed, "commits": commits, "ms_per_round": elapsed / rounds * 1000}


async def durable_rounds(
    storage: Any,
    counters: Callable[[], Mapping[str, float]],
    rounds: int,
    *,
    replay: str,
    cpu_ms: Callable[[], float] | None = None,
    reopen: Callable[[], Any] | None = None,
) -> dict[str, Any]:
    """Per tool round of a ``replay`` tool on a Durable Object's host over ``storage``
    (``ctx.storage``; the submission is posted in one request and its rounds run after
    it, as through the API): the growth of each of ``counters()`` (the
    stand-in's SQL statements, rows read and written, ``transactionSync`` and alarm
    calls) divided by ``rounds``, and the wall and process CPU milliseconds per round
    (the stand-in's own SQLite work included; its fsyncs only in the wall time). The
    first request (creating the actor) is not counted; ``storage`` must be new, so the
    counted submission is the actor's first on every host. ``cpu_ms``: the process's CPU clock in
    ms (default ``time.process_time``, which in Pyodide is the wall clock). ``reopen``:
    a new isolate's ``ctx.storage`` (the last one evicted); given, a first submission
    runs uncounted and the counted one is the actor's second, in a new isolate, as in a
    Durable Object whose isolate went away while the actor was idle."""
    from runtimes.actor import ActorConfig
    from runtimes.cloudflare.actor import DurableActor

    def step(request: ModelRequest, state: FauxState) -> AssistantMessage:
        if request.messages[-1].role == "user" or state.call_count % (rounds + 1):
            return faux_message(faux_tool_call("noop", {}, id=f"call_{state.call_count}_0"))
        return faux_message("done")

    tool = define_tool(
        "noop", description="does nothing", parameters=NoArgs, execute=_noop, replay=replay
    )
    config = ActorConfig(
        models=FauxModel(fallback=step, record_requests=False),
        extensions=[define_extension("bench", tools=[tool])],
    )
    actor = DurableActor(storage, config, clock=VirtualClock(), alarm_report=print, actor="a")
    clock = cpu_ms or (lambda: time.process_time() * 1000)
    async with actor.serving() as harness:  # the actor's first request: not counted
        await harness.root(agent={"model": MODEL})
        # A reused file would count a later submission of a reopened actor instead, whose
        # rows and statements differ (Pyodide's once read CPython's file: issue 36).
        assert await _count_entries(harness) == 0, "durable_rounds needs a new actor"
    await actor.settle()
    if reopen is not None:
        async with actor.serving() as harness:
            first = await (await harness.root()).submit("first")
        assert (await first.wait()).status == "done"
        await actor.settle()
        # The isolate goes away as it does when idle: evicted, not closed.
        actor = DurableActor(reopen(), config, clock=VirtualClock(), alarm_report=print)
        async with actor.serving() as harness:  # the new isolate's open: not counted
            await harness.root()
        await actor.settle()
    before = counters()
    start, cpu = time.perf_counter(), clock()
    async with actor.serving() as harness:
        submission = await (await harness.root()).submit("loop")
    record = await submission.wait()
    await actor.settle()
    elapsed, cpu = time.perf_counter() - start, clock() - cpu
    after = counters()
    assert record.status == "done", record
    await actor.close()
    per_round = {k: (after[k] - before[k]) / rounds for k in after}
    return {
        "rounds": rounds,
        "ms_per_round": elapsed / rounds * 1000,
        "cpu_ms_per_round": cpu / rounds,
        **per_round,
    }


async def long_actor(storage: Storage, entries: int) -> int:
    """Fill the root conversation with at least ``entries`` entries; return the count."""
    faux = FauxModel(fallback=lambda request, state: faux_message("noted."), record_requests=False)
    harness = await Harness.open(
        storage, models=faux, registry=noop_registry(), clock=VirtualClock()
    )
    root = await harness.root(agent={"model": MODEL})
    count = 0
    n = 0
    while count < entries:
        for _ in range(100):
            n += 1
            record = await (await root.submit(f"message {n}")).wait()
            assert record.status == "done", record
        count = await _count_entries(harness)
    await harness.close()
    return count


async def _count_entries(harness: Harness) -> int:
    total = 0
    cursor = None
    while True:
        page = await harness.session.storage.scan_entries(EntryQuery(1, limit=1000), cursor)
        total += len(page.items)
        if page.next is None:
            return total
        cursor = page.next


async def cold_open(
    open_storage: Callable[[], Awaitable[Storage]], cpu_ms: Callable[[], float] | None = None
) -> dict[str, Any]:
    """Milliseconds from nothing to a resumed harness on an existing actor; with
    ``cpu_ms`` (a CPU clock in ms) its CPU time too."""
    cpu = cpu_ms() if cpu_ms else 0.0
    start = time.perf_counter()
    storage = await open_storage()
    opened = time.perf_counter()
    faux = FauxModel(fallback=lambda request, state: faux_message("ok"), record_requests=False)
    harness = await Harness.open(
        storage, models=faux, registry=noop_registry(), clock=VirtualClock()
    )
    root = await harness.root(agent={"model": MODEL})
    harness.resume()
    await root.wait_for_idle()
    ready = time.perf_counter()
    cpu = cpu_ms() - cpu if cpu_ms else 0.0
    entries = await _count_entries(harness)
    await harness.close()
    return {
        "open_storage_ms": (opened - start) * 1000,
        "open_harness_ms": (ready - start) * 1000,
        "open_harness_cpu_ms": cpu,
        "entries": entries,
    }
