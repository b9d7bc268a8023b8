"""The loopback MCP server of ``tests/mcp/server.py`` in a child process, and what a
test reads of it: its URL and the call log it keeps on disk."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.faux import FauxModel, FauxState, faux_message, faux_tool_call
from core.harness import AssistantMessage, ModelRequest, ToolResultMessage
from core.jsonvalue import JsonObject
from tests.remote_env.support import free_port

__all__ = ["McpProcess", "mcp_model", "mcp_server"]

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class McpProcess:
    port: int
    log: Path
    proc: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    @property
    def broken_url(self) -> str:
        """An endpoint on the same server that answers with something that is not MCP."""
        return f"http://127.0.0.1:{self.port}/broken"

    def calls(self, tool: str | None = None, event: str = "start") -> list[dict[str, Any]]:
        """The calls the server ran (``event="start"``) or finished (``"end"``)."""
        if not self.log.exists():
            return []
        lines = [json.loads(line) for line in self.log.read_text().splitlines() if line]
        return [c for c in lines if c["event"] == event and tool in (None, c["tool"])]

    def release(self) -> None:
        """Let the calls made with ``hold`` finish."""
        self.log.with_name(self.log.name + ".release").touch()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@contextlib.contextmanager
def mcp_server(tmp: Path, *, token: str | None = None) -> Iterator[McpProcess]:
    """Start the server on a free loopback port; stop it on exit."""
    port = free_port()
    log = tmp / f"mcp-calls-{port}.jsonl"
    args = [sys.executable, "-m", "tests.mcp.server", "--port", str(port), "--log", str(log)]
    if token is not None:
        args += ["--token", token]
    proc = subprocess.Popen(
        args, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stderr=subprocess.DEVNULL
    )
    server = McpProcess(port, log, proc)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, "the MCP server exited at start"
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            assert time.monotonic() < deadline, "the MCP server did not start in 30 s"
            time.sleep(0.05)
        yield server
    finally:
        server.stop()


def mcp_model(offered: list[list[str]] | None = None) -> FauxModel:
    """A scripted model for host tests: ``search CITY`` calls ``trains__search``, a tool
    result is answered ``result: <its content>``, anything else ``hello``. ``offered``
    collects the tool names of each request that answers a user message."""

    def step(request: ModelRequest, state: FauxState) -> AssistantMessage:
        last = request.messages[-1]
        if isinstance(last, ToolResultMessage):
            return faux_message(f"result: {last.content}")
        if offered is not None:
            offered.append(sorted(t.name for t in request.tools))
        text = last.content if isinstance(last.content, str) else ""
        if text.startswith("search "):
            arguments: JsonObject = {"to": text.removeprefix("search ")}
            call = faux_tool_call("trains__search", arguments, id=f"call_{len(request.messages)}")
            return faux_message(call)
        return faux_message("hello")

    return FauxModel(fallback=step)
