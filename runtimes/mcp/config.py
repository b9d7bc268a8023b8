"""What an operator configures for one MCP server, and the rules derived from it: the
names the model sees, the replay policy of each tool, the headers with their secrets.

Servers are configured by the host (``ActorConfig.extensions``), never by an API client:
a server's URL receives the headers, and the headers carry the host's secrets.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

from core.harness import ReplayPolicy
from core.jsonvalue import JsonValue

__all__ = [
    "SEPARATOR",
    "McpProblem",
    "McpServer",
    "ProblemKind",
    "SecretLookup",
    "content_text",
    "model_name",
    "replay_from_annotations",
    "resolve_headers",
    "servers_from_json",
]

SEPARATOR = "__"
"""Between the server's name and the tool's in the name the model sees: ``trains__search``
for the tool ``search`` of the server ``trains``. Not ``trains.search``: OpenAI's and
Anthropic's APIs accept tool names matching ``^[a-zA-Z0-9_-]{1,64}$`` only."""

_SERVER_NAME = re.compile(r"^[A-Za-z0-9-]{1,24}$")  # no "_": the first "__" splits the name
_MODEL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_PLACEHOLDER = re.compile(r"\$\{([^${}\s]+)\}")  # a secret's name: an ARN, a/path, NAME

SecretLookup = Callable[[str], "str | None"]
"""``lookup(name)``: the host secret ``name`` (an environment variable locally, a Worker
secret on Cloudflare, a Secrets Manager value on AWS), ``None`` when it is not set."""

ApprovalRule = Literal["never", "always"] | Callable[[Any], bool]
"""As ``define_tool(approval=)``: never, always, or a predicate over the arguments."""

ProblemKind = Literal["unreachable", "timeout", "protocol", "refused", "configuration"]


class McpProblem(Exception):
    """A call or listing that did not get an answer from the server: ``kind`` says why.
    The message names the server and the problem, never a secret."""

    def __init__(self, kind: ProblemKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class McpServer:
    """One MCP server over the streamable HTTP transport.

    ``name`` prefixes its tools' names (``[A-Za-z0-9-]{1,24}``); ``url`` is its endpoint.
    ``headers`` are sent with every request; ``${NAME}`` in a value is replaced by the
    host secret ``NAME`` when connecting (``{"Authorization": "Bearer ${GITHUB_TOKEN}"}``).
    ``tools``: the server's tool names the agent may use (``None``: all it lists).
    ``replay``: a replay policy per tool name that overrides the server's annotations.
    ``approval``: per tool name, whether a call waits for a person's decision before it
    runs (``always``, ``never``, or a predicate over the arguments, as
    ``define_tool(approval=)``); ``approval_expires_s`` denies an undecided one after
    that many seconds (see ``core/harness/approvals.py``). ``timeout_s`` bounds each
    call and each listing; ``ttl_s`` is how long a listing is used before the next model
    request lists again. ``elicitation`` and ``sampling``: the SDK's callbacks for a
    server that asks the client something (honoured by the SDK connector; the httpx
    connector has no SDK types and refuses); unset, such a request is refused with an
    error saying so.
    """

    name: str
    url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    tools: Sequence[str] | None = None
    replay: Mapping[str, ReplayPolicy] = field(default_factory=dict)
    approval: Mapping[str, ApprovalRule] = field(default_factory=dict)
    approval_expires_s: float | None = None
    timeout_s: float = 30.0
    ttl_s: float = 3600.0
    elicitation: Any = None
    sampling: Any = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _SERVER_NAME.match(self.name):
            raise ValueError(
                f"an MCP server name matches {_SERVER_NAME.pattern} (it prefixes tool names), "
                f"got {self.name!r}"
            )
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"MCP server {self.name!r}: url must be http(s), got {self.url!r}")
        for tool, policy in self.replay.items():
            if policy not in ("safe", "unsafe", "recoverable"):
                raise ValueError(
                    f"MCP server {self.name!r}: replay of {tool!r} must be safe or unsafe, "
                    f"got {policy!r}"
                )
            if policy == "recoverable":
                # An MCP server keeps no op log the harness could ask after a crash.
                raise ValueError(
                    f"MCP server {self.name!r}: replay of {tool!r} cannot be recoverable"
                )
        if not self.timeout_s > 0 or not self.ttl_s >= 0:
            raise ValueError(f"MCP server {self.name!r}: timeout_s > 0 and ttl_s >= 0")


def model_name(server: str, tool: str) -> str | None:
    """The name the model sees for ``tool`` of ``server``; ``None`` when no valid name
    can carry it (too long, or characters model APIs refuse, such as ``.``)."""
    name = f"{server}{SEPARATOR}{tool}"
    return name if _MODEL_NAME.match(name) else None


