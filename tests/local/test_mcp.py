"""MCP tools on the local host, through its HTTP API: an actor lists and calls the tools
of a real loopback MCP server (the bearer token from the host's secrets); a restarted
host, with the server gone, offers the tools from the actor's file without listing and
the failed call reaches the model as a tool result."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runtimes.mcp import McpServer, mcp_extension
from runtimes.mcp.sdk import SdkConnector
from tests.local.support import TOKEN, host_config, serve_in_thread
from tests.mcp.support import mcp_model, mcp_server

SECRET = "local-mcp-token-0123"


class CountingListings(SdkConnector):
    def __init__(self) -> None:
        self.listings = 0

    async def list_tools(self, server: Any, headers: Any) -> Any:
        self.listings += 1
        return await super().list_tools(server, headers)


def _ask(url: str, content: str) -> str:
    import httpx

    with httpx.Client(base_url=url, headers={"authorization": f"Bearer {TOKEN}"}) as client:
        accepted = client.post(
            "/v1/actors/mcp/submissions", json={"type": "input", "content": content}
        )
        assert accepted.status_code == 202, accepted.text
        state = client.get(f"/v1/actors/mcp/submissions/{accepted.json()['id']}?wait=20").json()
    assert state["status"] == "done", state
    return str(state["answer"]["text"])


def test_the_local_host_lists_and_calls_mcp_tools(tmp_path: Path) -> None:
    data = tmp_path / "data"
    offered: list[list[str]] = []
    secrets = {"TRAINS_TOKEN": SECRET}.get
    with mcp_server(tmp_path, token=SECRET) as server:
        trains = McpServer(
            "trains", server.url, headers={"Authorization": "Bearer ${TRAINS_TOKEN}"}
        )
        first = CountingListings()
        config = host_config(
            data,
            models=mcp_model(offered),
            extensions=[mcp_extension([trains], connector=first, secrets=secrets)],
            default_agent={"model": "faux/faux-1"},
        )
        with serve_in_thread(config) as running:
            assert _ask(running.url, "search Graz") == "result: IC 501 to Graz leaves at 09:12"
        assert first.listings == 1 and "trains__search" in offered[-1]
        assert [c["args"] for c in server.calls("search")] == [{"to": "Graz"}]
    later = CountingListings()
    config = host_config(
        data,
        models=mcp_model(offered),
        extensions=[mcp_extension([trains], connector=later, secrets=secrets)],
        default_agent={"model": "faux/faux-1"},
    )
    with serve_in_thread(config) as running:
        text = _ask(running.url, "search Linz")
    assert "trains__search" in offered[-1] and later.listings == 0
    assert text.startswith("result: [error] MCP server trains") and "cannot be reached" in text
