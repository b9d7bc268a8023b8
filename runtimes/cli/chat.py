"""``perdure chat``: talk to an actor over its HTTP API, in the terminal.

Each typed line is submitted to the conversation; what the agent does shows up as it is
committed, read from the conversation's watch (Server-Sent Events):

* the answer streams from the ``live`` document's ``generation.partial`` and is finished
  by the assistant entry;
* tool calls (``⚙ name {arguments}``) and their results (``↳ ...``) come from the tool
  round's assistant entry, the ``live.tools`` slots and the ``tool_result`` entries;
* input from elsewhere (another client, a reminder) is shown as ``» text``.

The prompt is ``you> ``; the agent's lines start with ``agent> ``.

Lines typed while the agent is busy are sent with ``when_busy="steer"``: they join the
current run after its next tool round (or start the next run). Ctrl-C aborts the current
run (a second Ctrl-C while aborting, or Ctrl-C when idle, exits); Ctrl-D or ``/quit``
exits. The work itself lives on the server: leaving the chat never stops it, and a lost
stream is reopened (the client re-reads the view and shows what it missed).

Rendering is lines (rich styling, no full-screen UI). On a terminal the input line stays
at the bottom and the answer streams above it (:mod:`runtimes.cli.terminal`); a line sent
while the agent works is shown as ``you (steer): ...`` where it was sent. Piped, or on a
dumb terminal, output is plain lines (:class:`~runtimes.cli.screen.Screen`): no cursor
movements, and what is typed is the terminal's own echo.

Size: over 600 lines: :class:`Transcript` (a view and its deltas rendered as lines) and
:class:`Chat` (the watch, the input loop and the commands) are the two halves of one
screen. Transcript is the seam to split along when either grows.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

import httpx
from rich.console import Console

from core.docops import InvalidOp, apply_ops
from core.harness.events import summarize_recovery
from core.jsonvalue import JsonObject, JsonValue
from core.times import iso_time
from remote_env.client.sse import parse_sse
from runtimes.cli.screen import Screen, interactive_terminal
from runtimes.observe.logs import describe_event

__all__ = ["ChatOptions", "Screen", "Transcript", "chat_main", "run_chat", "sse_events"]

_SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
HISTORY = 10  # entries of the existing conversation shown when the chat starts
RESULT_LINES = 3  # lines of a tool result shown
ARGS_CHARS = 120  # characters of a tool call's arguments shown
_AGENT = "agent> "
_HELP = (
    "Enter sends a line (while the agent works, it steers the run). Ctrl-C aborts the "
    "run; Ctrl-C when idle, Ctrl-D or /quit exits. Commands: /abort, /compact "
    "[instructions], /reset [handoff], /help, /quit."
)


class ChatError(Exception):
    """A failure the chat cannot go on from (bad token, unknown conversation)."""


@dataclass(frozen=True)
class ChatOptions:
    url: str
    token: str = field(repr=False)
    actor: str = "demo"
    conversation_id: int = 1
    read_timeout_s: float = 60.0  # the server pings every 15 s by default
    console: Console | None = None


# --------------------------------------------------------------------------- SSE


async def sse_events(lines: AsyncIterator[str]) -> AsyncIterator[tuple[str, JsonValue]]:
    """``(event, data)`` per Server-Sent Event of ``lines`` (data parsed as JSON);
    comments (heartbeats) are skipped. The parsing is the sandbox client's (one parser)."""
    async for event in parse_sse(lines):
        yield event.event, json.loads(event.data)


# --------------------------------------------------------------------------- transcript


def _obj(value: JsonValue) -> JsonObject:
    return value if isinstance(value, dict) else {}


