"""The :class:`~runtimes.mcp.source.McpConnector` over httpx alone: MCP's streamable HTTP
transport written out, for where the ``mcp`` SDK does not import (a Python Worker:
measured under Pyodide 314, ``mcp.client`` needs ``cryptography`` and, through
``jsonschema``, ``rpds``, neither of which has a Pyodide wheel on PyPI, and ``httpx2``
wants a fetch companion package; see docs/hosts.md). In a Worker its transport is
:class:`runtimes.cloudflare.fetch_transport.FetchTransport`; on CPython httpx's own.

What it speaks (the streamable HTTP transport, protocol 2025-11-25 and the versions a
server may answer with): ``initialize`` then ``notifications/initialized``, carrying the
``Mcp-Session-Id`` and ``MCP-Protocol-Version`` headers afterwards; ``tools/list``
through every page; ``tools/call``; each answer as ``application/json`` or as a
``text/event-stream`` whose events may carry notifications (``tools/list_changed`` is
noted) and requests from the server before the response — ``elicitation/create``,
``sampling/createMessage``, ``roots/list`` are answered with a JSON-RPC error that says
they are not configured, ``ping`` with an empty result; then ``DELETE`` of the session.
One session per listing or call, under one deadline (``server.timeout_s``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from collections.abc import AsyncIterator, Callable, Mapping

import httpx

from core.jsonvalue import JsonObject, JsonValue
from runtimes.mcp.config import McpProblem, McpServer, content_text
from runtimes.mcp.source import CallOutcome

__all__ = ["PROTOCOL_VERSION", "HttpConnector"]

PROTOCOL_VERSION = "2025-11-25"
_SUPPORTED = frozenset({"2025-11-25", "2025-06-18", "2025-03-26"})
_LIST_PAGES = 100
_INVALID_REQUEST = -32600
_METHOD_NOT_FOUND = -32601


class HttpConnector:
    """MCP over httpx. ``make_transport`` makes each session's httpx transport (the
    client closes it); default: httpx's own (CPython)."""

    def __init__(self, make_transport: Callable[[], httpx.AsyncBaseTransport] | None = None):
        self._make_transport = make_transport

    async def list_tools(self, server: McpServer, headers: Mapping[str, str]) -> list[JsonObject]:
        async with self._session(server, headers, "listing its tools") as session:
            tools: list[JsonObject] = []
            cursor: JsonValue = None
            for _page in range(_LIST_PAGES):
                params: JsonObject = {"cursor": cursor} if isinstance(cursor, str) else {}
                result = await session.request("tools/list", params)
                for tool in _list(result.get("tools")):
                    if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
                        continue
                    tools.append(
                        {
                            "name": tool["name"],
                            "description": tool.get("description") or "",
                            "input_schema": tool.get("inputSchema") or {"type": "object"},
                            "annotations": tool.get("annotations") or {},
                        }
                    )
                cursor = result.get("nextCursor")
                if not isinstance(cursor, str) or not cursor:
                    break
            return tools

    async def call_tool(
        self, server: McpServer, headers: Mapping[str, str], name: str, arguments: JsonObject
    ) -> CallOutcome:
        async with self._session(server, headers, f"calling {name}") as session:
            result = await session.request("tools/call", {"name": name, "arguments": arguments})
            await asyncio.sleep(0)  # a notification the GET stream already holds is read
            structured = result.get("structuredContent")
            return CallOutcome(
                text=content_text(_list(result.get("content")), structured),
                is_error=result.get("isError") is True,
                structured=structured,
                list_changed=session.list_changed,
            )

    @contextlib.asynccontextmanager
    async def _session(
        self, server: McpServer, headers: Mapping[str, str], doing: str
    ) -> AsyncIterator[_Session]:
        where = f"MCP server {server.name} ({server.url})"
        transport = self._make_transport() if self._make_transport is not None else None
        client = httpx.AsyncClient(
            transport=transport, headers=dict(headers), timeout=server.timeout_s
        )
        session = _Session(client, server, where, doing)
        try:
            async with asyncio.timeout(server.timeout_s):
                await session.initialize()
                yield session
        except TimeoutError:
            maybe = (
                "; the call may still have run on the server" if doing.startswith("call") else ""
            )
            raise McpProblem(
                "timeout",
                f"{where} did not answer within {server.timeout_s:g} s while {doing}{maybe}",
            ) from None
        except httpx.TimeoutException:
            raise McpProblem("timeout", f"{where} did not answer in time while {doing}") from None
        except httpx.TransportError as error:
            raise McpProblem("unreachable", f"{where} cannot be reached: {error}") from None
        finally:
            with contextlib.suppress(Exception):
                await session.close()
            await client.aclose()


