"""A harness process whose ``bash`` tool runs on a real sandbox server.

``python -m tests.recovery.sandbox_job DB SANDBOX_URL TOKEN [OPTIONS_JSON]`` submits one job
(request id ``sandbox-job``) to a scripted model that runs ``COMMAND`` with ``bash`` and then
answers; it prints, as JSON lines, what the model saw of the tool result and the final status.

``OPTIONS_JSON`` (all optional): ``command`` (instead of ``COMMAND``), ``replay`` (declare
``bash`` ``unsafe`` instead of ``recoverable``), ``long_poll_s`` and ``attempts`` (the
client's long-poll length and how many times it tries to reach the sandbox).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from core.faux import FauxModel, FauxState, faux_message, faux_tool_call
from core.harness import AssistantMessage, Harness, ModelRequest, Registry, ToolResultMessage
from core.harness.registry import Extension, define_extension, define_tool
from core.tools import coding_tools
from remote_env.client import RemoteEnv, RetryPolicy
from runtimes.actor.clock import SystemClock
from runtimes.local.sqlite import open_sqlite_storage

COMMAND = "echo started >> trace.txt; sleep 3; echo line >> out.txt; echo output-text; exit 7"


def say(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


def scripted(command: str) -> Callable[[ModelRequest, FauxState], AssistantMessage]:
    def model(request: ModelRequest, state: FauxState) -> AssistantMessage:
        if request.messages[-1].role == "user":
            return faux_message(faux_tool_call("bash", {"command": command}, id="call_bash"))
        results = [m for m in request.messages if isinstance(m, ToolResultMessage)]
        say(
            model_saw=[
                {"error": r.is_error, "content": r.content, "details": r.details} for r in results
            ]
        )
        return faux_message("done")

    return model


def tools(replay: str) -> Extension:
    """The coding tools, with ``bash`` declared ``unsafe`` when asked."""
    coding = coding_tools()
    if replay == "recoverable":
        return coding
    bash = next(t for t in coding.tools if t.name == "bash")
    unsafe = define_tool(
        "bash",
        description=bash.description,
        parameters=bash.parameters,
        execute=bash.execute,
        replay="unsafe",
    )
    return define_extension("coding-unsafe-bash", tools=[unsafe])


async def run(db: Path, url: str, token: str, options: dict[str, Any]) -> None:
    # Patient retries: the sandbox may be restarting under us.
    retry = RetryPolicy(
        attempts=int(options.get("attempts", 80)), initial_delay=0.05, max_delay=0.25
    )
    model = scripted(str(options.get("command", COMMAND)))
    client = RemoteEnv(url, token, retry=retry, long_poll_s=float(options.get("long_poll_s", 25)))
    async with client as env:
        storage = await open_sqlite_storage(db)
        harness = await Harness.open(
            storage,
            models=FauxModel([model, model]),
            registry=Registry([tools(str(options.get("replay", "recoverable")))]),
            env=lambda conversation_id, cwd: env,
            clock=SystemClock(),
        )
        try:
            root = await harness.root(agent={"model": "faux/faux-1"})
            submission = await root.submit("run the job", request_id="sandbox-job")
            say(submitted=submission.id)
            record = await submission.wait()
            say(status=record.status)
        finally:
            await harness.close()


if __name__ == "__main__":
    extra = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}
    asyncio.run(run(Path(sys.argv[1]), sys.argv[2], sys.argv[3], extra))
