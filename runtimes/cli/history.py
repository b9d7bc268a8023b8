"""``perdure ls`` and ``perdure log``: an actor host's listing and a conversation's whole
transcript, read over the actor HTTP API (so they work against any host).

The transcript is printed one entry per block: its time (ISO-8601 with the zone), its
role, its text; an assistant's tool calls as ``→ name {arguments}``, tool results as
``← name`` with their output, and entries of other kinds (compactions, resets, reports,
events) as ``[kind]`` with their data.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx

from core.times import iso_time as core_iso_time
from runtimes.actor.ids import check_actor_id

__all__ = [
    "HostClient",
    "HostUnavailable",
    "conversation_line",
    "format_entry",
    "iso_time",
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


class HostClient:
    """The listing routes of the host at ``url``, with its API ``token``; ``transport``
    (tests) carries the requests instead of the network."""

    def __init__(
        self,
        url: str,
        token: str,
        *,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self._client = httpx.Client(
            base_url=self.url,
            headers={"authorization": f"Bearer {token}"},
            timeout=timeout,
            transport=transport,
        )

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> HostClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        try:
            r = self._client.get(path, params=params)
        except httpx.HTTPError as error:
            raise HostUnavailable(f"cannot reach {self.url}: {error}") from error
        if r.status_code == 200:
            return r.json()
        try:
            refusal = r.json()["error"]
            message = f"{refusal['message']} ({r.status_code} {refusal['code']})"
        except (ValueError, KeyError, TypeError):
            message = f"{r.status_code}: {r.text[:200]}"
        if r.status_code == 401:
            message = f"the host refused the token ({message}); pass --token or PERDURE_TOKEN"
        raise HostUnavailable(message)

    def actors(self, *, page_size: int = _PAGE) -> Iterator[str]:
        """Every actor of the host, ascending, ``page_size`` at a time (each page
        continues after the last id of the one before: the same on every host)."""
        after: str | None = None
        while True:
            params: dict[str, Any] = {"limit": page_size}
            if after is not None:
                params["after"] = after
            page = self._get("/v1/actors", params)
            yield from (a["id"] for a in page["actors"])
            after = page["next_after"]
            if after is None:
                return

    def _pages(self, path: str, key: str, **params: Any) -> Iterator[dict[str, Any]]:
        cursor: str | None = None
        while True:
            query = {"limit": _PAGE, **params, **({"cursor": cursor} if cursor else {})}
            page = self._get(path, query)
            yield from page[key]
            cursor = page["next"]
            if cursor is None:
                return

    def conversations(self, actor: str) -> Iterator[dict[str, Any]]:
        check_actor_id(actor)
        return self._pages(f"/v1/actors/{actor}/conversations", "conversations")

    def entries(self, actor: str, conversation_id: int) -> Iterator[dict[str, Any]]:
        check_actor_id(actor)
        path = f"/v1/actors/{actor}/conversations/{conversation_id}/entries"
        return self._pages(path, "entries", order="asc")


def conversation_line(conversation: dict[str, Any]) -> str:
    parent, owner = conversation.get("parent"), conversation.get("owner")
    if parent:
        how = f"fork of {parent['conversation_id']} at entry {parent['at_entry']}"
    elif owner:
        how = f"sub-agent of task {owner['task_id']} (conversation {owner['conversation_id']})"
    else:
        how = "root"
    return f"{conversation['id']:>6}  {how}"


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
