"""The answer of a model request as it streams in, and closing the stream once read."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from core.harness.messages import (
    AssistantMessage,
    StopReason,
    TextBlock,
    ThinkingBlock,
    ToolCall,
)
from core.harness.models import StreamEvent, TextDelta, ThinkingDelta, ToolCallDelta
from core.jsonvalue import scrub_text

__all__ = ["Partial", "close_stream"]


@dataclass
class Partial:
    """The response as streamed so far."""

    model: str
    text: str = ""
    thinking: str = ""
    calls: dict[int, dict[str, str]] = field(default_factory=dict)
    size: int = 0  # characters of text and thinking so far

    def add_text(self, text: str) -> int:
        """Append answer text (what most events of a response are); the new ``size``
        (what the stream's throttle is told with each delta)."""
        self.text += text if text.isascii() else scrub_text(text)
        self.size = size = self.size + len(text)
        return size

    def add(self, event: StreamEvent) -> None:
        # A provider may stream lone surrogates; they are replaced here, because the
        # partial is committed to ``live`` and storage refuses what it cannot serve back.
        if isinstance(event, TextDelta):
            self.text += scrub_text(event.text)
            self.size += len(event.text)
        elif isinstance(event, ThinkingDelta):
            self.thinking += scrub_text(event.text)
            self.size += len(event.text)
        elif isinstance(event, ToolCallDelta):
            call = self.calls.setdefault(event.index, {"id": "", "name": "", "arguments": ""})
            if event.id:
                call["id"] = scrub_text(event.id)
            if event.name:
                call["name"] = scrub_text(event.name)
            call["arguments"] += scrub_text(event.arguments)

    @property
    def empty(self) -> bool:
        return not (self.text or self.thinking or self.calls)

    def message(
        self, stop_reason: StopReason = "aborted", error: str | None = None
    ) -> AssistantMessage:
        blocks: list[TextBlock | ThinkingBlock | ToolCall] = []
        if self.thinking:
            blocks.append(ThinkingBlock(thinking=self.thinking))
        if self.text:
            blocks.append(TextBlock(text=self.text))
        for index in sorted(self.calls):
            call = self.calls[index]
            try:
                args = json.loads(call["arguments"] or "{}")
            except ValueError:
                args = {}
            if call["id"] and call["name"]:
                blocks.append(
                    ToolCall(
                        id=call["id"],
                        name=call["name"],
                        arguments=args if isinstance(args, dict) else {},
                    )
                )
        return AssistantMessage(
            content=blocks,
            stop_reason=stop_reason,
            model=self.model,
            error=error,
        )


async def close_stream(
    stream: AsyncIterator[StreamEvent], report: Callable[[BaseException], None]
) -> None:
    """Close the model's stream once read: reading stops at ``StreamDone``, and an async
    generator left suspended is finalized through the event loop instead (a wake-up of
    the loop and a task per generator, on every request)."""
    aclose = getattr(stream, "aclose", None)
    if aclose is None:
        return
    try:
        await aclose()
    except Exception as e:  # the response is in hand; a failing close is the adapter's bug
        report(e)
