"""Views and watches: committed state for UIs, first whole, then one delta per commit.

A *view* is plain JSON built from committed state only. A *watch* delivers the view as
its first frame and then one frame per commit that changed the view, as JSON ops
(:mod:`core.docops`): ``{"type": "view", "value": ...}`` first, then
``{"type": "delta", "seq": n, "ops": [...]}``. Text that grew (a streaming answer's
partial) arrives as ``["a", path, new_text]``, the new text only. Frames are queued per
watcher; a watcher that falls 100 frames behind gets the pending frames folded into one
``{"type": "replace", "seq": n, "value": <the newest view>}`` — watches converge, they are
not audit logs. A late joiner gets the current view, never a replay. A watch ends
(``reason``: ``stopped``, ``closed``, ``retired``) by finishing its iteration.

One *mount* per watched object keeps the current value, updated on the session line
from commit events (no storage reads), and fans frames out to its watchers.

Frames are queued on the line, but waiting consumers are *woken* off it, at most once per
``wake_interval_ms`` of the harness clock per mount (the first frame after a quiet spell
wakes them at once): a busy conversation commits every few hundred microseconds, and
waking a hundred consumers per commit would cost more than the commits. No frame is
merged or dropped by this — a woken consumer takes every frame queued so far.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Literal, TypeAlias

from core.clock import Clock
from core.docops import apply_ops
from core.harness.builtin_documents import LIVE
from core.harness.task_graph import task_node
from core.harness.usage_ledger import view_ops
from core.jsonvalue import JsonObject, JsonValue, json_copy
from core.records import Terminal
from core.session.session import CommitEvent, DocumentEvent

__all__ = [
    "MAX_PENDING_FRAMES",
    "ConversationMount",
    "DocumentMount",
    "Frame",
    "Mount",
    "TaskGraphMount",
    "Watch",
    "document_name",
]

MAX_PENDING_FRAMES = 100
Frame: TypeAlias = JsonObject
EndReason = Literal["stopped", "closed", "retired"]


class Watch:
    """An async iterator of frames. ``stop()`` ends it; ``reason`` says why it ended."""

    def __init__(self, mount: Mount, first: Frame) -> None:
        self._mount = mount
        self._frames: deque[Frame] = deque([first])
        self._waiter: asyncio.Future[None] | None = None
        self.reason: EndReason | None = None

    def __aiter__(self) -> Watch:
        return self

    async def __anext__(self) -> Frame:
        while not self._frames:
            if self.reason is not None:
                raise StopAsyncIteration
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return self._frames.popleft()

    def push(self, frame: Frame) -> None:
        """Queue a frame; the mount wakes the consumer (see the module docstring)."""
        if self.reason is not None:
            return
        if len(self._frames) >= MAX_PENDING_FRAMES:
            # Too far behind: everything pending becomes one replace with the newest view.
            self._frames.clear()
            frame = {"type": "replace", "seq": frame.get("seq"), "value": self._mount.snapshot()}
        self._frames.append(frame)

    def wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def end(self, reason: EndReason) -> None:
        if self.reason is None:
            self.reason = reason
            self.wake()

    def stop(self) -> None:
        """Stop watching (frames already queued are dropped)."""
        self._frames.clear()
        self.end("stopped")
        self._mount.detach(self)

    @property
    def pending(self) -> int:
        return len(self._frames)

    @property
    def seq(self) -> int | None:
        """The seq of the newest commit the watch has seen (its frames so far bring a
        consumer up to it); ``None`` before any, on a storage that does not say."""
        return self._mount.seq


class Mount:
    """A value kept current from commit events, and the watches on it."""

    def __init__(self, value: JsonObject, on_empty: Callable[[Mount], None]) -> None:
        self.value = value
        self.seq: int | None = None
        """The newest commit seq :attr:`value` reflects (set by the harness)."""
        self._watches: list[Watch] = []
        self._on_empty = on_empty
        self._clock: Clock | None = None
        self._wake_interval_ms = 0
        self._wake_scheduled = False
        self._last_wake: int | None = None

    def pace_wakes(self, clock: Clock, interval_ms: int) -> None:
        """Wake waiting consumers at most once per ``interval_ms`` (without a clock, after
        every commit)."""
        self._clock = clock
        self._wake_interval_ms = interval_ms

    def snapshot(self) -> JsonValue:
        return json_copy(self.value)

    def watch(self) -> Watch:
        w = Watch(self, {"type": "view", "value": self.snapshot()})
        self._watches.append(w)
        return w

    def detach(self, watch: Watch) -> None:
        if watch in self._watches:
            self._watches.remove(watch)
        if not self._watches:
            self._on_empty(self)

    def emit(self, seq: int, ops: list[JsonValue]) -> None:
        if not ops:
            return
        sent: list[JsonValue] = []
        value: JsonValue = self.value
        for op in ops:
            # Each op is judged against the value the ops before it left.
            op = _as_append(value, op)
            value = apply_ops(value, [json_copy(op)])
            sent.append(op)
        self.value = _as_object(value)
        frame: Frame = {"type": "delta", "seq": seq, "ops": sent}
        for w in self._watches:
            w.push(frame)
        self._schedule_wake()

    def _schedule_wake(self) -> None:
        if self._wake_scheduled or not self._watches:
            return
        self._wake_scheduled = True
        clock, last = self._clock, self._last_wake
        if clock is not None and last is not None:
            due = last + self._wake_interval_ms
            if clock.now() < due:
                clock.call_at(due, self._wake)
                return
        asyncio.get_running_loop().call_soon(self._wake)

    def _wake(self) -> None:
        self._wake_scheduled = False
        if self._clock is not None:
            self._last_wake = self._clock.now()
        for w in self._watches:
            w.wake()

    def end_all(self, reason: EndReason) -> None:
        for w in list(self._watches):
            w.end(reason)
        self._watches.clear()

    def on_commit(self, event: CommitEvent) -> None:  # pragma: no cover - overridden
        raise NotImplementedError


def _as_append(value: JsonValue, op: JsonValue) -> JsonValue:
    """``["a", path, suffix]`` for a set that only extends the string at its path (a
    streaming answer's text grows by commits of the whole partial): watchers get the new
    text, not the whole partial each time. Any other op is returned as it is."""
    if type(op) is not list or len(op) != 3 or op[0] != "s" or type(op[2]) is not str:
        return op
    path = op[1]
    if type(path) is not list or not path:
        return op
    node = value
    for step in path:
        if isinstance(node, dict) and isinstance(step, str) and step in node:
            node = node[step]
        elif isinstance(node, list) and type(step) is int and 0 <= step < len(node):
            node = node[step]
        else:
            return op
    text = op[2]
    if type(node) is str and node and len(text) > len(node) and text.startswith(node):
        return ["a", path, text[len(node) :]]
    return op


def _as_object(value: JsonValue) -> JsonObject:
    assert isinstance(value, dict)
    return value


class ConversationMount(Mount):
    """The view of one conversation: its active entries and its current documents.

    ``{"conversation": {...}, "entries": [entry, ...], "docs": {name: value}}`` where a
    document's name is its kind, or ``kind/key`` for a family member.
    """

    def __init__(
        self, conversation_id: int, value: JsonObject, on_empty: Callable[[Mount], None]
    ) -> None:
        super().__init__(value, on_empty)
        self.conversation_id = conversation_id

    def on_commit(self, event: CommitEvent) -> None:
        ops: list[JsonValue] = []
        entries = self.value.get("entries")
        count = len(entries) if isinstance(entries, list) else 0
        for entry in event.entries:
            if entry.conversation_id != self.conversation_id:
                continue
            item = entry.to_json()
            if entry.head is not None:
                # A new context range: the view keeps the marker and what it keeps.
                kept = [
                    e
                    for e in (entries if isinstance(entries, list) else [])
                    if isinstance(e, dict) and _entry_id(e) >= entry.head
                ]
                ops.append(["s", ["entries"], [*kept, item]])
                entries, count = [*kept, item], len(kept) + 1
            else:
                ops.append(["p", ["entries"], count, 0, [item]])
                count += 1
        for doc in event.documents:
            rec = doc.record
            if rec.scope == "conversation" and rec.owner_id == self.conversation_id:
                ops.extend(_document_ops(doc))
        self.emit(event.seq, ops)


def _entry_id(entry: JsonObject) -> int:
    value = entry.get("id")
    return value if isinstance(value, int) else -1


def document_name(kind: str, key: str | None) -> str:
    return kind if key is None else f"{kind}/{key}"


def _document_ops(doc: DocumentEvent) -> list[JsonValue]:
    name = document_name(doc.record.kind, doc.record.key)
    base: list[JsonValue] = ["docs", name]
    if doc.retired:
        return [["d", base]]
    if name == LIVE.kind:  # the view shows the usage ledger it keeps as a document of its own
        return view_ops(doc.ops, doc.value, ["docs"])
    if doc.ops is None:
        return [["s", base, doc.value]]
    return [_reroot(op, base) for op in doc.ops]


def _reroot(op: JsonValue, base: list[JsonValue]) -> JsonValue:
    assert isinstance(op, list)
    verb = op[0]
    if verb == "r":
        return ["s", base, op[1]]
    path = op[1]
    assert isinstance(path, list)
    return [verb, [*base, *path], *op[2:]]


class TaskGraphMount(Mount):
    """Live tasks (and the conversations they run in) with states and owner edges:
    ``{"tasks": {"<id>": node}}`` (nodes from :func:`~core.harness.task_graph.task_node`).
    A task leaves the graph when it becomes terminal."""

    def on_commit(self, event: CommitEvent) -> None:
        ops: list[JsonValue] = []
        tasks = self.value.get("tasks")
        current = tasks if isinstance(tasks, dict) else {}
        for task in event.tasks:
            key = str(task.id)
            if isinstance(task.state, Terminal):
                if key in current:
                    ops.append(["d", ["tasks", key]])
                continue
            node = task_node(task)
            if current.get(key) != node:
                ops.append(["s", ["tasks", key], node])
        self.emit(event.seq, ops)


class DocumentMount(Mount):
    """One document: ``{"value": ...}``. Ends its watches ``retired`` with the document."""

    def __init__(self, document_id: int, value: JsonObject, on_empty: Callable[[Mount], None]):
        super().__init__(value, on_empty)
        self.document_id = document_id

    def on_commit(self, event: CommitEvent) -> None:
        for doc in event.documents:
            if doc.record.id != self.document_id:
                continue
            if doc.retired:
                self.end_all("retired")
                self._on_empty(self)
                return
            if doc.ops is None:
                self.emit(event.seq, [["s", ["value"], doc.value]])
            else:
                self.emit(event.seq, [_reroot(op, ["value"]) for op in doc.ops])
