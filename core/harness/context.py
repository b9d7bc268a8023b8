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
import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from core.harness.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
    message_from_json,
)
from core.jsonvalue import JsonValue
from core.readonly import readonly
from core.records import Entry

__all__ = ["ActiveRange", "ContextView", "RangeCache", "derive_context"]

MISSING_RESULT = "Tool result unavailable: the call did not finish."


@functools.cache
def _no_usage() -> Usage:
    # Built on first use, not at import: constructing the first ``Usage`` builds its
    # pydantic validator, which an opening host (recovery) does not otherwise need.
    return Usage()


@dataclass
class ActiveRange:
    """The entries of one conversation's active range, oldest first, with their parsed
    messages. Kept per conversation by the harness and extended as entries commit.

    Views of the whole range are derived *incrementally*: the range is folded entry by
    entry into the kept messages and tool results, and the prefix whose tool calls all
    have their results is flattened once and reused, so a long conversation costs each
    request only its newest entries. Edits or an entry committed out of id order switch
    to full derivation (:func:`derive_context`), which is the reference semantics.

    The answers a compaction kept (entries older than the head marker) lose their
    reported ``usage`` in their context messages: it measured a request over a context
    that no longer exists, and the token estimate (``compaction.context_tokens``) must
    not take it for the size of this one.
    """

    head: int | None
    entries: list[Entry] = field(default_factory=list)
    messages: list[Message | None] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)
    _folded: int = 0
    _order: list[Message] = field(default_factory=list)
    _results: dict[str, ToolResultMessage] = field(default_factory=dict)
    _synthesized: dict[str, ToolResultMessage] = field(default_factory=dict)
    """Missing-result stand-ins of calls still in the tail (each view needs them until
    the result commits; built once, not once per view)."""
    _sections: dict[str, str] = field(default_factory=dict)
    _flat: list[Message] = field(default_factory=list)
    _stable: int = 0
    _full_only: bool = False
    _prompted: bool = False
    _latest: ContextView | None = None
    """The view of the whole range, until an entry is added (views are read-only)."""

    def add(self, entry: Entry, built: Message | None = None) -> None:
        """Add a committed entry; ``built`` is its message as the harness built it (the
        object whose JSON the entry holds), taken instead of parsing that JSON again."""
        position = bisect.bisect_right(self.ids, entry.id)
        self.ids.insert(position, entry.id)
        self.entries.insert(position, entry)
        self._latest = None
        message = built if built is not None else _parse(entry.message)
        if (
            self.head is not None
            and entry.id < self.head
            and isinstance(message, AssistantMessage)
            and message.usage != _no_usage()
        ):
            message = message.model_copy(update={"usage": _no_usage()})
        self.messages.insert(position, message)
        if position < len(self.ids) - 1:
            self._full_only = True  # an entry committed out of id order: no shortcuts

    def rebased(self, marker: Entry, built: Message | None = None) -> ActiveRange | None:
        """The range that ``marker``, a head marker just committed, opens, built from
        this range's entries from ``marker.head`` on and their parsed messages: what a
        reload would read back from storage, without reading and parsing it again.
        ``None`` when this range may not hold all of them (the marker is not newer than
        this range's head, or its start is older than this range's entries): reload."""
        start = marker.head
        if start is None or (self.head is not None and marker.id <= self.head):
            return None
        at = bisect.bisect_left(self.ids, start)
        if start != marker.id and (at == len(self.ids) or self.ids[at] != start):
            return None
        pairs = list(zip(self.entries[at:], self.messages[at:], strict=True))
        bisect.insort(pairs, (marker, built), key=lambda pair: pair[0].id)
        rebased = ActiveRange(head=marker.id)
        for entry, message in pairs:
            rebased.add(entry, message)
        return rebased

    def message_of(self, entry_id: int) -> Message | None:
        """The parsed message of entry ``entry_id`` if the range holds it."""
        position = bisect.bisect_left(self.ids, entry_id)
        if position < len(self.ids) and self.ids[position] == entry_id:
            return self.messages[position]
        return None

    def view(self, cutoff: int | None) -> ContextView:
        end = len(self.ids) if cutoff is None else bisect.bisect_right(self.ids, cutoff)
        if end == len(self.ids) and self._latest is not None:
            return self._latest
        if end == len(self.ids) and not self._full_only:
            self._fold()
        if end < len(self.ids) or self._full_only:
            return derive_context(self.head, self.entries[:end], self.messages[:end])
        tail: list[Message] = []
        for m in self._order[self._stable :]:
            tail.append(m)
            if isinstance(m, AssistantMessage):
                tail.extend(self._result_for(c) for c in m.content if isinstance(c, ToolCall))
        self._latest = ContextView(
            self.head,
            self.entries,
            _system_first(self._flat + tail),
            dict(self._sections),
            self._prompted,
            self.messages,
        )
        return self._latest

    def _fold(self) -> None:
        for entry, message in zip(
            self.entries[self._folded :], self.messages[self._folded :], strict=True
        ):
            if entry.edits:
                self._full_only = True
                return
            _fold_sections(self._sections, entry)
            self._prompted = self._prompted or entry.kind == "system"
            self._folded += 1
            if message is None or _excluded(message):
                continue
            if isinstance(message, ToolResultMessage):
                self._results.setdefault(message.tool_call_id, message)
                self._synthesized.pop(message.tool_call_id, None)
            elif entry.id == self.head:
                # The head marker (a summary, a reset) opens the context it starts. A
                # summary follows the entries it kept (their ids are older), which may
                # already be flattened: a marker without tool calls joins them in front.
                if isinstance(message, AssistantMessage) and message.tool_calls:
                    self._full_only = True
                    return
                self._order.insert(0, message)
                if self._stable:
                    self._flat.insert(0, message)
                    self._stable += 1
            else:
                self._order.append(message)
        while self._stable < len(self._order):
            m = self._order[self._stable]
            calls = (
                [c for c in m.content if isinstance(c, ToolCall)]
                if isinstance(m, AssistantMessage)
                else []
            )
            if any(c.id not in self._results for c in calls):
                break  # results still to come: this part stays in the recomputed tail
            self._flat.append(m)
            self._flat.extend(self._results[c.id] for c in calls)
            self._stable += 1

    def _result_for(self, call: ToolCall) -> ToolResultMessage:
        found = self._results.get(call.id)
        if found is not None:
            return found
        stand_in = self._synthesized.get(call.id)
        if stand_in is None or stand_in.tool_name != call.name:
            stand_in = self._synthesized[call.id] = _missing(call)
        return stand_in


