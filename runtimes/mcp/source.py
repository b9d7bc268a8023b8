"""MCP servers as a tool source: listings kept in the conversation, calls over a
connector, every failure a tool result the model can act on.

The listing of a server (the ``tool_sources`` document, see
``core/harness/tool_sources.py``) is ``{"fetched_at", "tools": [{name, description,
input_schema, annotations}], "skipped": [...], "changed"?}``. The tools the model sees
are built from it — name ``server__tool``, the server's JSON schema, the replay policy
from its annotations or the operator's override — so a recovered run resolves an MCP
call's tool and policy without connecting.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from pydantic import BaseModel, ConfigDict

from core.harness import (
    Extension,
    ToolContext,
    ToolDefinition,
    ToolResult,
    define_extension,
    define_tool,
)
from core.harness.tool_sources import TOOL_SOURCES, mark_changed
from core.jsonvalue import JsonObject, JsonValue, dumps, loads
from core.session import Tx
from runtimes.mcp.config import (
    McpProblem,
    McpServer,
    SecretLookup,
    model_name,
    replay_from_annotations,
    resolve_headers,
)

__all__ = [
    "CallOutcome",
    "McpArguments",
    "McpConnector",
    "McpToolSource",
    "mcp_extension",
]


class McpArguments(BaseModel):
    """Any JSON object: the server validates against its own schema (its error reaches
    the model as the call's result)."""

    model_config = ConfigDict(extra="allow")


@dataclass(frozen=True)
class CallOutcome:
    """A call the server answered: ``text`` for the model, ``is_error`` (the tool's
    ``isError``), ``structured`` content if any, and whether the server said during the
    call that its tool list changed."""

    text: str
    is_error: bool = False
    structured: JsonValue = None
    list_changed: bool = False


class McpConnector(Protocol):
    """How a host reaches MCP servers (the SDK where it imports; the runtime's fetch
    elsewhere).

    Contract: every method opens what it needs and closes it before returning (a Lambda
    invocation or a Durable Object may end right after); it never runs inside a commit.
    A server that cannot be reached, does not answer within ``server.timeout_s``, or
    answers something that is not MCP raises :class:`McpProblem` (``unreachable``,
    ``timeout``, ``protocol``) with a message naming the server; a tool that ran and
    failed is a :class:`CallOutcome` with ``is_error``. A request from the server for
    elicitation or sampling is answered by ``server.elicitation`` / ``server.sampling``,
    or refused with an error that says it is not configured.
    """

    async def list_tools(self, server: McpServer, headers: Mapping[str, str]) -> list[JsonObject]:
        """Every tool the server lists (all pages): ``{name, description, input_schema,
        annotations}``; ``annotations`` as the MCP wire names them (``readOnlyHint``)."""
        ...

    async def call_tool(
        self, server: McpServer, headers: Mapping[str, str], name: str, arguments: JsonObject
    ) -> CallOutcome:
        """Call tool ``name`` (the server's own name) with ``arguments``."""
        ...


class McpToolSource:
    """One configured server as a :class:`~core.harness.tool_sources.ToolSource`."""

    def __init__(self, server: McpServer, connector: McpConnector, secrets: SecretLookup):
        self.server = server
        self.connector = connector
        self.secrets = secrets
        self._built: tuple[object, dict[str, ToolDefinition]] | None = None

    @property
    def name(self) -> str:
        return self.server.name

    def tools(self, listing: JsonValue) -> Mapping[str, ToolDefinition]:
        built = self._built
        if built is not None and built[0] is listing:
            return built[1]  # the same committed listing: the same definitions
        tools: dict[str, ToolDefinition] = {}
        items = listing.get("tools") if isinstance(listing, dict) else None
        for item in items if isinstance(items, list) else []:
            tool = self._definition(item)
            if tool is not None:
                tools[tool.name] = tool
        self._built = (listing, tools)
        return tools

    def due(self, listing: JsonValue, now: int) -> bool:
        if not isinstance(listing, dict) or listing.get("changed") is True:
            return True
        fetched = listing.get("fetched_at")
        if not isinstance(fetched, int):
            return True
        return now - fetched >= self.server.ttl_s * 1000

    async def fetch(self, listing: JsonValue, now: int) -> JsonValue:
        listed = await self.connector.list_tools(self.server, self._headers())
        allowed = None if self.server.tools is None else set(self.server.tools)
        tools: list[JsonValue] = []
        skipped: list[JsonValue] = []
        for item in listed:
            name = item.get("name")
            if not isinstance(name, str) or (allowed is not None and name not in allowed):
                continue
            if model_name(self.server.name, name) is None:
                skipped.append({"name": name, "reason": "no valid model-facing name"})
                continue
            schema = item.get("input_schema")
            tools.append(
                {
                    "name": name,
                    "description": item.get("description") or "",
                    "input_schema": schema if isinstance(schema, dict) else {"type": "object"},
                    "annotations": item.get("annotations") or {},
                }
            )
        value: JsonObject = {"fetched_at": now, "tools": tools}
        if skipped:
            value["skipped"] = skipped
        plain: JsonValue = loads(dumps(value))  # detached, plain JSON only
        return plain

    def _headers(self) -> dict[str, str]:
        return resolve_headers(self.server, self.secrets)

    def _definition(self, item: JsonValue) -> ToolDefinition | None:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            return None
        tool = str(item["name"])
        name = model_name(self.server.name, tool)
        if name is None:
            return None
        policy = self.server.replay.get(tool) or replay_from_annotations(item.get("annotations"))
        schema = item.get("input_schema")
        description = item.get("description")
        return define_tool(
            name,
            description=f"{description or ''} (MCP server {self.server.name}, tool {tool})".strip(),
            parameters=McpArguments,
            execute=functools.partial(self._execute, tool),
            replay=policy,
            approval=self.server.approval.get(tool, "never"),
            approval_expires_s=self.server.approval_expires_s,
            input_schema=schema if isinstance(schema, dict) else {"type": "object"},
        )

    async def _execute(self, tool: str, args: McpArguments, ctx: ToolContext) -> ToolResult:
        arguments: JsonObject = loads(dumps(args.model_dump()))
        server = self.server.name
        try:
            outcome = await self.connector.call_tool(self.server, self._headers(), tool, arguments)
        except McpProblem as problem:
            return ToolResult(
                f"[error] {problem}",
                is_error=True,
                details={"mcp": {"server": server, "tool": tool, "problem": problem.kind}},
            )
        details: JsonObject = {"server": server, "tool": tool}
        if outcome.is_error:
            details["problem"] = "tool_error"
        if outcome.structured is not None:
            details["structured"] = outcome.structured
        text = outcome.text
        if outcome.is_error:
            text = f"[error] MCP tool {tool} of server {server} failed: {text}"
        apply = None
        if outcome.list_changed:
            conversation = ctx.conversation_id

            async def apply(tx: Tx) -> None:
                await mark_changed(tx, conversation, server)

        return ToolResult(text, is_error=outcome.is_error, details={"mcp": details}, apply=apply)


def mcp_extension(
    servers: Sequence[McpServer],
    *,
    connector: McpConnector,
    secrets: SecretLookup,
    name: str = "mcp",
) -> Extension:
    """An extension whose tools are ``servers``' tools, listed per conversation.

    An agent selects them by selecting the extension (``extensions`` unset, or naming
    ``name``); the agent's ``tools`` list does not filter them — each server's
    ``tools`` allow-list does.
    """
    names = [s.name for s in servers]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"MCP server name(s) {dupes} configured twice")
    sources = [McpToolSource(s, connector, secrets) for s in servers]
    return define_extension(name, sources=sources, documents=[TOOL_SOURCES])