def _list(value: JsonValue) -> list[JsonValue]:
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
    return _obj(entry.get("data"))


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
    # ``(task, attempt)`` of every retry shown: the retry event and the live document's
    # ``generation.retry`` tell of the same retry, and it is shown once.
    retries: set[tuple[int, int]] = field(default_factory=set)

    def show(self, screen: Screen, doc: JsonObject, *, first: bool) -> None:
        items = [e for e in _list(doc.get("items")) if isinstance(e, dict)]
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
            tasks = [_obj(t) for t in _list(event.get("tasks"))]
            self.waiting_for = {cast(int, t.get("task")) for t in tasks if t.get("kind") == "tool"}
            if not self.waiting_for:
                screen.line("[restarted: carrying on from the last commit]", "yellow")
        elif kind in ("tool_recovery", "request_resent"):
            self.held.append(event)
            self.waiting_for.discard(cast(int, event.get("task")))
        elif kind == "abort" and event.get("scope") == "conversation" and self.own_abort:
            self.own_abort = False
        else:
            self.flush(screen)
            line = describe_event(event)
            if kind == "retry":
                task, attempt = event.get("task"), event.get("attempt")
                if isinstance(task, int) and isinstance(attempt, int):
                    if (task, attempt) in self.retries:
                        return
                    self.retries.add((task, attempt))
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
    retries: set[tuple[int, int]] = field(default_factory=set)  # streams restarted for
    stream: _Stream = field(default_factory=_Stream)
    busy: bool = False
    events: _Events = field(default_factory=lambda: _Events())
    outputs: dict[str, str] = field(default_factory=dict)  # tool output lines shown per call
    turn: JsonObject = field(default_factory=dict)  # usage of the run's responses so far

    def show(self, view: JsonObject, *, history: int | None = None) -> None:
        """Print what is new in ``view``. ``history``: on a first view, mark older
        entries as seen and show only the newest ``history`` of them."""
        entries = [e for e in _list(view.get("entries")) if isinstance(e, dict)]
        if history is not None:
            old = [e for e in entries if e.get("id") not in self.shown]
            for entry in old[: max(0, len(old) - history)]:
                self.shown.add(cast(int, entry.get("id")))
        for entry in entries:
            entry_id = entry.get("id")
            if isinstance(entry_id, int) and entry_id not in self.shown:
                self.shown.add(entry_id)
                self._entry(entry)
        docs = _obj(view.get("docs"))
        self.events.show(self.screen, _obj(docs.get("events")), first=history is not None)
        live = _obj(docs.get("live"))
        self._live(live)
        inbox = _obj(docs.get("inbox")).get("items")
        self.busy = "run" in live or bool(inbox)

    # entries ------------------------------------------------------------------

    def _entry(self, entry: JsonObject) -> None:
        kind = entry.get("kind")
        message = _obj(entry.get("message"))
        data = _obj(entry.get("data"))
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
        usage = _obj(message.get("usage"))
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
        generation = _obj(live.get("generation"))
        task = generation.get("task")
        retry = _obj(generation.get("retry"))
        attempt = retry.get("attempt")
        if (
            isinstance(task, int)
            and isinstance(attempt, int)
            and (task, attempt) not in self.retries
        ):
            self.retries.add((task, attempt))
            self.stream = _Stream()
        if (
            isinstance(task, int)
            and isinstance(attempt, int)
            and (task, attempt) not in self.events.retries
        ):
            # Not told by the retry event (shown before this, when the view has it).
            self.events.retries.add((task, attempt))
            error = _short(str(retry.get("error") or "model error"), 200)
            at = retry.get("at")
            when = f" at {_local_time(at)}" if isinstance(at, int) else ""
            self.screen.line(f"[{error}: retrying (attempt {attempt}){when}]", "yellow")
        partial = generation.get("partial")
        if isinstance(task, int) and isinstance(partial, dict):
            self._partial(task, _text_of(partial))
        for call_id, slot in _obj(live.get("tools")).items():
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


# --------------------------------------------------------------------------- the chat


