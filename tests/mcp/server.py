"""A real MCP server for the tests: the SDK's ``MCPServer`` over streamable HTTP on
loopback, run as a child process (``python -m tests.mcp.server --port P --log FILE``).

Every tool call appends ``{"tool", "args", "event": "start"|"end"}`` to the call log
(one JSON line, flushed), so a test reads what the server really ran — also after the
harness that called it was SIGKILLed. ``hold`` makes a call wait until the file
``<log>.release`` exists: a crash test kills the caller while the call is in flight.
``/broken`` answers every request with a body that is not JSON-RPC (a protocol error).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations
from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

__all__ = ["build"]


class Answer(BaseModel):
    ok: bool


def build(log: Path) -> MCPServer:
    server = MCPServer("trains")
    release = log.with_name(log.name + ".release")

    def note(tool: str, args: dict[str, Any], event: str) -> None:
        with log.open("a") as f:
            f.write(json.dumps({"tool": tool, "args": args, "event": event}) + "\n")
            f.flush()
            os.fsync(f.fileno())

    async def held(tool: str, args: dict[str, Any], hold: bool) -> None:
        note(tool, args, "start")
        while hold and not release.exists():  # noqa: ASYNC110 - another process creates it
            await asyncio.sleep(0.02)

    @server.tool(
        description="Find trains to a city.",
        annotations=ToolAnnotations(read_only_hint=True),
    )
    async def search(to: str, hold: bool = False) -> str:
        await held("search", {"to": to}, hold)
        note("search", {"to": to}, "end")
        return f"IC 501 to {to} leaves at 09:12"

    @server.tool(
        description="Book a seat on a train.",
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False),
    )
    async def book(train: str, hold: bool = False) -> str:
        await held("book", {"train": train}, hold)
        note("book", {"train": train}, "end")
        return f"seat 42 booked on {train}"

    @server.tool(
        description="Cancel a booking (same arguments, same effect).",
        annotations=ToolAnnotations(read_only_hint=False, idempotent_hint=True),
    )
    async def cancel(booking: str) -> str:
        note("cancel", {"booking": booking}, "start")
        return f"booking {booking} cancelled"

    @server.tool(description="Always fails.")
    async def broken() -> str:
        note("broken", {}, "start")
        raise ValueError("the timetable service is down")

    @server.tool(
        description="Sleeps before answering.", annotations=ToolAnnotations(read_only_hint=True)
    )
    async def slow(seconds: float) -> str:
        note("slow", {"seconds": seconds}, "start")
        await asyncio.sleep(seconds)
        return "finally"

    @server.tool(description="Asks the user to confirm.")
    async def confirm(ctx: Context) -> str:
        note("confirm", {}, "start")
        result = await ctx.elicit("Really?", Answer)
        return f"elicitation: {result.action}"

    @server.tool(description="Adds the tool 'later' and says so.")
    async def grow(ctx: Context) -> str:
        note("grow", {}, "start")

        async def later() -> str:
            return "later"

        server.add_tool(later, name="later", description="Added at run time.")
        await ctx.session.send_tool_list_changed()
        return "grown"

    @server.custom_route("/broken", methods=["POST", "GET", "DELETE"])  # type: ignore[untyped-decorator]
    async def not_jsonrpc(request: Request) -> Response:
        return PlainTextResponse("this is not JSON-RPC", media_type="application/json")

    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--log", type=Path, required=True)
    parser.add_argument("--token", default=None)
    args = parser.parse_args()
    server = build(args.log)
    app = server.streamable_http_app()
    if args.token:
        app = _require_token(app, args.token)
    import uvicorn

    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


def _require_token(app: Any, token: str) -> Any:
    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            if headers.get(b"authorization") != f"Bearer {token}".encode():
                await PlainTextResponse("no", status_code=401)(scope, receive, send)
                return
        await app(scope, receive, send)

    return guarded


if __name__ == "__main__":
    main()
