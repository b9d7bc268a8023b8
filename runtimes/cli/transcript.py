"""How ``perdure chat`` shows a conversation: a committed view and its deltas, as lines.

:class:`Transcript` renders entries (inputs, answers, tool calls and their results), the
``live`` document (a streaming answer, running tools' output) and the harness events,
each once, on a :class:`~runtimes.cli.screen.Screen`. :mod:`runtimes.cli.chat` feeds it
from the conversation's watch and runs the input loop.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import cast

from core.harness.events import summarize_recovery
from core.jsonvalue import JsonObject, JsonValue
from core.times import iso_time
from runtimes.cli.screen import Screen
from runtimes.observe.logs import describe_event

__all__ = ["Transcript", "as_list", "as_object"]

RESULT_LINES = 3  # lines of a tool result shown
ARGS_CHARS = 120  # characters of a tool call's arguments shown
_AGENT = "agent> "


def as_object(value: JsonValue) -> JsonObject:
    return value if isinstance(value, dict) else {}


def as_list(value: JsonValue) -> list[JsonValue]:
    return value if isinstance(value, list) else []


def _text_of(message: JsonObject) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "".join(
        str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") == "text"
    )


def _calls_of(message: JsonObject) -> list[JsonObject]:
    content = message.get("content")
    if not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, dict) and b.get("type") == "tool_call"]


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass
class _Stream:
    """The answer being streamed: its generation task, what was printed of it, and the
    screen's write count after that (another write since means it was interrupted)."""

    task: int | None = None
    printed: str = ""
    mark: int = -1


def data_of(entry: JsonObject) -> JsonObject:
    return as_object(entry.get("data"))


@dataclass
class _Events:
    """Shows the conversation's harness events (``docs.events``, see
    :mod:`core.harness.events`) once each, as ``[...]`` lines.

    The tool recoveries that follow a restart land in separate commits; they are held
    and shown as one line — ``[recovered after restart: search reran, book_seat
    recovered from the sandbox]`` — once every tool the restart named has reported (or
    anything else is shown first)."""

    seen: int = 0
    held: list[JsonObject] = field(default_factory=list)
    waiting_for: set[int] = field(default_factory=set)
    # This chat asked for the conversation's abort: its own ``[run aborted (n tasks)]``
    # line tells it, so the harness's event for it is not shown twice.
    own_abort: bool = False
    # ``(task, attempt, until)`` of every retry shown: the retry event and the live
    # document's ``generation.retry`` tell of the same retry, and it is shown once. The
    # time too: one generation task makes every model round of a run, each counting its
    # own attempts.
    retries: set[tuple[int, int, int]] = field(default_factory=set)

    def show(self, screen: Screen, doc: JsonObject, *, first: bool) -> None:
        items = [e for e in as_list(doc.get("items")) if isinstance(e, dict)]
        new = [e for e in items if int(cast(int, e.get("n", 0))) > self.seen]
        if first:
            # A client attaching late sees the latest restart's story, not all history.
            starts = [i for i, e in enumerate(new) if e.get("kind") == "restart"]
            new = new[starts[-1] :] if starts else []
            self.seen = int(cast(int, items[-1].get("n", 0))) if items else 0
        for event in new:
            self.seen = max(self.seen, int(cast(int, event.get("n", 0))))
            self._one(screen, event)
        if self.held and not self.waiting_for:
            self.flush(screen)

    def _one(self, screen: Screen, event: JsonObject) -> None:
        kind = event.get("kind")
        if kind == "restart":
            self.flush(screen)
            tasks = [as_object(t) for t in as_list(event.get("tasks"))]
            self.waiting_for = {cast(int, t.get("task")) for t in tasks if t.get("kind") == "tool"}
            if not self.waiting_for:
                screen.line("[restarted: carrying on from the last commit]", "yellow")
        elif kind in ("tool_recovery", "request_resent"):
            self.held.append(event)
            self.waiting_for.discard(cast(int, event.get("task")))
        elif kind == "abort" and event.get("scope") == "conversation" and self.own_abort:
            self.own_abort = False
        elif kind == "approval" and event.get("state") == "pending":
            pass  # the chat asks about it (runtimes/cli/asking.py)
        else:
            self.flush(screen)
            line = describe_event(event)
            if kind == "retry":
                task, attempt, until = event.get("task"), event.get("attempt"), event.get("until")
                if isinstance(task, int) and isinstance(attempt, int) and isinstance(until, int):
                    if (task, attempt, until) in self.retries:
                        return
                    self.retries.add((task, attempt, until))
                line = (
                    f"{_short(str(event.get('error') or 'model error'), 200)}: retry "
                    f"{event.get('attempt')} in {_seconds(event.get('delay_ms'))} "
                    f"(at {_local_time(event.get('until'))})"
                )
            screen.line(f"[{line}]", "yellow" if kind in ("retry", "abort") else "dim")

    def flush(self, screen: Screen) -> None:
        if self.held:
            line = summarize_recovery(self.held)
            screen.line(f"[recovered after restart: {line}]", "yellow")
        self.held = []
        self.waiting_for = set()


