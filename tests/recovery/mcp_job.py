"""A harness process whose agent calls one tool of a real MCP server.

``python -m tests.recovery.mcp_job DB MCP_URL TOOL ARGUMENTS_JSON`` submits one job
(request id ``mcp-job``) to a scripted model that calls ``TOOL`` (a model-facing name,
``trains__search``) with ``ARGUMENTS_JSON`` and then answers; it prints, as JSON lines,
what the model saw of the tool result and the final status.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path

from core.faux import FauxModel, FauxState, faux_message, faux_tool_call
from core.harness import AssistantMessage, Harness, ModelRequest, Registry, ToolResultMessage
from core.jsonvalue import JsonObject
from runtimes.actor.clock import SystemClock
from runtimes.local.sqlite import open_sqlite_storage
from runtimes.mcp import McpServer, mcp_extension
from runtimes.mcp.sdk import SdkConnector


def say(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


def scripted(
    tool: str, arguments: JsonObject
) -> Callable[[ModelRequest, FauxState], AssistantMessage]:
    def model(request: ModelRequest, state: FauxState) -> AssistantMessage:
        if request.messages[-1].role == "user":
            say(offered=sorted(t.name for t in request.tools))
            return faux_message(faux_tool_call(tool, arguments, id="call_mcp"))
        results = [m for m in request.messages if isinstance(m, ToolResultMessage)]
        say(model_saw=[{"error": r.is_error, "content": r.content} for r in results])
        return faux_message("done")

    return model


async def run(db: Path, url: str, tool: str, arguments: JsonObject) -> None:
    model = scripted(tool, arguments)
    mcp = mcp_extension(
        [McpServer("trains", url, timeout_s=60)], connector=SdkConnector(), secrets=lambda _: None
    )
    harness = await Harness.open(
        await open_sqlite_storage(db),
        models=FauxModel([model, model]),
        registry=Registry([mcp]),
        clock=SystemClock(),
    )
    try:
        root = await harness.root(agent={"model": "faux/faux-1"})
        submission = await root.submit("go", request_id="mcp-job")
        say(submitted=submission.id)
        record = await submission.wait()
        say(status=record.status)
    finally:
        await harness.close()


if __name__ == "__main__":
    asyncio.run(run(Path(sys.argv[1]), sys.argv[2], sys.argv[3], json.loads(sys.argv[4])))
