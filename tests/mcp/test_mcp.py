"""MCP tools against a real MCP server (the SDK's, over streamable HTTP on loopback, in a
child process): listing, calling, the listing kept across a restart, replay policies
from annotations, and every failure as a tool result the model reads."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from core.faux import FauxModel, faux_message, faux_tool_call
from core.harness import Harness, ModelRequest, Registry, ToolResultMessage
from core.harness.tool_sources import TOOL_SOURCES
from core.jsonvalue import JsonObject
from runtimes.actor.clock import SystemClock
from runtimes.local import open_sqlite_storage
from runtimes.mcp import McpProblem, McpServer, McpToolSource, mcp_extension
from runtimes.mcp.http_client import HttpConnector
from runtimes.mcp.sdk import SdkConnector
from runtimes.mcp.source import CallOutcome, McpConnector
from tests.core.support import until
from tests.mcp.support import McpProcess, mcp_server

MODEL = "faux/faux-1"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpProcess]:
    with mcp_server(tmp_path_factory.mktemp("mcp")) as process:
        yield process


CONNECTORS = {"sdk": SdkConnector, "http": HttpConnector}


@pytest.fixture(params=sorted(CONNECTORS))
def connector(request: pytest.FixtureRequest) -> McpConnector:
    """Each test runs with the SDK's client (local, Lambda) and with the client over
    httpx alone (what a Worker uses over fetch)."""
    made: McpConnector = CONNECTORS[request.param]()
    return made


class Counting:
    """A connector, counting what it is asked (the test's evidence of reconnects)."""

    def __init__(self, inner: McpConnector) -> None:
        self.inner = inner
        self.listings = 0

    async def list_tools(self, server: McpServer, headers: Mapping[str, str]) -> list[JsonObject]:
        self.listings += 1
        return await self.inner.list_tools(server, headers)

    async def call_tool(
        self, server: McpServer, headers: Mapping[str, str], name: str, arguments: JsonObject
    ) -> CallOutcome:
        return await self.inner.call_tool(server, headers, name, arguments)


def no_secrets(name: str) -> str | None:
    return None


async def run(
    db: Path,
    servers: list[McpServer],
    steps: list[Any],
    *,
    connector: McpConnector,
    secrets: Any = no_secrets,
    request_id: str = "job",
) -> tuple[FauxModel, Harness, Any]:
    """One 'process': open the actor, submit, wait for the answer, close."""
    model = FauxModel(steps)
    extension = mcp_extension(servers, connector=connector, secrets=secrets)
    harness = await Harness.open(
        await open_sqlite_storage(db),
        models=model,
        registry=Registry([extension]),
        clock=SystemClock(),
    )
    try:
        root = await harness.root(agent={"model": MODEL})
        submission = await root.submit("go", request_id=request_id)
        record = await submission.wait()
        assert record.status == "done", record
        listings = await harness.session.document_value(TOOL_SOURCES, root.id)
    finally:
        await harness.close()
    return model, harness, listings


def tool_results(request: ModelRequest) -> list[ToolResultMessage]:
    return [m for m in request.messages if isinstance(m, ToolResultMessage)]


def offered(request: ModelRequest) -> dict[str, Any]:
    return {t.name: t for t in request.tools}


def calling(*calls: tuple[str, JsonObject]) -> list[Any]:
    return [
        faux_message(*(faux_tool_call(n, a, id=f"c{i}") for i, (n, a) in enumerate(calls))),
        faux_message("done"),
    ]


async def test_an_agent_lists_and_calls_the_tools_of_a_loopback_server(
    connector: McpConnector, server: McpProcess, tmp_path: Path
) -> None:
    trains = McpServer("trains", server.url)
    model, _, listings = await run(
        tmp_path / "a.sqlite",
        [trains],
        calling(("trains__search", {"to": "Graz"}), ("trains__book", {"train": "IC 501"})),
        connector=connector,
    )
    first, second = model.state.requests
    tools = offered(first)
    assert {"trains__search", "trains__book", "trains__cancel"} <= set(tools)
    # The server's own JSON schema is what the model sees.
    assert tools["trains__search"].parameters["required"] == ["to"]
    assert "Find trains" in tools["trains__search"].description
    results = {r.tool_name: r for r in tool_results(second)}
    assert results["trains__search"].content == "IC 501 to Graz leaves at 09:12"
    assert results["trains__book"].content == "seat 42 booked on IC 501"
    assert not any(r.is_error for r in results.values())
    assert {"tool": "book", "args": {"train": "IC 501"}, "event": "end"} in server.calls(
        event="end"
    )
    listing = listings["trains"]
    assert isinstance(listing["fetched_at"], int)
    assert {t["name"] for t in listing["tools"]} >= {"search", "book", "broken"}


async def test_the_tool_list_survives_a_restart_without_a_reconnect(
    connector: McpConnector, tmp_path: Path
) -> None:
    db = tmp_path / "a.sqlite"
    with mcp_server(tmp_path) as live:
        trains = McpServer("trains", live.url)
        await run(db, [trains], [faux_message("hello")], connector=connector, request_id="one")
        url = live.url
    # The server is gone; a new process opens the actor: the first request already
    # offers the server's tools (from the conversation's listing), nothing is listed.
    counting = Counting(connector)
    model, _, _ = await run(
        db,
        [McpServer("trains", url)],
        calling(("trains__search", {"to": "Linz"})),
        connector=counting,
        request_id="two",
    )
    first, second = model.state.requests
    assert "trains__search" in offered(first)
    assert counting.listings == 0
    # The call could not reach the server: the model is told so, and the run went on.
    (result,) = tool_results(second)[-1:]
    assert result.is_error
    assert "MCP server trains" in result.content and "cannot be reached" in result.content
    assert result.details == {
        "mcp": {"server": "trains", "tool": "search", "problem": "unreachable"}
    }


async def test_a_slow_server_past_the_timeout_is_a_tool_result(
    connector: McpConnector, server: McpProcess, tmp_path: Path
) -> None:
    trains = McpServer("trains", server.url, timeout_s=1)
    model, _, _ = await run(
        tmp_path / "a.sqlite",
        [trains],
        calling(("trains__slow", {"seconds": 5})),
        connector=connector,
    )
    (result,) = tool_results(model.state.requests[-1])
    assert result.is_error
    assert "did not answer within 1 s" in result.content
    assert result.details["mcp"]["problem"] == "timeout"


async def test_a_protocol_error_is_a_tool_result(
    connector: McpConnector, server: McpProcess, tmp_path: Path
) -> None:
    db = tmp_path / "a.sqlite"
    await run(
        db,
        [McpServer("trains", server.url)],
        [faux_message("listed")],
        connector=connector,
        request_id="one",
    )
    # The operator points the server at an endpoint that does not speak MCP; the
    # listing is still fresh, so the call goes there.
    model, _, _ = await run(
        db,
        [McpServer("trains", server.broken_url)],
        calling(("trains__search", {"to": "Graz"})),
        request_id="two",
        connector=connector,
    )
    (result,) = tool_results(model.state.requests[-1])[-1:]
    assert result.is_error and result.details["mcp"]["problem"] == "protocol"
    assert "did not speak MCP" in result.content, result.content


async def test_a_tool_error_reaches_the_model(
    connector: McpConnector, server: McpProcess, tmp_path: Path
) -> None:
    model, _, _ = await run(
        tmp_path / "a.sqlite",
        [McpServer("trains", server.url)],
        calling(("trains__broken", {})),
        connector=connector,
    )
    (result,) = tool_results(model.state.requests[-1])
    assert result.is_error
    assert result.content.startswith("[error] MCP tool broken of server trains failed")
    assert result.details["mcp"]["problem"] == "tool_error"


async def test_elicitation_is_refused_unless_configured(
    connector: McpConnector, server: McpProcess, tmp_path: Path
) -> None:
    model, _, _ = await run(
        tmp_path / "a.sqlite",
        [McpServer("trains", server.url)],
        calling(("trains__confirm", {})),
        connector=connector,
    )
    (result,) = tool_results(model.state.requests[-1])
    assert result.is_error
    assert "elicitation is not configured for MCP server trains" in result.content, result.content


async def test_a_list_changed_notification_lists_again_before_the_next_request(
    connector: McpConnector, tmp_path: Path
) -> None:
    counting = Counting(connector)
    with mcp_server(tmp_path) as server:  # its own: growing changes the server's tools
        model, _, listings = await run(
            tmp_path / "a.sqlite",
            [McpServer("trains", server.url)],
            calling(("trains__grow", {})),
            connector=counting,
        )
    first, second = model.state.requests
    assert "trains__later" not in offered(first)
    assert "trains__later" in offered(second)
    assert counting.listings == 2
    assert "changed" not in listings["trains"]


async def test_the_allow_list_and_headers_from_host_secrets(
    connector: McpConnector, tmp_path: Path
) -> None:
    with mcp_server(tmp_path, token="s3cret") as guarded:
        trains = McpServer(
            "trains",
            guarded.url,
            headers={"Authorization": "Bearer ${TRAINS_TOKEN}"},
            tools=["search"],
        )
        secrets = {"TRAINS_TOKEN": "s3cret"}.get
        model, _, _ = await run(
            tmp_path / "a.sqlite",
            [trains],
            calling(("trains__search", {"to": "Wels"})),
            secrets=secrets,
            connector=connector,
        )
        first, second = model.state.requests
        assert [n for n in offered(first) if n.startswith("trains__")] == ["trains__search"]
        (result,) = tool_results(second)
        assert result.content == "IC 501 to Wels leaves at 09:12"
        # Without the secret: nothing is listed (the error is reported), nothing is sent.
        model, _, _ = await run(
            tmp_path / "b.sqlite", [trains], [faux_message("no tools")], connector=connector
        )
        assert not [n for n in offered(model.state.requests[0]) if n.startswith("trains__")]


async def test_the_connector_names_each_problem(
    connector: McpConnector, server: McpProcess
) -> None:
    with pytest.raises(McpProblem) as down:
        await connector.list_tools(McpServer("gone", "http://127.0.0.1:9/mcp"), {})
    assert down.value.kind == "unreachable"
    with pytest.raises(McpProblem) as broken:
        await connector.call_tool(McpServer("bad", server.broken_url), {}, "search", {})
    assert broken.value.kind == "protocol"
    assert "MCP server bad" in str(broken.value)


def test_replay_policies_come_from_annotations_unless_overridden() -> None:
    listing: JsonObject = {
        "fetched_at": 0,
        "tools": [
            {"name": "search", "annotations": {"readOnlyHint": True}},
            {"name": "cancel", "annotations": {"idempotentHint": True}},
            {"name": "book", "annotations": {"readOnlyHint": False, "destructiveHint": False}},
            {"name": "plain"},
            {"name": "has.dot", "annotations": {"readOnlyHint": True}},
        ],
    }
    source = McpToolSource(
        McpServer("trains", "http://127.0.0.1:1/mcp"), SdkConnector(), no_secrets
    )
    tools = source.tools(listing)
    assert {n: t.replay for n, t in tools.items()} == {
        "trains__search": "safe",
        "trains__cancel": "safe",
        "trains__book": "unsafe",
        "trains__plain": "unsafe",
    }
    overridden = McpToolSource(
        McpServer("trains", "http://127.0.0.1:1/mcp", replay={"search": "unsafe", "book": "safe"}),
        SdkConnector(),
        no_secrets,
    )
    tools = overridden.tools(listing)
    assert tools["trains__search"].replay == "unsafe"
    assert tools["trains__book"].replay == "safe"
    with pytest.raises(ValueError, match="cannot be recoverable"):
        McpServer("trains", "http://x/mcp", replay={"book": "recoverable"})
    with pytest.raises(ValueError, match="MCP server name"):
        McpServer("my_trains", "http://x/mcp")
    # TTL and the changed mark decide whether a listing is due.
    ttl = McpToolSource(McpServer("t", "http://x/mcp", ttl_s=60), SdkConnector(), no_secrets)
    assert ttl.due(None, 0)
    assert not ttl.due({"fetched_at": 1_000}, 60_999)
    assert ttl.due({"fetched_at": 1_000}, 61_000)
    assert ttl.due({"fetched_at": 1_000, "changed": True}, 1_001)


async def test_an_mcp_tool_can_need_approval(
    connector: McpConnector, server: McpProcess, tmp_path: Path
) -> None:
    """The same declaration as ``define_tool(approval=)``: the call parks before its
    intent, nothing reaches the server until a person approves, then it runs once."""
    trains = McpServer("trains", server.url, approval={"cancel": "always"})
    model = FauxModel(calling(("trains__cancel", {"booking": f"B-{connector.__class__.__name__}"})))
    extension = mcp_extension([trains], connector=connector, secrets=no_secrets)
    harness = await Harness.open(
        await open_sqlite_storage(tmp_path / "a.sqlite"),
        models=model,
        registry=Registry([extension]),
        clock=SystemClock(),
    )
    try:
        root = await harness.root(agent={"model": MODEL})
        submission = await root.submit("cancel it")
        await until(lambda: bool(harness.approvals()))
        booking = f"B-{connector.__class__.__name__}"
        assert not [c for c in server.calls("cancel") if c["args"] == {"booking": booking}]
        (pending,) = harness.approvals()
        await harness.decide_approval(int(str(pending["id"])), "approve")
        record = await submission.wait()
        assert record.status == "done"
    finally:
        await harness.close()
    (result,) = tool_results(model.state.requests[-1])
    assert result.content == f"booking {booking} cancelled"
    assert len([c for c in server.calls("cancel") if c["args"] == {"booking": booking}]) == 1


async def test_an_abort_stops_a_call_in_flight(
    connector: McpConnector, server: McpProcess, tmp_path: Path
) -> None:
    """The harness cancels the running call on abort: the session is closed at once, not
    when the server answers or the timeout ends."""
    seconds = 20 + len(server.calls("slow"))  # this run's own arguments in the shared log
    model = FauxModel(calling(("trains__slow", {"seconds": seconds})))
    extension = mcp_extension(
        [McpServer("trains", server.url)], connector=connector, secrets=no_secrets
    )
    harness = await Harness.open(
        await open_sqlite_storage(tmp_path / "a.sqlite"),
        models=model,
        registry=Registry([extension]),
        clock=SystemClock(),
    )
    try:
        root = await harness.root(agent={"model": MODEL})
        submission = await root.submit("wait")
        await until(
            lambda: any(c["args"] == {"seconds": seconds} for c in server.calls("slow")),
            timeout=20,
        )
        started = time.monotonic()
        assert await root.abort() >= 1
        record = await submission.wait()
        assert time.monotonic() - started < 5
        assert record.status == "unanswered"
    finally:
        await harness.close()