@readonly(slots=False)
class ContextView:
    """A derived context. Read-only: the range hands the same view to every caller
    until an entry is added."""

    head: int | None
    entries: list[Entry]
    messages: list[Message]
    sections: dict[str, str]
    prompted: bool = False
    """Whether the range holds a ``system`` entry (a prompt was recorded in it)."""
    parsed: Sequence[Message | None] | None = None
    """Each entry's parsed message, aligned with ``entries`` (``None`` where an entry
    has none), when the view was derived from them: a compaction choosing its cut and
    serializing what it summarizes takes them instead of parsing every entry again."""


def _parse(message: JsonValue) -> Message | None:
    return None if message is None else message_from_json(message)


def derive_context(
    head: int | None, entries: list[Entry], messages: Iterable[Message | None]
) -> ContextView:
    parsed = list(messages)
    edits: dict[int, JsonValue] = {}
    for entry in entries:
        if not entry.edits:
            continue
        for edit in entry.edits:
            target = edit.get("target") if isinstance(edit, dict) else None
            if isinstance(target, int):
                edits[target] = edit  # later entries win
    sections: dict[str, str] = {}
    ordered: list[Message] = []
    marker: list[Message] = []
    for entry, message in zip(entries, parsed, strict=True):
        _fold_sections(sections, entry)
        edit = edits.get(entry.id) if edits else None
        if isinstance(edit, dict):
            if edit.get("action") == "omit":
                continue
            if edit.get("action") == "replace":
                replacements = edit.get("messages")
                for value in replacements if isinstance(replacements, list) else []:
                    ordered.append(message_from_json(value))
                continue
        if message is None or _excluded(message):
            continue
        if entry.id == head and not isinstance(message, ToolResultMessage):
            marker.append(message)  # the head marker opens the context it starts
            continue
        ordered.append(message)
    return ContextView(
        head,
        entries,
        _system_first(_pair_tool_results(marker + ordered)),
        sections,
        any(e.kind == "system" for e in entries),
        parsed,
    )


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
    if not results and not any(isinstance(m, AssistantMessage) for m in messages):
        return messages
    out: list[Message] = []
    append = out.append
    for m in messages:
        if isinstance(m, ToolResultMessage):
            continue  # placed after its call below, or dropped as an orphan
        append(m)
        if not isinstance(m, AssistantMessage):
            continue
        for block in m.content:
            if not isinstance(block, ToolCall):
                continue
            append(results.get(block.id) or _missing(block))
    return out


