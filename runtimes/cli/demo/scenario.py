"""The travel-agent scenario of ``perdure demo``: a scripted model and two tools.

The model is a pure function of the request it is sent (no hidden state), so a worker
that is killed and restarted answers exactly as the first one would have:

* a user message asking for a train → one response calling ``search`` (safe: it only
  reads a timetable) and ``book_seat`` (recoverable: a sandbox ``bash`` command that
  appends the booking to ``bookings.txt``) at once;
* the results of that round → the answer, quoting the booking reference;
* a user message asking for a reminder → a call of the built-in ``remind`` tool;
* its result → a confirmation; the reminder's own message when it fires → an answer.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path

from pydantic import BaseModel, Field

from core.faux import FauxModel, FauxState, faux_message, faux_tool_call
from core.harness import (
    AssistantMessage,
    Extension,
    ModelRequest,
    ToolContext,
    ToolResult,
    ToolResultMessage,
    UserMessage,
    define_extension,
    define_tool,
)

__all__ = [
    "BOOKINGS_FILE",
    "REMINDER_TEXT",
    "SEARCH_SECONDS",
    "TRAIN",
    "scenario_model",
    "travel_tools",
]

TRAIN = "RJ 533 Vienna 09:25 → Graz 12:03"
BOOKINGS_FILE = "bookings.txt"
REMINDER_TEXT = "Time to leave for the train to Graz"
SEARCH_SECONDS = 4.0  # long enough for the demo to kill the worker mid-round
BOOK_SECONDS = 4.0


class SearchArgs(BaseModel):
    destination: str = Field(min_length=1, max_length=100)


class BookArgs(BaseModel):
    train: str = Field(min_length=1, max_length=100)
    seat: str = Field(pattern=r"^[0-9]{1,3}[A-D]$")


def _search_tool(trace: Path | None) -> Callable[[SearchArgs, ToolContext], Awaitable[str]]:
    async def search(args: SearchArgs, ctx: ToolContext) -> str:
        # A slow timetable lookup with no side effects: safe to run again after a crash.
        # ``trace`` (the demo's instrument, not a side effect the agent relies on) counts
        # how often it started.
        if trace is not None:
            with trace.open("a") as f:
                f.write(f"search {ctx.task_id}\n")
        await asyncio.sleep(SEARCH_SECONDS)
        return json.dumps({"destination": args.destination, "trains": [TRAIN]})

    return search


async def _book(args: BookArgs, ctx: ToolContext) -> ToolResult:
    # The sandbox runs this once per op id: a rerun after a crash gets the recorded result.
    line = f"{args.train} seat {args.seat} ref=$(date +%s%N | tail -c 7)"
    command = f'sleep {BOOK_SECONDS:g}; echo "{line}" >> {BOOKINGS_FILE}; tail -n 1 {BOOKINGS_FILE}'
    result = await ctx.env.run_command(command, op=ctx.op, timeout=60)
    if result.exit_code != 0:
        return ToolResult(f"booking failed: {result.output}", is_error=True)
    return ToolResult(f"booked: {result.output.strip()}", details={"op": ctx.op.id})


def travel_tools(trace: Path | None = None) -> Extension:
    """``search`` (safe) and ``book_seat`` (recoverable); ``trace``: a file ``search``
    appends a line to whenever it starts."""
    return define_extension(
        "demo.travel",
        tools=[
            define_tool(
                "search",
                description="Look up trains to a destination.",
                parameters=SearchArgs,
                execute=_search_tool(trace),
                replay="safe",
            ),
            define_tool(
                "book_seat",
                description="Book a seat on a train (runs on the sandbox host).",
                parameters=BookArgs,
                execute=_book,
                replay="recoverable",
            ),
        ],
    )


def _answer(request: ModelRequest, state: FauxState) -> AssistantMessage:
    messages = request.messages
    last = messages[-1] if messages else None
    if isinstance(last, ToolResultMessage):
        results = {
            m.tool_name: m.content for m in messages[-2:] if isinstance(m, ToolResultMessage)
        }
        if last.tool_name == "remind":
            return faux_message("Done: I will remind you in 3 seconds.")
        booking = results.get("book_seat", "")
        return faux_message(f"Found {TRAIN} and {booking}. Have a good trip to Graz!")
    text = last.content if isinstance(last, UserMessage) else ""
    if REMINDER_TEXT in text:
        return faux_message("Reminder: your train to Graz leaves soon. Grab your ticket!")
    if "remind" in text.lower():
        return faux_message(
            faux_tool_call("remind", {"message": REMINDER_TEXT, "after": 3}, id="remind_1")
        )
    if "graz" in text.lower():
        return faux_message(
            faux_tool_call("search", {"destination": "Graz"}, id="search_1"),
            faux_tool_call("book_seat", {"train": "RJ 533", "seat": "42A"}, id="book_1"),
        )
    return faux_message("I am the demo model: ask me for a train to Graz.")


def scenario_model() -> FauxModel:
    """The scripted model of the scenario (it never runs out and records nothing)."""
    return FauxModel(fallback=_answer, record_requests=False)
