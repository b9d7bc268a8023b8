"""A harness process whose ``bash`` tool runs on a real sandbox server.

``python -m tests.harness.sandbox_job DB SANDBOX_URL TOKEN`` submits one job (request id
``sandbox-job``) to a scripted model that runs ``COMMAND`` with ``bash`` and then answers;
it prints, as JSON lines, what the model saw of the tool result and the final status.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from core.faux import FauxModel, FauxState, faux_message, faux_tool_call
from core.harness import AssistantMessage, Harness, ModelRequest, Registry, ToolResultMessage
from core.tools import coding_tools
from remote_env.client import RemoteEnv, RetryPolicy
from runtimes.local.clock import SystemClock
from runtimes.local.sqlite import open_sqlite_storage

COMMAND = "echo started >> trace.txt; sleep 3; echo line >> out.txt; echo output-text; exit 7"


def say(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


def model(request: ModelRequest, state: FauxState) -> AssistantMessage:
    if request.messages[-1].role == "user":
        return faux_message(faux_tool_call("bash", {"command": COMMAND}, id="call_bash"))
    results = [m for m in request.messages if isinstance(m, ToolResultMessage)]
    say(model_saw=[{"error": r.is_error, "content": r.content} for r in results])
    return faux_message("done")


async def run(db: Path, url: str, token: str) -> None:
    # Patient retries: the sandbox may be restarting under us.
    retry = RetryPolicy(attempts=80, initial_delay=0.05, max_delay=0.25)
    async with RemoteEnv(url, token, retry=retry) as env:
        storage = await open_sqlite_storage(db)
        harness = await Harness.open(
            storage,
            models=FauxModel([model, model]),
            registry=Registry([coding_tools()]),
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
    asyncio.run(run(Path(sys.argv[1]), sys.argv[2], sys.argv[3]))