def _excluded(message: Message) -> bool:
    """Aborted and failed answers stay in the transcript but not in the context."""
    return isinstance(message, AssistantMessage) and message.stop_reason in ("aborted", "error")


def _missing(call: ToolCall) -> ToolResultMessage:
    return ToolResultMessage(
        tool_call_id=call.id,
        tool_name=call.name,
        content=MISSING_RESULT,
        is_error=True,
        details={"reason": "missing_result"},
    )


def _fold_sections(sections: dict[str, str], entry: Entry) -> None:
    """Apply a system entry's recorded sections (a baseline replaces them all)."""
    if entry.kind != "system" or not isinstance(entry.data, dict):
        return
    recorded = entry.data.get("sections")
    if not isinstance(recorded, dict):
        return
    if entry.data.get("baseline"):
        sections.clear()
    for key, text in recorded.items():
        if isinstance(text, str):
            sections[key] = text
        else:
            sections.pop(key, None)


class RangeCache:
    """The active ranges a harness keeps in memory, by conversation id.

    A range only caches committed entries and reloads from storage on its next use, so
    dropping one is always safe; what it costs is that reload. Without a bound a
    long-lived host keeps the parsed transcript of every conversation it ever served
    (about 85 KB each in the concurrency benchmark) and the garbage collector walks all
    of it. So beyond ``limit`` ranges, a conversation's range is dropped when one of its
    submissions settles: then it is most likely idle, and the reload comes with its next
    submission, not in the middle of a run (dropping the least recently used instead
    reloads every range on every round once more than ``limit`` conversations run
    round-robin). The ranges of running conversations, the working set, are all kept.
    """

    def __init__(self, limit: int = 256) -> None:
        self.limit = limit
        self._ranges: dict[int, ActiveRange] = {}

    def __len__(self) -> int:
        return len(self._ranges)

    def get(self, conversation_id: int) -> ActiveRange | None:
        """The kept range, if any."""
        return self._ranges.get(conversation_id)

    def keep(self, conversation_id: int, active: ActiveRange) -> None:
        self._ranges[conversation_id] = active

    def settled(self, conversation_id: int) -> None:
        """A submission of the conversation settled: drop its range if over the limit."""
        if len(self._ranges) > self.limit:
            self._ranges.pop(conversation_id, None)

    def rebase(self, conversation_id: int, active: ActiveRange | None) -> None:
        """Keep ``active`` as the conversation's new range, or drop it if ``None``."""
        if active is None:
            self._ranges.pop(conversation_id, None)
        else:
            self._ranges[conversation_id] = active

    def drop(self, conversation_id: int) -> None:
        """Forget the range (it reloads on its next use)."""
        self._ranges.pop(conversation_id, None)
