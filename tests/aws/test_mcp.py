"""MCP tools on the AWS host (moto): an actor behind the Lambda handler lists and calls
the tools of a real loopback MCP server, with the server's bearer token read from
Secrets Manager; a cold start on a new container, with the server gone, still offers the
tools from the conversation's listing (nothing is listed again) and the call's failure
reaches the model as a tool result."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import boto3
import pytest

from core.jsonvalue import JsonObject
from core.testing import VirtualClock
from runtimes.actor import ActorConfig
from runtimes.actor.api import ApiConfig
from runtimes.actor.testing import KIT_TOKEN
from runtimes.aws import AwsResources
from runtimes.aws.alarms import WakeSchedule
from runtimes.aws.handler import ActorFunction, FunctionSettings
from runtimes.mcp import McpServer, mcp_extension
from runtimes.mcp.sdk import SdkConnector
from tests.aws.aws_target import create_alarms
from tests.aws.conftest import REGION
from tests.aws.lambda_support import answer, context, url_event
from tests.aws.support import container
from tests.mcp.support import mcp_model, mcp_server

TOKEN = "mcp-bearer-0123456789"


class CountingListings(SdkConnector):
    def __init__(self) -> None:
        self.listings = 0

    async def list_tools(self, server: McpServer, headers: Mapping[str, str]) -> list[JsonObject]:
        self.listings += 1
        return await super().list_tools(server, headers)


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock()


@pytest.fixture
def alarms(aws: AwsResources, clock: VirtualClock) -> WakeSchedule:
    return create_alarms(clock.now)


def _function(
    aws: AwsResources,
    alarms: WakeSchedule,
    tmp: Path,
    clock: VirtualClock,
    url: str,
    connector: SdkConnector,
    offered: list[list[str]],
) -> ActorFunction:
    client = boto3.client("secretsmanager", region_name=REGION)

    def secrets(name: str) -> str | None:  # the deployment's lookup: Secrets Manager
        return str(client.get_secret_value(SecretId=name)["SecretString"])

    server = McpServer("trains", url, headers={"Authorization": "Bearer ${trains-mcp-token}"})
    config = ActorConfig(
        models=mcp_model(offered),
        extensions=[mcp_extension([server], connector=connector, secrets=secrets)],
        default_agent={"model": "faux/faux-1"},
    )
    settings = FunctionSettings(
        resources=aws,
        actor=config,
        api=ApiConfig(KIT_TOKEN),
        workdir=container(tmp),
        alarms=alarms,
        clock=clock,
    )
    return ActorFunction(settings)


async def _ask(fn: ActorFunction, content: str) -> Any:
    body = {"type": "input", "content": content}
    status, out = answer(
        await fn.invoke(url_event("POST", "/v1/actors/mcp/submissions", body), context())
    )
    assert status == 202, out
    path = f"/v1/actors/mcp/submissions/{out['id']}"
    status, state = answer(await fn.invoke(url_event("GET", path), context()))
    assert status == 200 and state["status"] == "done", state
    return state["answer"]["text"]


async def test_an_actor_on_lambda_lists_and_calls_mcp_tools(
    aws: AwsResources,
    alarms: WakeSchedule,
    clock: VirtualClock,
    tmp_path: Path,
) -> None:
    boto3.client("secretsmanager", region_name=REGION).create_secret(
        Name="trains-mcp-token", SecretString=TOKEN
    )
    offered: list[list[str]] = []
    with mcp_server(tmp_path, token=TOKEN) as server:
        first = CountingListings()
        fn = _function(aws, alarms, tmp_path, clock, server.url, first, offered)
        text = await _ask(fn, "search Graz")
        assert text == "result: IC 501 to Graz leaves at 09:12"
        assert "trains__search" in offered[-1] and first.listings == 1
        assert [c["args"] for c in server.calls("search")] == [{"to": "Graz"}]
        url = server.url
    # A cold start on a new container; the server is gone.
    later = CountingListings()
    fn = _function(aws, alarms, tmp_path, clock, url, later, offered)  # a new /tmp
    text = await _ask(fn, "search Linz")
    assert "trains__search" in offered[-1]
    assert later.listings == 0  # the listing came with the actor's state, not the server
    assert text.startswith("result: [error] MCP server trains")
    assert "cannot be reached" in text
