"""Context derivation: the messages a model request is built from.

From the entries of a conversation's *active range* — from the newest head marker's
``head`` up to a cutoff — derive:

1. edits: per target entry, the newest in-range edit wins (``omit`` drops it,
   ``replace`` substitutes its messages);
2. assistant messages that stopped with ``aborted`` or ``error`` are left out (their raw
   entries stay in the transcript);
3. tool results are moved right after the assistant message that called them, in call
   order; a call without a result gets a synthesized error result, a result without a
   call is dropped (the model would reject it);
4. system entries keep their position (they record prompt changes), except that one
   preceded only by user messages moves to the front.

It also folds the system entries' recorded sections, which is what the model has been
told so far (the prompt planner diffs against it).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field

from core.harness.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolResultMessage,
    UserMessage,
    message_from_json,
)
from core.jsonvalue import JsonValue
from core.records import Entry

__all__ = ["ActiveRange", "ContextView", "derive_context"]

MISSING_RESULT = "Tool result unavailable: the call did not finish."


@dataclass
class ActiveRange:
    """The entries of one conversation's active range, oldest first, with their parsed
    messages. Kept per conversation by the harness and extended as entries commit."""

    head: int | None
    entries: list[Entry] = field(default_factory=list)
    messages: list[Message | None] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)

    def add(self, entry: Entry) -> None:
        position = bisect.bisect_right(self.ids, entry.id)
        self.ids.insert(position, entry.id)
        self.entries.insert(position, entry)
        self.messages.insert(position, _parse(entry.message))

    def upto(self, cutoff: int | None) -> tuple[list[Entry], list[Message | None]]:
        if cutoff is None:
            return self.entries, self.messages
        end = bisect.bisect_right(self.ids, cutoff)
        return self.entries[:end], self.messages[:end]


@dataclass(frozen=True)
class ContextView:
    head: int | None
    entries: list[Entry]
    messages: list[Message]
    sections: dict[str, str]


def _parse(message: JsonValue) -> Message | None:
    return None if message is None else message_from_json(message)


def derive_context(
    head: int | None, entries: list[Entry], messages: Iterable[Message | None]
) -> ContextView:
    parsed = list(messages)
    edits: dict[int, JsonValue] = {}
    for entry in entries:
        for edit in entry.edits or []:
            target = edit.get("target") if isinstance(edit, dict) else None
            if isinstance(target, int):
                edits[target] = edit  # later entries win
    sections: dict[str, str] = {}
    ordered: list[Message] = []
    for entry, message in zip(entries, parsed, strict=True):
        if entry.kind == "system" and isinstance(entry.data, dict):
            recorded = entry.data.get("sections")
            if isinstance(recorded, dict):
                if entry.data.get("baseline"):
                    sections = {}
                for key, text in recorded.items():
                    if isinstance(text, str):
                        sections[key] = text
                    else:
                        sections.pop(key, None)
        edit = edits.get(entry.id)
        if isinstance(edit, dict):
            if edit.get("action") == "omit":
                continue
            if edit.get("action") == "replace":
                replacements = edit.get("messages")
                for value in replacements if isinstance(replacements, list) else []:
                    ordered.append(message_from_json(value))
                continue
        if message is None:
            continue
        if isinstance(message, AssistantMessage) and message.stop_reason in ("aborted", "error"):
            continue
        ordered.append(message)
    return ContextView(head, entries, _pair_tool_results(_system_first(ordered)), sections)


def _system_first(messages: list[Message]) -> list[Message]:
    for i, m in enumerate(messages):
        if isinstance(m, SystemMessage):
            if i and all(isinstance(p, UserMessage) for p in messages[:i]):
                return [m, *messages[:i], *messages[i + 1 :]]
            return messages
        if not isinstance(m, UserMessage):
            return messages
    return messages


def _pair_tool_results(messages: list[Message]) -> list[Message]:
    results: dict[str, ToolResultMessage] = {}
    for m in messages:
        if isinstance(m, ToolResultMessage):
            results.setdefault(m.tool_call_id, m)
    out: list[Message] = []
    for m in messages:
        if isinstance(m, ToolResultMessage):
            continue  # placed after its call below, or dropped as an orphan
        out.append(m)
        if isinstance(m, AssistantMessage):
            for call in m.tool_calls:
                result = results.pop(call.id, None)
                out.append(
                    result
                    or ToolResultMessage(
                        tool_call_id=call.id,
                        tool_name=call.name,
                        content=MISSING_RESULT,
                        is_error=True,
                        details={"reason": "missing_result"},
                    )
                )
    return out
