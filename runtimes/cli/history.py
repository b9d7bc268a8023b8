"""``perdure ls`` and ``perdure log``: an actor host's listing and a conversation's whole
transcript, read over the actor HTTP API with the typed client (so they work against
any host).

The transcript is printed one entry per block: its time (ISO-8601 with the zone), its
role, its text; an assistant's tool calls as ``→ name {arguments}``, tool results as
``← name`` with their output, and entries of other kinds (compactions, resets, reports,
events) as ``[kind]`` with their data.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from core.times import iso_time as core_iso_time
from runtimes.client import ActorClient, ClientError, ConversationSummary, RequestRefused

__all__ = [
    "HostUnavailable",
    "conversation_line",
    "format_entry",
    "iso_time",
    "print_lines",
]

_PAGE = 500


class HostUnavailable(Exception):
    """The host could not answer (the message says why, in one line)."""


def iso_time(ms: object) -> str:
    """Epoch milliseconds as ISO-8601 with the zone (:func:`core.times.iso_time`), ``-``
    for a missing time."""
    if not isinstance(ms, int) or isinstance(ms, bool):
        return "-"
    return core_iso_time(ms)


def print_lines(
    url: str,
    token: str,
    lines: Callable[[ActorClient], AsyncIterator[str]],
    echo: Callable[[str], object],
) -> None:
    """Print the ``lines`` a listing of the host at ``url`` yields, page by page as they
    arrive (:mod:`runtimes.client`); a failure is :class:`HostUnavailable`, in one line."""

    async def run() -> None:
        async with ActorClient(url, token, page_size=_PAGE) as client:
            async for line in lines(client):
                echo(line)

    try:
        asyncio.run(run())
    except ClientError as error:
        message = str(error)
        if isinstance(error, RequestRefused) and error.status == 401:
            message = f"the host refused the token ({message}); pass --token or PERDURE_TOKEN"
        raise HostUnavailable(message) from error


def conversation_line(conversation: ConversationSummary) -> str:
    parent, owner = conversation.parent, conversation.owner
    if parent:
        how = f"fork of {parent['conversation_id']} at entry {parent['at_entry']}"
    elif owner:
        how = f"sub-agent of task {owner['task_id']} (conversation {owner['conversation_id']})"
    else:
        how = "root"
    return f"{conversation.id:>6}  {how}"


def _indent(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line for line in text.splitlines() or [""])


def format_entry(entry: dict[str, Any]) -> str:
    """One transcript entry for a person (see the module docstring)."""
    head = f"{iso_time(entry.get('created_at'))}  #{entry.get('id')}"
    message = entry.get("message") if isinstance(entry.get("message"), dict) else None
    kind = str(entry.get("kind"))
    if message is None or kind not in ("user", "assistant", "tool_result"):
        body = json.dumps(entry.get("data"), ensure_ascii=False) if entry.get("data") else ""
        text = _text(message) if message is not None else ""
        return f"{head}  [{kind}] {text or body}".rstrip()
    role = str(message.get("role"))
    if role == "tool_result":
        mark = " (error)" if message.get("is_error") else ""
        return f"{head}  ← {message.get('tool_name')}{mark}\n{_indent(str(message.get('content')))}"
    lines = [f"{head}  {role}"]
    text = _text(message)
    if text:
        lines.append(_indent(text))
    for block in message.get("content") or []:
        if isinstance(block, dict) and block.get("type") == "tool_call":
            args = json.dumps(block.get("arguments") or {}, ensure_ascii=False)
            lines.append(f"    → {block.get('name')} {args}")
    if role == "assistant":
        usage = message.get("usage") or {}
        stop = message.get("stop_reason")
        note = f" · {stop}" if stop not in (None, "stop", "tool_use") else ""
        error = f": {message['error']}" if message.get("error") else ""
        lines.append(
            f"    ({usage.get('input', 0)} in · {usage.get('output', 0)} out · "
            f"${float(usage.get('cost') or 0):.6f}{note}{error})"
        )
    return "\n".join(lines)


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [b for b in content if isinstance(b, dict) and b.get("type") == "text"]
        return "".join(str(b.get("text", "")) for b in texts)
    return ""
