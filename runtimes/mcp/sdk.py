"""The :class:`~runtimes.mcp.source.McpConnector` over the official ``mcp`` SDK
(streamable HTTP), for the local host and Lambda.

One MCP session per listing or call: connect, initialize, one request, close. Nothing
is held between calls, so a Lambda invocation or an evicted actor leaves no connection
behind, and a crash loses nothing but the call in flight. Everything runs under one
deadline (``server.timeout_s``), connection included.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import httpx2
import mcp_types as types
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from core.jsonvalue import JsonObject, JsonValue, dumps, loads
from runtimes.mcp.config import McpProblem, McpServer, content_text
from runtimes.mcp.source import CallOutcome

__all__ = ["SdkConnector"]

T = TypeVar("T")
_LIST_PAGES = 100  # a server whose cursor never ends cannot hold a listing forever


class SdkConnector:
    """MCP over the ``mcp`` SDK's streamable HTTP client."""

    async def list_tools(self, server: McpServer, headers: Mapping[str, str]) -> list[JsonObject]:
        async def listing(session: ClientSession, _: list[bool]) -> list[JsonObject]:
            tools: list[JsonObject] = []
            cursor: str | None = None
            for _page in range(_LIST_PAGES):
                params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
                result = await session.list_tools(params=params)
                for tool in result.tools:
                    wire = tool.model_dump(by_alias=True, mode="json", exclude_none=True)
                    tools.append(
                        {
                            "name": tool.name,
                            "description": tool.description or "",
                            "input_schema": _json(wire.get("inputSchema")),
                            "annotations": _json(wire.get("annotations") or {}),
                        }
                    )
                cursor = result.next_cursor
                if not cursor:
                    break
            return tools

        return await _session(server, headers, "listing its tools", listing)

    async def call_tool(
        self, server: McpServer, headers: Mapping[str, str], name: str, arguments: JsonObject
    ) -> CallOutcome:
        async def call(session: ClientSession, changed: list[bool]) -> CallOutcome:
            result = await session.call_tool(name, dict(arguments))
            structured = result.structured_content
            return CallOutcome(
                text=content_text(
                    [_json(b.model_dump(by_alias=True, mode="json")) for b in result.content],
                    _json(structured) if structured is not None else None,
                ),
                is_error=bool(result.is_error),
                structured=_json(structured) if structured is not None else None,
                list_changed=bool(changed),
            )

        return await _session(server, headers, f"calling {name}", call)


async def _session(
    server: McpServer,
    headers: Mapping[str, str],
    doing: str,
    work: Callable[[ClientSession, list[bool]], Awaitable[T]],
) -> T:
    """Run ``work(session, changed)`` in a fresh session under the server's deadline,
    mapping every way it can fail to an :class:`McpProblem`."""
    changed: list[bool] = []
    refused: list[int] = []  # HTTP error statuses: the SDK turns them into a generic error

    async def on_status(response: httpx2.Response) -> None:
        if response.status_code >= 400:
            refused.append(response.status_code)

    async def on_message(message: Any) -> None:
        if getattr(message, "method", None) == "notifications/tools/list_changed":
            changed.append(True)

    where = f"MCP server {server.name} ({server.url})"
    try:
        async with asyncio.timeout(server.timeout_s):
            async with (
                httpx2.AsyncClient(
                    headers=dict(headers),
                    timeout=server.timeout_s,
                    event_hooks={"response": [on_status]},
                ) as http,
                streamable_http_client(server.url, http_client=http) as (read, write),
                ClientSession(
                    read,
                    write,
                    read_timeout_seconds=server.timeout_s,
                    message_handler=on_message,
                    elicitation_callback=server.elicitation or _refuse(server, "elicitation"),
                    sampling_callback=server.sampling or _refuse(server, "sampling"),
                ) as session,
            ):
                await session.initialize()
                return await work(session, changed)
    except TimeoutError:
        raise McpProblem(
            "timeout",
            f"{where} did not answer within {server.timeout_s:g} s while {doing}"
            + (
                "; the call may still have run on the server" if doing.startswith("calling") else ""
            ),
        ) from None
    except McpProblem:
        raise
    except BaseException as error:
        if not isinstance(error, Exception):
            raise  # cancellation and exits are not the server's problem
        if refused:
            status = refused[0]
            raise McpProblem(
                "refused", f"{where} answered HTTP {status} while {doing}{_hint(status)}"
            ) from None
        raise _problem(where, doing, error) from None


def _problem(where: str, doing: str, error: BaseException) -> McpProblem:
    """The first meaningful error inside anyio's exception groups, as a problem."""
    leaves = list(_leaves(error))
    for leaf in leaves:
        if isinstance(leaf, TimeoutError | httpx2.TimeoutException):
            return McpProblem("timeout", f"{where} did not answer in time while {doing}")
    for leaf in leaves:
        if isinstance(leaf, httpx2.ConnectError | OSError):
            return McpProblem("unreachable", f"{where} cannot be reached: {_short(leaf)}")
    for leaf in leaves:
        if isinstance(leaf, httpx2.HTTPStatusError):
            status = leaf.response.status_code
            return McpProblem("refused", f"{where} answered HTTP {status} while {doing}")
    for leaf in leaves:
        if isinstance(leaf, MCPError) and leaf.error.code == types.REQUEST_TIMEOUT:
            return McpProblem("timeout", f"{where} did not answer in time while {doing}")
    for leaf in leaves:
        if isinstance(leaf, MCPError):
            message = _short(leaf.error.message)
            if leaf.error.code == types.PARSE_ERROR:  # the client could not parse the answer
                return McpProblem("protocol", f"{where} did not speak MCP while {doing}: {message}")
            return McpProblem(
                "protocol", f"{where} answered with an error while {doing}: {message}"
            )
    for leaf in leaves:
        if isinstance(leaf, httpx2.TransportError):
            return McpProblem("unreachable", f"{where} cannot be reached: {_short(leaf)}")
    first = leaves[0] if leaves else error
    return McpProblem(
        "protocol",
        f"{where} did not speak MCP while {doing}: {type(first).__name__}: {_short(first)}",
    )


def _hint(status: int) -> str:
    if status in (401, 403):
        return " (check the server's headers and the host secrets they name)"
    if status == 404:
        return " (check the server's URL)"
    return ""


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    chained = [error]
    cause = error.__cause__ or error.__context__
    if cause is not None and cause is not error:
        chained.extend(_leaves(cause))
    return chained


def _short(error: BaseException | str) -> str:
    """The first line, at most 300 characters (validation errors run on for pages)."""
    text = (str(error) or type(error).__name__).strip().splitlines()[0]
    return text if len(text) <= 300 else text[:300] + "..."


def _refuse(server: McpServer, what: str) -> Any:
    async def refuse(context: Any, params: Any) -> types.ErrorData:
        return types.ErrorData(
            code=types.INVALID_REQUEST,
            message=(
                f"the client refuses {what} requests: {what} is not configured for MCP "
                f"server {server.name} on this perdure host"
            ),
        )

    return refuse


def _json(value: Any) -> JsonValue:
    result: JsonValue = loads(dumps(value))
    return result
