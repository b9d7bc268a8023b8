"""``perdure chat``: talk to an actor over its HTTP API, in the terminal.

Each typed line is submitted to the conversation; what the agent does shows up as it is
committed, read from the conversation's watch (Server-Sent Events, or the long poll
where the host cannot stream: :mod:`runtimes.client` chooses):

* the answer streams from the ``live`` document's ``generation.partial`` and is finished
  by the assistant entry;
* tool calls (``⚙ name {arguments}``) and their results (``↳ ...``) come from the tool
  round's assistant entry, the ``live.tools`` slots and the ``tool_result`` entries;
* input from elsewhere (another client, a reminder) is shown as ``» text``;
* a tool call waiting for a decision is asked about inline, ``approve? [y/n/note]``: the
  next line typed answers it (:mod:`runtimes.cli.asking`).

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

What is shown, and how, is :mod:`runtimes.cli.transcript`'s; this module is the session:
the watch, the input loop, the commands.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from rich.console import Console

from core.docops import InvalidOp
from core.jsonvalue import JsonObject, JsonValue
from remote_env.client.sse import parse_sse
from runtimes.cli.asking import QUESTION, Question, answer_of, questions
from runtimes.cli.screen import Screen, interactive_terminal
from runtimes.cli.transcript import Transcript, as_list, as_object
from runtimes.client import ActorClient, ApiError, ClientError, HostUnreachable

__all__ = ["ChatOptions", "Screen", "chat_main", "run_chat", "sse_events"]

_SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
HISTORY = 10  # entries of the existing conversation shown when the chat starts
_HELP = (
    "Enter sends a line (while the agent works, it steers the run). Ctrl-C aborts the "
    "run; Ctrl-C when idle, Ctrl-D or /quit exits. A tool call that needs your approval "
    "asks approve? [y/n/note] (a note denies, and the agent reads it). Commands: /abort, "
    "/compact [instructions], /reset [handoff], /schedules (list; /schedules cancel ID), "
    "/help, /quit."
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


class Chat:
    def __init__(self, options: ChatOptions, client: ActorClient, screen: Screen) -> None:
        self.options = options
        self.client = client
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
        self.question: Question | None = None  # the call the next typed line decides
        self.asked: set[Question] = set()  # calls asked about (or queued to be)

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
            except HostUnreachable as error:
                if not self.reached:  # a wrong URL, or no server: say so and leave
                    self.screen.line(f"error: {error}", "bold red")
                    self.stop(1)
                    return
                if not lost:
                    self.screen.line("[connection lost: reconnecting]", "dim")
                lost = True
            except (ClientError, InvalidOp, ValueError) as error:
                if not lost:
                    self.screen.line(f"[connection lost ({_reason(error)}): reconnecting]", "dim")
                lost = True
            else:
                lost = False
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)

    async def _stream_once(self) -> None:
        # The stream where the host serves one, else the long poll (Lambda cannot stream).
        watch = self.client.watch(self.options.actor, self.options.conversation_id)
        try:
            async with watch:
                first = True
                async for frame in watch:
                    self.reached = True
                    if frame.type in ("view", "replace"):
                        self.view = watch.view
                        self.awaiting.clear()  # a whole view tells the truth about the run
                        fresh = first and not self.created.is_set()
                        self._render(history=HISTORY if fresh else None)
                        if fresh:
                            self.created.set()
                            if not self.transcript.busy:
                                self.screen.prompt()
                        first = False
                    elif frame.type == "delta" and self.view is not None:
                        self.view = watch.view
                        self._render()
                    elif frame.type == "end":
                        why = frame.reason
                        self.screen.line(
                            f"[the server ended the stream ({why}): reconnecting]", "dim"
                        )
                        return
        except ApiError as error:
            self.reached = True
            await self._refused(error)

    async def _refused(self, error: ApiError) -> None:
        code, message = error.code, error.message
        new = code == "unknown_actor" or (code == "not_found" and self.options.conversation_id == 1)
        if error.status == 404 and new and not self.created.is_set():
            self.screen.line("(a new conversation: your first message starts it)", "dim")
            self.screen.prompt()
            await self.created.wait()  # set by the first accepted submission
            return
        if error.status >= 500 or error.status == 423:
            raise error  # the watch reconnects
        raise ChatError(f"{error.status} {code}: {message}")

    def _render(self, *, history: int | None = None) -> None:
        """Show what is new in the view; prompt again once idle after showing something
        (an answer, a reminder's input, a compaction) or after a run ended."""
        if self.view is None:
            return
        was_busy = self.busy
        writes = self.screen.writes
        for entry in as_list(self.view.get("entries")):
            data = as_object(as_object(entry).get("data"))
            self.awaiting.discard(cast(int, data.get("submission")))
        for item in as_list(as_object(as_object(self.view.get("docs")).get("inbox")).get("items")):
            self.awaiting.discard(cast(int, as_object(item).get("id")))
        self.transcript.show(self.view, history=history)
        self._ask()
        if self.aborted is not None and not self.transcript.busy:
            self._aborted()
        elif self.aborting is not None and not self.aborting.done():
            pass  # the abort's answer prompts
        elif self.leave_when_idle and not self.busy:
            self.stop(0)
        elif (was_busy or self.screen.writes != writes) and not self.busy:
            self.screen.prompt()

    def _ask(self) -> None:
        """Ask about the next call waiting for a decision (one question at a time)."""
        waiting = questions(self.view)
        if self.question is not None and self.question not in waiting:
            self.question = None  # decided (here or elsewhere): its event line says how
        if self.question is not None:
            return
        fresh = [q for q in waiting if q not in self.asked]
        if fresh:
            self.question = fresh[0]
            self.asked.add(fresh[0])
            self.screen.line(fresh[0].text(), "bold yellow")
            self.screen.prompt()

    async def _decide(self, text: str) -> None:
        question = self.question
        assert question is not None
        decision, note = answer_of(text)
        try:  # the watch shows the decision (its event); an error is said here
            await self.client.decide(self.options.actor, question.task, decision, note=note)
        except ClientError as error:
            self.screen.line(f"error: {_reason(error)}", "bold red")
        if self.question is question:
            self.question = None
        self._ask()

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
        live = as_object(as_object(as_object(self.view).get("docs")).get("live"))
        if not self.busy or "run" not in live:
            return None, set()
        now = time.monotonic()
        generation = as_object(live.get("generation"))
        retry = as_object(generation.get("retry"))
        at = retry.get("at")
        if isinstance(at, int):
            left = max(0.0, at / 1000 - time.time())
            return f"retry {retry.get('attempt')} in {left:.0f} s", set()
        if questions(self.view):
            return f"waiting for your approval: {QUESTION}", set()
        running = sorted(
            (str(call_id), str(as_object(slot).get("name")))
            for call_id, slot in as_object(live.get("tools")).items()
            if as_object(slot).get("status") in ("pending", "running")
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
            if self.question is not None and not text.startswith("/"):
                await self._decide(text)
            elif text.startswith("/"):
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
            # Told by the harness's events, in order: started, then how it ended
            # (landed, skipped, failed...), so no line of its own here.
            await self._post(f"{self.conversation_path}/compact", body)
        elif name == "/reset":
            body = {"handoff": rest} if rest else {}
            await self._post(f"{self.conversation_path}/reset", body)
        elif name == "/schedules":
            await self._schedules(rest)
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
            # Accepted outside the actor's storage (on AWS another invocation holds it;
            # on the local host its file was still being opened): its entries arrive in
            # the view once the actor admits it.
            self.screen.line("(mailed: accepted; the actor takes it up next)", "dim")
            self.created.set()
            return
        self.transcript.own.add(int(accepted["id"]))
        if accepted.get("status") in ("placed", "queued"):
            self.awaiting.add(int(accepted["id"]))
        self.created.set()
        if busy or accepted.get("status") == "queued":
            self.screen.line("(queued: it steers the current run at its next step)", "dim")

    async def _schedules(self, rest: str) -> None:
        """``/schedules``: the conversation's active schedules, each with its next
        occurrences; ``/schedules cancel ID`` cancels one."""
        path = f"{self.conversation_path}/schedules"
        verb, _, which = rest.partition(" ")
        if verb == "cancel":
            if not which.strip().isdigit():
                self.screen.line("usage: /schedules cancel ID", "yellow")
            elif await self._call("DELETE", f"{path}/{which.strip()}") is not None:
                self.screen.line(f"[schedule {which.strip()} cancelled]", "dim")
            return
        listed = await self._call("GET", path)
        if listed is None:
            return
        if not listed["schedules"]:
            self.screen.line("(no schedules)", "dim")
        for item in listed["schedules"]:
            when = (
                f"cron {item['cron']} {item['timezone']}"
                if item["cron"]
                else (f"every {item['every']}")
            )
            upcoming = ", ".join(item["next"][:2]) or "none"
            self.screen.line(
                f"schedule {item['id']}: {when}: {item['message']!r} — next {upcoming}"
                f" (fired {item['fired']}, skipped {item['skipped']})",
                "dim",
            )

    async def _call(self, method: str, path: str) -> Any:
        try:
            return await self.client.request_json(method, path)
        except ClientError as error:
            self.screen.line(f"error: {_reason(error)}", "bold red")
            return None

    async def _post(self, path: str, body: Mapping[str, Any]) -> Any:
        try:
            return await self.client.request_json("POST", path, json=dict(body))
        except ClientError as error:
            self.screen.line(f"error: {_reason(error)}", "bold red")
            return None

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
        try:
            aborted = await self.client.abort(self.options.actor, self.options.conversation_id)
        except ApiError as error:
            self.screen.line(
                f"error: abort failed: {error.code}: {error.message} (Ctrl-C leaves)", "bold red"
            )
            return
        except ClientError as error:
            self.screen.line(f"error: abort failed: {_reason(error)} (Ctrl-C leaves)", "bold red")
            return
        self.aborting = None  # the next run can be aborted again
        self.awaiting.clear()
        count = aborted.aborted
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
    async with ActorClient(
        options.url, options.token, transport=transport, stream_read_s=options.read_timeout_s
    ) as client:
        chat = Chat(options, client, screen)
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
