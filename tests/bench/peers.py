"""The peers' side of the suite: the same agent round on LangGraph and on DBOS.

A round is one model response (a 100-character text plus one tool call) and one tool
execution returning 2 KB, each durably recorded. Both peers run on SQLite in WAL mode
with ``synchronous=NORMAL``, set on every connection they use and read back from it:

* LangGraph: an ``agent`` node and a ``tool`` node looping through a conditional edge,
  compiled with ``SqliteSaver`` over a ``sqlite3`` connection, ``durability="sync"``.
  ``latest`` keeps only the latest outputs in the state; ``growing`` appends both to a
  transcript channel (what an agent's message list does).
* DBOS: a workflow with one ``@DBOS.step`` for the model and one for the tool, its
  system database on SQLite through an engine whose connect hook adds WAL + NORMAL to
  DBOS's own settings (IMMEDIATE transactions, busy timeout, foreign keys).

Recovery: a first process crashes (``os._exit``) inside the tool of round ``crash_at``;
the measured process rebuilds the graph / launches DBOS and reports when that tool
runs again. The functions here run inside a child process started by the suite.
"""

from __future__ import annotations

import operator
import os
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

from tests.bench.sqltrace import pragmas

__all__ = ["dbos_loop", "langgraph_loop"]

TEXT = "Reading the next page of the log to find where the request went wrong, step by step."
RESULT = "r" * 2048


def _response(i: int) -> dict[str, Any]:
    return {"text": TEXT, "tool_call": {"id": f"c{i}", "name": "fetch", "arguments": {"page": i}}}


# --------------------------------------------------------------------------- LangGraph


class _Latest(TypedDict, total=False):
    i: int
    response: dict[str, Any]
    result: str


class _Growing(TypedDict, total=False):
    i: int
    messages: Annotated[list[dict[str, Any]], operator.add]


def langgraph_loop(
    path: Path,
    rounds: int,
    *,
    variant: str = "latest",
    crash_at: int | None = None,
    resume: bool = False,
) -> dict[str, Any]:
    """Run (or with ``resume``, recover) the loop; per-round stamps are taken when the
    ``agent`` node starts. With ``crash_at`` the process exits inside that round's tool."""
    import sqlite3

    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, START, StateGraph

    started = time.perf_counter()
    stamps: list[float] = []
    resumed: list[float] = []
    growing = variant == "growing"

    def agent(state: dict[str, Any]) -> dict[str, Any]:
        stamps.append(time.perf_counter())
        i = state.get("i", 0)
        response = _response(i) if i < rounds else {"text": "Found it."}
        return {"messages": [response]} if growing else {"response": response}

    def tool(state: dict[str, Any]) -> dict[str, Any]:
        i = state.get("i", 0)
        if resume and not resumed:
            resumed.append(time.perf_counter())
        if crash_at is not None and i == crash_at:
            os._exit(1)
        result = {"tool_call_id": f"c{i}", "content": RESULT}
        return {"i": i + 1, "messages": [result]} if growing else {"i": i + 1, "result": RESULT}

    def route(state: dict[str, Any]) -> str:
        return "tool" if state.get("i", 0) < rounds else END

    graph = StateGraph(_Growing if growing else _Latest)
    graph.add_node("agent", agent)
    graph.add_node("tool", tool)
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", route, ["tool", END])
    graph.add_edge("tool", "agent")
    conn = sqlite3.connect(str(path), check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    saver = SqliteSaver(conn)
    app = graph.compile(checkpointer=saver)
    cfg: Any = {"configurable": {"thread_id": "bench"}, "recursion_limit": 2 * rounds + 10}
    built = time.perf_counter()
    if resume:
        app.get_state(cfg)
        app.invoke(None, cfg, durability="sync")
    else:
        app.invoke({"i": 0}, cfg, durability="sync")
    ended = time.perf_counter()
    out = {
        "pragmas": pragmas(conn),
        "stamps": stamps,
        "seconds": ended - built,
        "build_s": built - started,
        "resumed": resumed[0] if resumed else None,
        "checkpoint_bytes": conn.execute(
            "SELECT length(checkpoint) FROM checkpoints ORDER BY rowid DESC LIMIT 1"
        ).fetchone()[0],
    }
    conn.close()
    return out


# --------------------------------------------------------------------------- DBOS


def dbos_loop(
    path: Path, rounds: int, *, crash_at: int | None = None, resume: bool = False
) -> dict[str, Any]:
    """The DBOS workflow; stamps are taken as each round's model step runs (replayed
    steps do not run, so after a recovery only the re-executed rounds are stamped)."""
    import sqlalchemy as sa
    from dbos import DBOS, SetWorkflowID
    from sqlalchemy import event

    started = time.perf_counter()
    stamps: list[float] = []
    resumed: list[float] = []

    engine = sa.create_engine(f"sqlite:///{path}")

    @event.listens_for(engine, "connect")
    def _settings(dbapi_conn: Any, _record: Any) -> None:
        # DBOS's own connect settings for SQLite, plus WAL + NORMAL like everyone here.
        dbapi_conn.isolation_level = "IMMEDIATE"
        dbapi_conn.execute("PRAGMA busy_timeout=30000")
        dbapi_conn.execute("PRAGMA foreign_keys=ON")
        dbapi_conn.execute("PRAGMA journal_mode=WAL")
        dbapi_conn.execute("PRAGMA synchronous=NORMAL")

    @DBOS.step()
    def model(i: int) -> dict[str, Any]:
        stamps.append(time.perf_counter())
        return _response(i) if i < rounds else {"text": "Found it."}

    @DBOS.step()
    def fetch(i: int) -> str:
        if resume and not resumed:
            resumed.append(time.perf_counter())
        if crash_at is not None and i == crash_at:
            os._exit(1)
        return RESULT

    @DBOS.workflow()
    def loop(n: int) -> str:
        for i in range(n):
            model(i)
            fetch(i)
        return str(model(n)["text"])

    config: Any = {
        "name": "perdure-bench",
        "system_database_url": f"sqlite:///{path}",
        "system_database_engine": engine,
    }
    DBOS(config=config)
    DBOS.launch()
    launched = time.perf_counter()
    if resume:
        handle = DBOS.retrieve_workflow("bench")
        handle.get_result(polling_interval_sec=0.01)
    else:
        with SetWorkflowID("bench"):
            loop(rounds)
    ended = time.perf_counter()
    with engine.connect() as conn:
        read_back = pragmas(conn.connection.driver_connection)
    DBOS.destroy(destroy_registry=True)
    return {
        "pragmas": read_back,
        "stamps": stamps,
        "seconds": ended - launched,
        "build_s": launched - started,
        "resumed": resumed[0] if resumed else None,
    }