class _Session:
    """One MCP session: JSON-RPC requests over POST, answers as JSON or SSE."""

    def __init__(self, client: httpx.AsyncClient, server: McpServer, where: str, doing: str):
        self.client = client
        self.server = server
        self.where = where
        self.doing = doing
        self.session_id: str | None = None
        self.version: str | None = None
        self.list_changed = False
        self._ids = itertools.count(1)
        self._listening: asyncio.Task[None] | None = None

    async def initialize(self) -> None:
        result = await self.request(
            "initialize",
            {
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "perdure", "version": "1"},
            },
        )
        version = result.get("protocolVersion")
        if not isinstance(version, str) or version not in _SUPPORTED:
            raise self._protocol(f"it offers protocol version {version!r}, not one of ours")
        self.version = version
        await self._post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        await self._listen()

    async def _listen(self) -> None:
        """Open the session's GET stream, where a server sends what is not part of an
        answer (``tools/list_changed`` among them), and read it in the background until
        the session closes. A server without one answers 405: nothing to read."""
        opened: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        async def listen() -> None:
            headers = {**self._headers(), "Accept": "text/event-stream"}
            try:
                async with self.client.stream("GET", self.server.url, headers=headers) as response:
                    if not opened.done():
                        opened.set_result(None)
                    if response.status_code != 200:
                        return
                    async for event in _events(response):
                        message = _parsed(event)
                        if message is not None:
                            await self._incoming(message)
            except Exception:  # the stream is a courtesy: a call never fails for it
                pass
            finally:
                if not opened.done():
                    opened.set_result(None)

        self._listening = asyncio.create_task(listen())
        await opened

    async def request(self, method: str, params: JsonObject) -> JsonObject:
        ident = next(self._ids)
        message: JsonObject = {"jsonrpc": "2.0", "id": ident, "method": method, "params": params}
        async with self._stream(message) as response:
            if method == "initialize":
                self.session_id = response.headers.get("mcp-session-id")
            kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
            if kind == "application/json":
                answer = _parsed(await response.aread())
                if answer is None:
                    raise self._protocol("its answer is not JSON")
                return self._result(answer, ident)
            if kind == "text/event-stream":
                async for event in _events(response):
                    answer = _parsed(event)
                    if answer is None:
                        raise self._protocol("an event of its stream is not JSON")
                    if answer.get("id") == ident and "method" not in answer:
                        return self._result(answer, ident)
                    await self._incoming(answer)
                raise self._protocol(f"its stream ended without answering {method}")
            raise self._protocol(f"it answered with Content-Type {kind or 'none'!r}")

    async def close(self) -> None:
        if self._listening is not None:
            await asyncio.sleep(0)  # let a notification already received be read
            self._listening.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listening
        if self.session_id is not None:
            await self.client.delete(self.server.url, headers=self._headers())

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json, text/event-stream"}
        if self.session_id is not None:
            headers["Mcp-Session-Id"] = self.session_id
        if self.version is not None:
            headers["MCP-Protocol-Version"] = self.version
        return headers

    @contextlib.asynccontextmanager
    async def _stream(self, message: JsonObject) -> AsyncIterator[httpx.Response]:
        request = self.client.build_request(
            "POST", self.server.url, headers=self._headers(), json=message
        )
        response = await self.client.send(request, stream=True)
        try:
            if response.status_code >= 400:
                await response.aread()
                hint = ""
                if response.status_code in (401, 403):
                    hint = " (check the server's headers and the host secrets they name)"
                elif response.status_code == 404:
                    hint = " (check the server's URL)"
                raise McpProblem(
                    "refused",
                    f"{self.where} answered HTTP {response.status_code} while {self.doing}{hint}",
                )
            yield response
        finally:
            await response.aclose()

    async def _post(self, message: JsonObject) -> None:
        async with self._stream(message):
            pass  # a notification or a response: 202 Accepted, nothing to read

    async def _incoming(self, message: JsonObject) -> None:
        """A notification or a request from the server, before our answer."""
        method = message.get("method")
        if method == "notifications/tools/list_changed":
            self.list_changed = True
        if "id" not in message or not isinstance(method, str):
            return  # a notification (progress, a log message): nothing to answer
        reply: JsonObject = {"jsonrpc": "2.0", "id": message["id"]}
        if method == "ping":
            reply["result"] = {}
        elif method in ("elicitation/create", "sampling/createMessage", "roots/list"):
            what = method.split("/")[0]
            reply["error"] = {
                "code": _INVALID_REQUEST,
                "message": f"the client refuses {what} requests: {what} is not configured "
                f"for MCP server {self.server.name} on this perdure host",
            }
        else:
            reply["error"] = {"code": _METHOD_NOT_FOUND, "message": f"unknown method {method}"}
        await self._post(reply)

    def _result(self, answer: JsonObject, ident: int) -> JsonObject:
        if answer.get("id") != ident:
            raise self._protocol("it answered another request")
        error = answer.get("error")
        if isinstance(error, dict):
            message = str(error.get("message", "")).strip().splitlines()[:1]
            raise McpProblem(
                "protocol",
                f"{self.where} answered with an error while {self.doing}: "
                f"{message[0] if message else error.get('code')}",
            )
        result = answer.get("result")
        if not isinstance(result, dict):
            raise self._protocol("its answer has no result")
        return result

    def _protocol(self, what: str) -> McpProblem:
        return McpProblem("protocol", f"{self.where} did not speak MCP while {self.doing}: {what}")


async def _events(response: httpx.Response) -> AsyncIterator[str]:
    """The ``data`` of each server-sent event (multi-line data joined by newlines)."""
    data: list[str] = []
    async for line in response.aiter_lines():
        if not line:
            if data:
                yield "\n".join(data)
                data = []
            continue
        if line.startswith("data:"):
            value = line[5:]
            data.append(value[1:] if value.startswith(" ") else value)
    if data:
        yield "\n".join(data)


def _parsed(text: str | bytes) -> JsonObject | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _list(value: JsonValue) -> list[JsonValue]:
    return value if isinstance(value, list) else []
