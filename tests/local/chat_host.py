"""A host process for the chat tests: ``python -m tests.local.chat_host --data DIR --gate F``.

Like ``tests.local.host_proc``, with a model that streams slowly (40 tokens of 3
characters a second) and acts on the newest user message:

* ``plan ...`` — says ``Checking the gate first.`` and calls ``wait_gate`` (a tool that
  finishes once the file ``--gate`` exists), then answers ``The plan is ready.``;
* ``trip ...`` — streams a longer first line (``TRIP``, about 4 s: time to type a steer
  while it streams), calls ``wait_gate``, then answers ``The trip is planned.``;
* ``also ...`` (a steer, placed after that tool round) — answers ``steered: <text>``;
* ``long`` — a long answer (``word0 word1 ... word399``, about 25 s);
* anything else — ``echo: <text>``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from core.faux import FauxModel, FauxState, faux_message, faux_tool_call
from core.harness import (
    ModelRequest,
    ToolContext,
    ToolResultMessage,
    UserMessage,
    define_extension,
    define_tool,
)
from runtimes.actor.api import ApiConfig
from runtimes.local.host import ActorHost
from runtimes.local.server import bind, make_server
from tests.local.support import TOKEN, file_exists, host_config

LONG = " ".join(f"word{i}" for i in range(400))
TRIP = "Looking at trains to Graz: " + " ".join(f"train{i}" for i in range(60)) + "."


def chat_model() -> FauxModel:
    async def step(request: ModelRequest, state: FauxState) -> Any:
        users = [m for m in request.messages if isinstance(m, UserMessage)]
        text = users[-1].content if users else ""
        rounds = 0
        for message in reversed(request.messages):
            if isinstance(message, UserMessage):
                break
            rounds += isinstance(message, ToolResultMessage)
        if text.startswith("plan"):
            if rounds == 0:
                call = faux_tool_call("wait_gate", {"why": "the plan"}, id="call_gate")
                return faux_message("Checking the gate first.", call)
            return faux_message("The plan is ready.")
        if text.startswith("trip"):
            if rounds == 0:
                call = faux_tool_call("wait_gate", {"why": "the trip"}, id="call_trip")
                return faux_message(TRIP, call)
            return faux_message("The trip is planned.")
        if text.startswith("also"):
            return faux_message(f"steered: {text}")
        if text == "long":
            return faux_message(LONG)
        return faux_message(f"echo: {text}")

    return FauxModel(
        fallback=step,
        token_size=3,
        tokens_per_second=40,
        sleep=asyncio.sleep,
        record_requests=False,
    )


class GateArgs(BaseModel):
    why: str = ""


def gate_extension(gate: Path) -> Any:
    async def wait_gate(args: GateArgs, ctx: ToolContext) -> str:
        while not file_exists(gate):  # noqa: ASYNC110 - the test makes the file
            await asyncio.sleep(0.05)
        return f"gate open ({args.why})"

    tool = define_tool(
        "wait_gate",
        description="Wait for the gate.",
        parameters=GateArgs,
        execute=wait_gate,
        replay="safe",
    )
    return define_extension("chat-test-tools", tools=[tool])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--gate", type=Path, required=True)
    args = parser.parse_args()
    config = host_config(
        args.data,
        models=chat_model(),
        extensions=[gate_extension(args.gate)],
        default_agent={"model": "faux/faux-1", "tools": ["wait_gate"]},
    )
    server = make_server(ActorHost(config), ApiConfig(TOKEN), graceful_s=2)
    sock = bind("127.0.0.1", 0)
    print(json.dumps({"url": f"http://127.0.0.1:{sock.getsockname()[1]}"}), flush=True)
    server.run(sockets=[sock])


if __name__ == "__main__":
    main()