def replay_from_annotations(annotations: JsonValue) -> ReplayPolicy:
    """``readOnlyHint: true`` → safe (nothing changed, run it again); ``idempotentHint:
    true`` → safe (the same arguments again change nothing more); anything else unsafe:
    after a crash the model is told the call was interrupted."""
    if not isinstance(annotations, dict):
        return "unsafe"
    if annotations.get("readOnlyHint") is True or annotations.get("idempotentHint") is True:
        return "safe"
    return "unsafe"


def resolve_headers(server: McpServer, secrets: SecretLookup) -> dict[str, str]:
    """The headers with their ``${NAME}`` placeholders filled from ``secrets``.

    Raises:
        McpProblem: ``configuration``, naming the missing secret (never a value).
    """
    resolved: dict[str, str] = {}
    for header, template in server.headers.items():
        for wanted in _PLACEHOLDER.findall(template):
            if secrets(wanted) is None:
                raise McpProblem(
                    "configuration",
                    f"MCP server {server.name}: the secret {wanted} for header {header} "
                    "is not set on this host",
                )
        resolved[header] = _PLACEHOLDER.sub(lambda m: secrets(m.group(1)) or "", template)
    return resolved


def content_text(blocks: list[JsonValue], structured: JsonValue = None) -> str:
    """The text the model reads of a tool result's content blocks (wire JSON): text as
    it is, other blocks named with their type and size (their bytes are not for a text
    model); the structured content when there is no block."""
    parts: list[str] = []
    for block in blocks:
        item: dict[str, Any] = block if isinstance(block, dict) else {}
        kind = item.get("type")
        if kind == "text":
            parts.append(str(item.get("text", "")))
        elif kind in ("image", "audio"):
            data = item.get("data") or ""
            parts.append(f"[{kind} {item.get('mimeType', '')}, {len(data) * 3 // 4} bytes]")
        elif kind == "resource_link":
            parts.append(f"[resource {item.get('uri', '')} {item.get('name', '')}]".strip())
        elif kind == "resource":
            resource = item.get("resource") or {}
            text = resource.get("text")
            parts.append(text if isinstance(text, str) else f"[resource {resource.get('uri', '')}]")
        else:
            parts.append(f"[{kind} content]")
    if not parts and structured is not None:
        parts.append(json.dumps(structured, ensure_ascii=False))
    return "\n".join(parts)


_FIELDS = frozenset({"name", "url", "headers", "tools", "replay", "approval", "timeout_s", "ttl_s"})


def servers_from_json(text: str) -> list[McpServer]:
    """Servers from a JSON configuration: ``{"servers": [{"name", "url", "headers"?,
    "tools"?, "replay"?, "approval"?, "timeout_s"?, "ttl_s"?}]}``, ``approval`` mapping
    tool names to ``always`` or ``never``. Header values name host secrets as
    ``${NAME}``, never hold them.

    Raises:
        ValueError: what is wrong, naming the server and the field.
    """
    try:
        value = json.loads(text)
    except ValueError as error:
        raise ValueError(f"not JSON: {error}") from None
    items = value.get("servers") if isinstance(value, dict) else None
    if not isinstance(items, list):
        raise ValueError('expected {"servers": [...]}')
    servers: list[McpServer] = []
    for index, item in enumerate(items):
        where = f"servers[{index}]"
        if not isinstance(item, dict):
            raise ValueError(f"{where}: expected an object")
        unknown = sorted(set(item) - _FIELDS)
        if unknown:
            raise ValueError(f"{where}: unknown field(s) {unknown}")
        for key in ("headers", "replay", "approval"):
            mapping = item.get(key, {})
            if not isinstance(mapping, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in mapping.items()
            ):
                raise ValueError(f"{where}: {key} maps names to strings")
        for tool, rule in item.get("approval", {}).items():
            if rule not in ("always", "never"):
                raise ValueError(f"{where}: approval of {tool!r} is always or never")
        tools = item.get("tools")
        if tools is not None and (
            not isinstance(tools, list) or not all(isinstance(t, str) for t in tools)
        ):
            raise ValueError(f"{where}: tools is a list of the server's tool names")
        for key in ("timeout_s", "ttl_s"):
            if key in item and (
                isinstance(item[key], bool) or not isinstance(item[key], int | float)
            ):
                raise ValueError(f"{where}: {key} is a number of seconds")
        if not isinstance(item.get("name"), str) or not isinstance(item.get("url"), str):
            raise ValueError(f"{where}: name and url are strings")
        servers.append(McpServer(**item))  # checks the name, URL, policies and numbers
    names = [s.name for s in servers]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"server name(s) {dupes} configured twice")
    return servers
