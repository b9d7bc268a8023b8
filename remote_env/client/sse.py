"""A small parser for ``text/event-stream`` (the subset the sandbox server sends)."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass

__all__ = ["SseEvent", "parse_sse"]


@dataclass(frozen=True, slots=True)
class SseEvent:
    """One dispatched event."""

    event: str
    data: str
    id: str | None


async def parse_sse(lines: AsyncIterable[str]) -> AsyncIterator[SseEvent]:
    """Turn the lines of an event stream into events (comments and retry hints ignored)."""
    event, last_id = "message", None
    data: list[str] = []
    async for raw in lines:
        line = raw.rstrip("\r")
        if not line:
            if data:
                yield SseEvent(event=event, data="\n".join(data), id=last_id)
            event, data = "message", []
            continue
        if line.startswith(":"):
            continue  # keep-alive comment
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "event":
            event = value
        elif name == "data":
            data.append(value)
        elif name == "id" and "\x00" not in value:
            last_id = value
    if data:
        yield SseEvent(event=event, data="\n".join(data), id=last_id)
