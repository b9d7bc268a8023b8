"""MCP tools on the local host, through its HTTP API: an actor lists and calls the tools
of a real loopback MCP server (the bearer token from the host's secrets); a restarted
host, with the server gone, offers the tools from the actor's file without listing and
the failed call reaches the model as a tool result. ``perdure dev --mcp FILE`` configures
servers from JSON."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from runtimes.mcp import McpServer, mcp_extension, servers_from_json
from runtimes.mcp.sdk import SdkConnector
from tests.local.support import ROOT, TOKEN, host_config, serve_in_thread
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


def test_perdure_dev_offers_the_tools_of_the_configured_mcp_servers(tmp_path: Path) -> None:
    from tests.local.test_cli import ask, start_dev
    from tests.models.fake_openai import FakeOpenAI, Stream, finish, text

    model = FakeOpenAI()
    model.start()
    try:
        model.script(Stream([text("no tool needed"), finish("stop")]))
        with mcp_server(tmp_path, token=SECRET) as server:
            config = tmp_path / "mcp.json"
            trains = {
                "name": "trains",
                "url": server.url,
                "headers": {"Authorization": "Bearer ${TRAINS_MCP_TOKEN}"},
                "tools": ["search", "book"],
                "approval": {"book": "always"},
            }
            config.write_text(json.dumps({"servers": [trains]}))
            proc, url, token, lines = start_dev(
                tmp_path / "data",
                "--model",
                "openai/fake-model",
                "--api-base",
                model.base_url,
                "--mcp",
                str(config),
                env={"OPENAI_API_KEY": "sk-test", "TRAINS_MCP_TOKEN": SECRET},
            )
            try:
                assert f"mcp:   trains ({server.url})" in lines
                state = ask(url, token, "a", "hello")
                assert state["status"] == "done", state
                offered = [t["function"]["name"] for t in model.last_body().get("tools", [])]
                assert {"trains__search", "trains__book"} <= set(offered), offered
                assert "trains__broken" not in offered  # not on the allow-list
            finally:
                proc.send_signal(signal.SIGTERM)
                proc.communicate(timeout=20)
    finally:
        model.stop()


def test_a_bad_mcp_configuration_stops_perdure_dev_with_what_to_fix(tmp_path: Path) -> None:
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"servers": [{"name": "my_trains", "url": "http://x/mcp"}]}))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "runtimes.cli.main",
            "dev",
            "--port",
            "0",
            "--data",
            str(tmp_path / "data"),
            "--mcp",
            str(config),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=60,
    )
    assert done.returncode == 2, done
    assert f"error: --mcp {config}: an MCP server name matches" in done.stderr, done.stderr


def test_servers_from_json_names_what_is_wrong() -> None:
    good = servers_from_json(
        '{"servers": [{"name": "t", "url": "http://127.0.0.1:1/mcp", "replay": {"a": "safe"},'
        ' "approval": {"b": "always"}, "timeout_s": 5, "tools": ["a", "b"]}]}'
    )
    assert good[0].replay == {"a": "safe"} and good[0].timeout_s == 5
    for text, problem in [
        ("[", "not JSON"),
        ("[]", '{"servers": [...]}'),
        ('{"servers": [{"name": "t", "url": "http://x/mcp", "port": 1}]}', "unknown field"),
        (
            '{"servers": [{"name": "t", "url": "http://x/mcp", "approval": {"b": "maybe"}}]}',
            "always or never",
        ),
        ('{"servers": [{"name": "t", "url": "ftp://x"}]}', "url must be http(s)"),
        ('{"servers": [{"name": "t", "url": "http://x/mcp", "timeout_s": "5"}]}', "seconds"),
        (
            '{"servers": [{"name": "t", "url": "http://x/a"}, {"name": "t", "url": "http://x/b"}]}',
            "configured twice",
        ),
    ]:
        with pytest.raises(ValueError, match=re.escape(problem)):
            servers_from_json(text)
