"""The job of the seed article's crash test, run as its own process.

``python -m tests.recovery.seed_job DB LOG`` opens the SQLite actor ``DB``, submits
"Find a train to Graz and book it" with request id ``job-42`` and waits for it. The
scripted model calls ``search`` (replay safe) and ``book`` (unsafe) at once; each
takes two seconds and appends ``<tool> start`` / ``<tool> end`` to ``LOG``, so the test
can count executions. Every line printed is JSON.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

from pydantic import BaseModel

from core.faux import FauxModel, FauxState, faux_message, faux_tool_call
from core.harness import (
    AssistantMessage,
    Extension,
    Harness,
    ModelRequest,
    Registry,
    ToolContext,
    ToolResultMessage,
    define_extension,
    define_tool,
)
from core.storage import Storage
from runtimes.actor.clock import SystemClock
from runtimes.local.sqlite import open_sqlite_storage


def say(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


class Route(BaseModel):
    route: str


class Train(BaseModel):
    train: str


def seed_travel(
    log: Path,
) -> tuple[Extension, Callable[[ModelRequest, FauxState], AssistantMessage]]:
    """The job's tools (``search`` safe, ``book`` unsafe, each two seconds, logging their
    effects to ``log``) and its scripted model step, for any host to run."""

    def effect(line: str) -> None:
        with log.open("a") as f:
            f.write(line + "\n")

    async def search(args: Route, ctx: ToolContext) -> str:
        effect("search start")
        await asyncio.sleep(2)
        effect("search end")
        return f"Train IC 511 {args.route} departs 10:02"

    async def book(args: Train, ctx: ToolContext) -> str:
        effect("book start")
        await asyncio.sleep(2)  # charging the card
        effect("book end")
        return f"Booked a seat on {args.train}"

    def model(request: ModelRequest, state: FauxState) -> AssistantMessage:
        last = request.messages[-1]
        if last.role == "user":
            return faux_message(
                "Searching and booking.",
                faux_tool_call("search", {"route": "Vienna-Graz"}, id="call_search"),
                faux_tool_call("book", {"train": "IC 511"}, id="call_book"),
            )
        results = [m for m in request.messages if isinstance(m, ToolResultMessage)]
        say(
            model_saw=[
                {"tool": r.tool_name, "error": r.is_error, "content": r.content} for r in results
            ]
        )
        return faux_message(
            "The search worked; the booking was interrupted, so I did not retry it."
        )

    travel = define_extension(
        "travel",
        tools=[
            define_tool(
                "search",
                description="Search train times",
                parameters=Route,
                execute=search,
                replay="safe",
            ),
            define_tool(
                "book", description="Book and pay for a seat", parameters=Train, execute=book
            ),
        ],
    )
    return travel, model


def main(
    db: Path, log: Path, open_storage: Callable[[Path], Awaitable[Storage]] = open_sqlite_storage
) -> None:
    """Run the job on the storage ``open_storage(db)`` opens (another host passes its own)."""
    travel, model = seed_travel(log)

    async def run() -> None:
        storage = await open_storage(db)
        faux = FauxModel([model, model])
        harness = await Harness.open(
            storage, models=faux, registry=Registry([travel]), clock=SystemClock()
        )
        try:
            root = await harness.root(agent={"model": "faux/faux-1"})
            submission = await root.submit("Find a train to Graz and book it", request_id="job-42")
            say(submitted=submission.id)
            record = await submission.wait()
            say(status=record.status, reason=record.reason, answer=record.answer)
        finally:
            await harness.close()

    asyncio.run(run())


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