class Chat:
    def __init__(self, options: ChatOptions, http: httpx.AsyncClient, screen: Screen) -> None:
        self.options = options
        self.http = http
        self.screen = screen
        self.transcript = Transcript(screen)
        base = f"/v1/actors/{options.actor}"
        self.conversation_path = f"{base}/conversations/{options.conversation_id}"
        self.submissions_path = f"{base}/submissions"
        self.view: JsonObject | None = None
        self.awaiting: set[int] = set()  # own submissions the view has not shown yet
        self.created = asyncio.Event()  # the conversation exists (the first view arrived)
        self.aborting: asyncio.Task[None] | None = None
        self.reached = False  # the server answered once
        self.aborted: str | None = None  # what an abort did, shown once the run has ended
        self.interactive = os.isatty(0)  # a terminal echoes what is typed
        self.leave_when_idle = False
        self.finished: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._jobs: set[asyncio.Task[None]] = set()

    @property
    def busy(self) -> bool:
        return self.transcript.busy or bool(self.awaiting)

    def stop(self, code: int) -> None:
        if not self.finished.done():
            self.finished.set_result(code)

    def spawn(self, job: Any) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.ensure_future(job)
        self._jobs.add(task)
        task.add_done_callback(self._jobs.discard)
        return task

    # the watch ----------------------------------------------------------------

    async def watch(self) -> None:
        delay = 0.2
        lost = False
        while True:
            try:
                await self._stream_once()
                delay = 0.2
            except ChatError as error:
                self.screen.line(f"error: {error}", "bold red")
                self.stop(1)
                return
            except httpx.ConnectError as error:
                if not self.reached:  # a wrong URL, or no server: say so and leave
                    self.screen.line(f"error: cannot reach {self.options.url}: {error}", "bold red")
                    self.stop(1)
                    return
                if not lost:
                    self.screen.line("[connection lost: reconnecting]", "dim")
                lost = True
            except (httpx.HTTPError, InvalidOp, ValueError) as error:
                if not lost:
                    self.screen.line(f"[connection lost ({_reason(error)}): reconnecting]", "dim")
                lost = True
            else:
                lost = False
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)

    async def _stream_once(self) -> None:
        timeout = httpx.Timeout(10.0, read=self.options.read_timeout_s)
        async with self.http.stream(
            "GET", f"{self.conversation_path}/watch", timeout=timeout
        ) as response:
            self.reached = True
            if response.status_code != 200:
                await response.aread()
                await self._refused(response)
                return
            first = True
            async for event, data in sse_events(response.aiter_lines()):
                frame = _obj(data)
                if event in ("view", "replace"):
                    self.view = _obj(frame.get("value"))
                    self.awaiting.clear()  # a whole view tells the truth about the run
                    self._render(history=HISTORY if first and not self.created.is_set() else None)
                    if first and not self.created.is_set():
                        self.created.set()
                        if not self.transcript.busy:
                            self.screen.prompt()
                    first = False
                elif event == "delta" and self.view is not None:
                    ops = frame.get("ops")
                    self.view = _obj(apply_ops(self.view, ops if isinstance(ops, list) else []))
                    self._render()
                elif event == "end":
                    why = _obj(frame).get("reason")
                    self.screen.line(f"[the server ended the stream ({why}): reconnecting]", "dim")
                    return

    async def _refused(self, response: httpx.Response) -> None:
        code, message = _error(response)
        new = code == "unknown_actor" or (code == "not_found" and self.options.conversation_id == 1)
        if response.status_code == 404 and new and not self.created.is_set():
            self.screen.line("(a new conversation: your first message starts it)", "dim")
            self.screen.prompt()
            await self.created.wait()  # set by the first accepted submission
            return
        if response.status_code >= 500 or response.status_code == 423:
            raise httpx.HTTPError(f"{response.status_code} {code}: {message}")
        raise ChatError(f"{response.status_code} {code}: {message}")

    def _render(self, *, history: int | None = None) -> None:
        """Show what is new in the view; prompt again once idle after showing something
        (an answer, a reminder's input, a compaction) or after a run ended."""
        if self.view is None:
            return
        was_busy = self.busy
        writes = self.screen.writes
        for entry in _list(self.view.get("entries")):
            data = _obj(_obj(entry).get("data"))
            self.awaiting.discard(cast(int, data.get("submission")))
        for item in _list(_obj(_obj(self.view.get("docs")).get("inbox")).get("items")):
            self.awaiting.discard(cast(int, _obj(item).get("id")))
        self.transcript.show(self.view, history=history)
        if self.aborted is not None and not self.transcript.busy:
            self._aborted()
        elif self.aborting is not None and not self.aborting.done():
            pass  # the abort's answer prompts
        elif self.leave_when_idle and not self.busy:
            self.stop(0)
        elif (was_busy or self.screen.writes != writes) and not self.busy:
            self.screen.prompt()

    # progress -----------------------------------------------------------------

    async def ticker(self, period_s: float = 0.25) -> None:
        """While the agent works, a status line: a spinner with the time waited for the
        model, a running tool's elapsed time, or a retry's countdown."""
        started: dict[object, float] = {}
        frame = 0
        while True:
            await asyncio.sleep(period_s)
            frame += 1
            text, keys = self._progress(started)
            for key in set(started) - keys:
                del started[key]
            spinner = _SPINNER[frame % len(_SPINNER)]
            self.screen.status(f"{spinner} {text}" if text else None)

    def _progress(self, started: dict[object, float]) -> tuple[str | None, set[object]]:
        live = _obj(_obj(_obj(self.view).get("docs")).get("live"))
        if not self.busy or "run" not in live:
            return None, set()
        now = time.monotonic()
        generation = _obj(live.get("generation"))
        retry = _obj(generation.get("retry"))
        at = retry.get("at")
        if isinstance(at, int):
            left = max(0.0, at / 1000 - time.time())
            return f"retry {retry.get('attempt')} in {left:.0f} s", set()
        running = sorted(
            (str(call_id), str(_obj(slot).get("name")))
            for call_id, slot in _obj(live.get("tools")).items()
            if _obj(slot).get("status") in ("pending", "running")
        )
        if running:
            keys: set[object] = {call_id for call_id, _ in running}
            parts = []
            for call_id, name in running:
                since = started.setdefault(call_id, now)
                parts.append(f"{name} {now - since:.0f} s")
            return "running " + ", ".join(parts), keys
        if "partial" in generation:
            return None, set()
        key = ("model", generation.get("task"))
        since = started.setdefault(key, now)
        return f"waiting for the model ({now - since:.0f} s)", {key}

    # input --------------------------------------------------------------------

    async def inputs(self, lines: asyncio.Queue[str | None]) -> None:
        while True:
            line = await lines.get()
            if line is None:  # Ctrl-D / end of input
                if not self.interactive and self.busy:
                    self.leave_when_idle = True  # piped input: wait for the answers
                    return
                self._leave()
                return
            if self.interactive:
                self.screen.typed(line, steer=self.busy)
            else:  # nobody typed it: show it as if they had
                self.screen.write(line + "\n")
            text = line.strip()
            if not text:
                if not self.busy:
                    self.screen.prompt()
                continue
            if text.startswith("/"):
                await self._command(text)
            else:
                await self._submit(text)

    async def _command(self, text: str) -> None:
        name, _, rest = text.partition(" ")
        rest = rest.strip()
        if name in ("/quit", "/exit", "/q"):
            self._leave()
        elif name == "/help":
            self.screen.line(_HELP, "dim")
        elif name == "/abort":
            self.interrupt(exit_when_idle=False)
        elif name == "/compact":
            body = {"instructions": rest} if rest else {}
            r = await self._post(f"{self.conversation_path}/compact", body)
            if r is not None:
                self.screen.line(f"[compaction started: task {r['task']}]", "dim")
        elif name == "/reset":
            body = {"handoff": rest} if rest else {}
            await self._post(f"{self.conversation_path}/reset", body)
        else:
            self.screen.line(f"unknown command {name}: try /help", "yellow")
        if not self.busy and not self.finished.done():
            self.screen.prompt()

    async def _submit(self, text: str) -> None:
        body = {
            "type": "input",
            "content": text,
            "conversation_id": self.options.conversation_id,
            "when_busy": "steer",
        }
        busy = self.busy
        sending = self.transcript.sending
        sending.append(text)
        try:
            accepted = await self._post(self.submissions_path, body)
        finally:
            if text in sending:
                sending.remove(text)
        if accepted is None:
            if not self.busy:
                self.screen.prompt()
            return
        if accepted.get("id") is None:
            # AWS: another invocation holds the actor; the submission waits in its
            # mailbox and its entries arrive in the view once the holder takes it.
            self.screen.line("(mailed: the actor is busy elsewhere; it is taken next)", "dim")
            self.created.set()
            return
        self.transcript.own.add(int(accepted["id"]))
        if accepted.get("status") in ("placed", "queued"):
            self.awaiting.add(int(accepted["id"]))
        self.created.set()
        if busy or accepted.get("status") == "queued":
            self.screen.line("(queued: it steers the current run at its next step)", "dim")

    async def _post(self, path: str, body: Mapping[str, Any]) -> Any:
        try:
            r = await self.http.post(path, json=body)
        except httpx.HTTPError as error:
            self.screen.line(f"error: {_reason(error)}", "bold red")
            return None
        if r.status_code >= 400:
            code, message = _error(r)
            self.screen.line(f"error: {r.status_code} {code}: {message}", "bold red")
            return None
        return r.json()

    # Ctrl-C -------------------------------------------------------------------

    def interrupt(self, *, exit_when_idle: bool = True) -> None:
        """Ctrl-C: abort the run when busy; exit when idle, or when an abort is under way
        or failed (the server may be gone: the view cannot say the run ended)."""
        if self.aborting is not None:
            if exit_when_idle:
                self._leave()
            return
        if not self.busy:
            if exit_when_idle:
                self._leave()
            else:
                self.screen.line("(nothing to abort)", "dim")
                self.screen.prompt()
            return
        self.transcript.events.own_abort = True
        self.aborting = self.spawn(self._abort())

    async def _abort(self) -> None:
        path = f"{self.conversation_path}/abort"
        try:
            r = await self.http.post(path, json={}, timeout=httpx.Timeout(10.0, read=None))
        except httpx.HTTPError as error:
            self.screen.line(f"error: abort failed: {_reason(error)} (Ctrl-C leaves)", "bold red")
            return
        if r.status_code >= 400:
            code, message = _error(r)
            self.screen.line(f"error: abort failed: {code}: {message} (Ctrl-C leaves)", "bold red")
            return
        self.aborting = None  # the next run can be aborted again
        self.awaiting.clear()
        count = r.json().get("aborted", 0)
        self.aborted = f"[run aborted ({count} task{'s' if count != 1 else ''})]"
        if not self.transcript.busy:  # else once the watch shows the run's end
            self._aborted()

    def _aborted(self) -> None:
        self.transcript.events.own_abort = False
        if self.aborted is not None:
            self.screen.line(self.aborted, "yellow")
            self.aborted = None
            self.screen.prompt()

    def _leave(self) -> None:
        self.screen.end_line()
        if self.busy:
            self.screen.line("(the agent keeps working on the server)", "dim")
        self.stop(0)