def _seconds(ms: JsonValue) -> str:
    value = ms / 1000 if isinstance(ms, int | float) else 0.0
    return f"{value:.0f} s" if value >= 10 else f"{value:.1f} s"


def _local_time(ms: JsonValue) -> str:
    """Epoch ms as ISO-8601 in this terminal's zone, with the offset."""
    if not isinstance(ms, int):
        return "?"
    return iso_time(ms, datetime.now().astimezone().tzinfo)


@dataclass
class Transcript:
    """Renders a conversation view as it changes: ``show(view)`` prints what is new
    since the last call (entries, streamed text, tool calls, retries)."""

    screen: Screen
    own: set[int] = field(default_factory=set)  # submissions typed here (echoed already)
    sending: list[str] = field(default_factory=list)  # typed lines not yet accepted
    shown: set[int] = field(default_factory=set)  # entry ids
    calls: set[str] = field(default_factory=set)  # tool call ids
    retries: set[tuple[int, int, int]] = field(default_factory=set)  # streams restarted for
    stream: _Stream = field(default_factory=_Stream)
    busy: bool = False
    events: _Events = field(default_factory=lambda: _Events())
    outputs: dict[str, str] = field(default_factory=dict)  # tool output lines shown per call
    turn: JsonObject = field(default_factory=dict)  # usage of the run's responses so far

    def show(self, view: JsonObject, *, history: int | None = None) -> None:
        """Print what is new in ``view``. ``history``: on a first view, mark older
        entries as seen and show only the newest ``history`` of them."""
        entries = [e for e in as_list(view.get("entries")) if isinstance(e, dict)]
        if history is not None:
            old = [e for e in entries if e.get("id") not in self.shown]
            for entry in old[: max(0, len(old) - history)]:
                self.shown.add(cast(int, entry.get("id")))
        for entry in entries:
            entry_id = entry.get("id")
            if isinstance(entry_id, int) and entry_id not in self.shown:
                self.shown.add(entry_id)
                self._entry(entry)
        docs = as_object(view.get("docs"))
        self.events.show(self.screen, as_object(docs.get("events")), first=history is not None)
        live = as_object(docs.get("live"))
        self._live(live)
        inbox = as_object(docs.get("inbox")).get("items")
        self.busy = "run" in live or bool(inbox)

    # entries ------------------------------------------------------------------

    def _entry(self, entry: JsonObject) -> None:
        kind = entry.get("kind")
        message = as_object(entry.get("message"))
        data = as_object(entry.get("data"))
        screen = self.screen
        if kind == "user":
            text = _text_of(message)
            submission = data.get("submission")
            if submission in self.own:
                return
            if text in self.sending:  # typed here; its entry came before the POST's answer
                self.sending.remove(text)
                if isinstance(submission, int):
                    self.own.add(submission)
                return
            screen.line(f"» {text}", "cyan")
        elif kind == "assistant":
            self._assistant(entry, message)
        elif kind == "tool_result":
            text = _text_of(message)
            lines = text.splitlines() or [""]
            more = len(lines) - RESULT_LINES
            shown = "\n    ".join(lines[:RESULT_LINES]) + (
                f"\n    (+{more} lines)" if more > 0 else ""
            )
            style = "red" if message.get("is_error") else "dim"
            screen.line(f"  ↳ {shown}", style)
        elif kind == "compaction":
            screen.line("[older context compacted into a summary]", "dim")
        elif kind == "reset":
            handoff = _text_of(message)
            screen.line("[context reset]" + (f" {handoff}" if handoff else ""), "dim")
        elif kind != "system":  # system prompts are the agent's instructions: not shown
            screen.line(f"[{kind}]", "dim")

    def _assistant(self, entry: JsonObject, message: JsonObject) -> None:
        screen = self.screen
        task = entry.get("by_task_id")
        text = _text_of(message)
        # Still on the answer's line: the stream was the last output, or writes it now.
        writes = screen.writes
        on_its_line = bool(self.stream.printed) and self.stream.mark == writes
        self._stream_to(task if isinstance(task, int) else None, text)
        on_its_line = on_its_line or screen.writes != writes
        self.stream = _Stream()
        reason = message.get("stop_reason")
        if not on_its_line and reason in ("aborted", "error", "length"):
            screen.end_line()  # other output came in between (an event): label it again
            screen.write(_AGENT.rstrip(), "bold green")
        if reason == "aborted" and data_of(entry).get("interrupted") == "restart":
            screen.write(" [cut short by a restart: asking the model again]", "yellow")
        elif reason == "aborted":
            screen.write(" [aborted]", "bold red")
        elif reason == "error":
            screen.write(f" [error: {message.get('error') or 'model error'}]", "bold red")
        elif reason == "length":
            screen.write(" [cut: token limit]", "yellow")
        screen.end_line()
        # A response a restart cut short is asked again: the turn goes on.
        self._count(message, ends=data_of(entry).get("interrupted") != "restart")
        for call in _calls_of(message):
            self._call(str(call.get("id")), str(call.get("name")), call.get("arguments"))

    def _count(self, message: JsonObject, *, ends: bool) -> None:
        """Add a response's usage to the turn's; after the answer, show the turn's."""
        usage = as_object(message.get("usage"))
        for key in ("input", "output", "cost"):
            value = usage.get(key)
            if isinstance(value, int | float):
                total = self.turn.get(key, 0)
                self.turn[key] = (total if isinstance(total, int | float) else 0) + value
        if _calls_of(message) or not ends:
            return
        cost = self.turn.get("cost", 0)
        shown = f", ${cost:.4f}" if isinstance(cost, int | float) and cost else ""
        if any(self.turn.values()):  # a response aborted before its first token used none
            self.screen.line(
                f"  ({self.turn.get('input', 0)} in / {self.turn.get('output', 0)} out "
                f"tokens{shown})",
                "dim",
            )
        self.turn = {}

    def _call(self, call_id: str, name: str, arguments: JsonValue) -> None:
        if call_id in self.calls:
            return
        self.calls.add(call_id)
        args = "" if arguments is None else json.dumps(arguments, ensure_ascii=False)
        self.screen.line(f"  ⚙ {name} {_short(args, ARGS_CHARS)}".rstrip(), "yellow")

    # live ---------------------------------------------------------------------

    def _live(self, live: JsonObject) -> None:
        generation = as_object(live.get("generation"))
        task = generation.get("task")
        retry = as_object(generation.get("retry"))
        attempt, at = retry.get("attempt"), retry.get("at")
        told = isinstance(task, int) and isinstance(attempt, int) and isinstance(at, int)
        key = (cast(int, task), cast(int, attempt), cast(int, at))
        if told and key not in self.retries:
            self.retries.add(key)
            self.stream = _Stream()
        if told and key not in self.events.retries:
            # Not told by the retry event (shown before this, when the view has it).
            self.events.retries.add(key)
            error = _short(str(retry.get("error") or "model error"), 200)
            when = f" at {_local_time(at)}"
            self.screen.line(f"[{error}: retrying (attempt {attempt}){when}]", "yellow")
        partial = generation.get("partial")
        if isinstance(task, int) and isinstance(partial, dict):
            self._partial(task, _text_of(partial))
        for call_id, slot in as_object(live.get("tools")).items():
            if isinstance(slot, dict):  # normally shown from the tool round's entry already
                self._call(call_id, str(slot.get("name")), None)
                output = slot.get("output")
                if isinstance(output, str):
                    self._output(call_id, output)

    def _output(self, call_id: str, output: str) -> None:
        """A running tool's output as it is committed: the complete new lines, once."""
        printed = self.outputs.get(call_id, "")
        if not output.startswith(printed):  # a rerun after a restart starts over
            printed = ""
        done = output[: output.rfind("\n") + 1]
        if len(done) > len(printed):
            for line in done[len(printed) :].splitlines():
                self.screen.line(f"    │ {line}", "dim")
            self.outputs[call_id] = done

    def _partial(self, task: int, text: str) -> None:
        if text and not (self.stream.task == task and text == self.stream.printed):
            self._stream_to(task, text)
            self.stream = _Stream(task, text, self.screen.writes)

    def _stream_to(self, task: int | None, text: str) -> None:
        """Show ``text`` of generation ``task``: only what is new if it continues what
        was streamed (``agent> …`` first if other output came in between), else whole."""
        stream, screen = self.stream, self.screen
        continues = stream.task == task and stream.printed and text.startswith(stream.printed)
        if continues:
            rest = text[len(stream.printed) :]
            if rest and screen.writes != stream.mark:
                screen.end_line()
                screen.write(_AGENT + "… ", "bold green")
            screen.write(rest)
        elif text:
            screen.end_line()
            screen.write(_AGENT, "bold green")
            screen.write(text)