def _error(response: httpx.Response) -> tuple[str, str]:
    try:
        error = _obj(_obj(response.json()).get("error"))
    except ValueError:
        return "http_error", response.text[:200]
    return str(error.get("code", "http_error")), str(error.get("message", ""))


def _reason(error: Exception) -> str:
    return str(error) or type(error).__name__


async def run_chat(
    options: ChatOptions, *, install_signals: bool = True, transport: Any = None
) -> int:
    """Chat until the user leaves; returns the exit code (0, or 1 after an error).

    On a terminal (both standard streams, ``TERM`` not ``dumb``) the input line is kept
    apart from the streaming answer (:mod:`runtimes.cli.terminal`); otherwise — piped,
    a dumb terminal, or ``options.console`` given — output is plain lines."""
    if options.console is None and interactive_terminal():
        from runtimes.cli.terminal import terminal_screen  # prompt_toolkit: terminals only

        with terminal_screen() as screen:
            return await _chat_on(screen, options, install_signals, transport)
    console = options.console or Console(highlight=False, soft_wrap=True, emoji=False)
    return await _chat_on(Screen(console), options, install_signals, transport)


async def _chat_on(
    screen: Screen, options: ChatOptions, install_signals: bool, transport: Any
) -> int:
    headers = {"authorization": f"Bearer {options.token}"}
    async with httpx.AsyncClient(
        base_url=options.url.rstrip("/"), headers=headers, timeout=30.0, transport=transport
    ) as http:
        chat = Chat(options, http, screen)
        screen.working = lambda: chat.busy
        screen.line(
            f"perdure chat: actor {options.actor}, conversation {options.conversation_id} "
            f"at {options.url}. {_HELP}",
            "dim",
        )
        loop = asyncio.get_running_loop()
        lines: asyncio.Queue[str | None] = asyncio.Queue()
        if install_signals:
            loop.add_signal_handler(signal.SIGINT, chat.interrupt)
        jobs = [chat.spawn(chat.watch()), chat.spawn(chat.inputs(lines))]
        reading = screen.read_input(loop, lines, chat.interrupt)
        if reading is not None:
            jobs.append(reading)
        if screen.console.is_terminal:
            jobs.append(chat.spawn(chat.ticker()))
        try:
            code = await chat.finished
        finally:
            if install_signals:
                loop.remove_signal_handler(signal.SIGINT)
            for job in [*jobs, *chat._jobs]:
                job.cancel()
            await asyncio.gather(*jobs, *list(chat._jobs), return_exceptions=True)
        screen.end_line()
        return code


def chat_main(options: ChatOptions) -> int:
    """``perdure chat``: run the chat on a new event loop; returns the exit code."""
    try:
        return asyncio.run(run_chat(options))
    except KeyboardInterrupt:  # Ctrl-C before the chat took it over
        return 130
