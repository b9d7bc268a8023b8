"""``perdure demo``: a travel agent survives ``kill -9`` mid-tools, then a reminder survives
eviction — on embedded defaults, without network or credentials, in well under a minute.

The demo is an orchestrator (this process) driving two real processes over loopback: a
sandbox server (:mod:`remote_env.server`, where ``book_seat``'s shell command runs) and a
worker (:mod:`runtimes.cli.demo.worker`: the local actor host and its HTTP API). Every
step is narrated, every claim is checked, and the demo fails (exit 1) if one does not hold:

1. ``Find a train to Graz and book it`` (request id ``job-42``) → the scripted model calls
   ``search`` (safe) and ``book_seat`` (recoverable, a sandbox command) at once;
2. the worker is SIGKILLed while both run; the task tree is read from its SQLite file;
3. a new worker resumes: ``search`` runs again, ``book_seat`` gets the recorded result of
   the sandbox op (the booking is not made twice), the answer arrives, and re-sending
   ``job-42`` returns the same, already answered submission;
4. a reminder 3 s ahead; the idle actor is evicted (its harness closed, the deadline kept
   in the host's wake heap); the wake re-opens it, the reminder is submitted and answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import httpx
from rich.console import Console
from rich.panel import Panel
from rich.text import Text

from core.harness.events import summarize_recovery
from core.times import iso_time
from remote_env.auth import mint_token, write_new_secret
from runtimes.actor.api import new_api_token
from runtimes.cli.demo.scenario import BOOKINGS_FILE, REMINDER_TEXT
from runtimes.cli.taskview import read_task_graph, render_task_graph

__all__ = ["run_demo"]

ACTOR = "demo"
JOB = "Find a train to Graz and book it"
REMIND = "Remind me in 3 seconds to leave for the station"
T = TypeVar("T")


class DemoFailed(Exception):
    """An expectation did not hold (or a step timed out)."""


@dataclass
class _Checks:
    console: Console
    failed: list[str] = field(default_factory=list)

    def expect(self, ok: bool, claim: str) -> bool:
        mark = Text("  ✓ ", style="green") if ok else Text("  ✗ ", style="bold red")
        self.console.print(mark + Text(claim))
        if not ok:
            self.failed.append(claim)
        return ok


@dataclass
class _Process:
    """A child process; ``events`` receives the JSON lines it prints on stdout."""

    popen: subprocess.Popen[str]
    events: queue.Queue[dict[str, Any]] = field(default_factory=queue.Queue)

    def __post_init__(self) -> None:
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            with contextlib.suppress(ValueError):
                self.events.put(json.loads(line))

    def next_event(self, name: str, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                event = self.events.get(timeout=min(left, 0.5))
            except queue.Empty:
                if self.popen.poll() is not None:
                    raise DemoFailed(f"the worker exited ({self.popen.returncode})") from None
                continue
            if event.get("event") == name:
                return event
        raise DemoFailed(f"the worker did not report {name!r} within {timeout:g} s")

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGKILL)
            self.popen.wait(10)

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _poll(what: str, probe: Callable[[], T | None], timeout: float, every: float = 0.05) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = probe()
        if found is not None:
            return found
        time.sleep(every)
    raise DemoFailed(f"timed out after {timeout:g} s waiting for {what}")


class _Demo:
    def __init__(self, workdir: Path, console: Console) -> None:
        self.dir = workdir
        self.console = console
        self.checks = _Checks(console)
        self.data = workdir / "actors"
        self.sandbox_root = workdir / "sandbox"
        self.secret_file = workdir / "sandbox.secret"
        self.trace = workdir / "search.trace"
        self.token = new_api_token()
        self.logs: list[Path] = []
        self.sandbox: subprocess.Popen[bytes] | None = None
        self.worker: _Process | None = None
        self.api: httpx.Client | None = None

    # ------------------------------------------------------------------ narration

    def step(self, title: str, body: str) -> None:
        self.console.print()
        self.console.print(Panel(Text(body), title=f"[bold]{title}", title_align="left"))

    def note(self, text: str) -> None:
        self.console.print(Text(f"  {text}", style="dim"))

    # ------------------------------------------------------------------ processes

    def _log(self, name: str) -> Any:
        path = self.dir / f"{name}.log"
        self.logs.append(path)
        return path.open("ab")

    def start_sandbox(self) -> str:
        self.sandbox_root.mkdir(parents=True)
        secret = write_new_secret(self.secret_file)
        self.sandbox_secret = secret
        url = f"http://127.0.0.1:{_free_port()}"
        log = self._log("sandbox")
        self.sandbox = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "remote_env.server",
                "--root",
                str(self.sandbox_root),
                "--listen",
                url.removeprefix("http://"),
                "--secret-file",
                str(self.secret_file),
                "--state-dir",
                str(self.dir / "sandbox-state"),
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        )
        log.close()

        def healthy() -> bool | None:
            if self.sandbox is not None and self.sandbox.poll() is not None:
                said = (self.dir / "sandbox.log").read_text(errors="replace").splitlines()
                why = next((line for line in reversed(said) if line.startswith("error:")), "")
                raise DemoFailed(f"the sandbox server exited; see sandbox.log {why}".strip())
            with contextlib.suppress(httpx.HTTPError):
                return httpx.get(f"{url}/v1/health", timeout=1).status_code == 200 or None
            return None

        _poll("the sandbox server", healthy, 30)
        self.sandbox_url = url
        return url

    def start_worker(self) -> str:
        log = self._log("worker")
        popen = subprocess.Popen(
            [
                sys.executable,
                "-u",
                "-m",
                "runtimes.cli.demo.worker",
                "--data",
                str(self.data),
                "--token",
                self.token,
                "--sandbox",
                self.sandbox_url,
                "--sandbox-secret",
                str(self.secret_file),
                "--trace",
                str(self.trace),
                "--idle-evict",
                "1",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
        log.close()
        self.worker = _Process(popen)
        url = str(self.worker.next_event("ready", 60)["url"])
        if self.api is not None:
            self.api.close()
        self.api = httpx.Client(
            base_url=f"{url}/v1/actors/{ACTOR}",
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=90,
        )
        return url

    def close(self) -> None:
        if self.api is not None:
            self.api.close()
        if self.worker is not None:
            self.worker.stop()
        if self.sandbox is not None and self.sandbox.poll() is None:
            self.sandbox.send_signal(signal.SIGTERM)
            try:
                self.sandbox.wait(15)
            except subprocess.TimeoutExpired:
                self.sandbox.kill()

    # ------------------------------------------------------------------ API helpers

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        assert self.api is not None
        response = self.api.request(method, path, **kwargs)
        if response.status_code >= 400:
            raise DemoFailed(f"{method} {path} answered {response.status_code}: {response.text}")
        return response.json()

    def submit(self, content: str, request_id: str) -> dict[str, Any]:
        body = {"type": "input", "content": content, "request_id": request_id}
        result: dict[str, Any] = self.call("POST", "/submissions", json=body)
        return result

    def settled(self, submission: int, timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state: dict[str, Any] = self.call("GET", f"/submissions/{submission}?wait=20")
            if state["status"] in ("done", "unanswered"):
                return state
        raise DemoFailed(f"submission {submission} did not settle within {timeout:g} s")

    def bookings(self) -> list[str]:
        path = self.sandbox_root / ACTOR / BOOKINGS_FILE
        return path.read_text().splitlines() if path.exists() else []

    def searches(self) -> int:
        return len(self.trace.read_text().splitlines()) if self.trace.exists() else 0

    # ------------------------------------------------------------------ the story

    def run(self) -> None:
        sandbox = self.start_sandbox()
        worker = self.start_worker()
        self.step(
            "perdure demo",
            f"A travel agent on the local actor host, its tools' shell on a sandbox host.\n\n"
            f"sandbox server   {sandbox}   (workspace {self.sandbox_root / ACTOR})\n"
            f"worker (host)    {worker}   (actor {ACTOR!r} in {self.data})\n"
            f"model            the scripted demo model (no network, no credentials)",
        )
        self.crash_mid_tools()
        self.recover()
        self.remind_after_eviction()

    def crash_mid_tools(self) -> None:
        accepted = self.submit(JOB, "job-42")
        self.job = int(accepted["id"])
        self.step(
            "1. Submit",
            f"POST /v1/actors/{ACTOR}/submissions  {JOB!r}  (request id job-42)\n"
            f"→ 202 {json.dumps(accepted)}\n\n"
            "The model calls search (safe) and book_seat (recoverable) at once.",
        )

        def both_running() -> list[int] | None:
            graph = self.call("GET", "/tasks")
            tools = [
                t["id"]
                for t in graph["tasks"]
                if t["kind"] == "perdure.tool" and t["state"] == "running"
            ]
            return tools if len(tools) == 2 else None

        tools = _poll("both tool calls to run", both_running, 30)
        op = _poll("the booking to reach the sandbox", lambda: self._booking_op(tools), 30)
        assert self.worker is not None
        pid = self.worker.popen.pid
        self.worker.kill()
        self.step(
            "2. kill -9 mid-tools",
            f"SIGKILL the worker (pid {pid}) while search runs in it and book_seat's command "
            f"(op {op}) runs on the sandbox.",
        )
        graph = asyncio.run(read_task_graph(self.data, ACTOR))
        self.console.print(render_task_graph(ACTOR, graph))
        self.note(
            "The task tree as the crash left it on disk (opening it again turned the "
            "'running' invocations into runnable ones: nobody runs them yet)."
        )
        self.checks.expect(
            sum(t.kind == "perdure.tool" for t in graph.tasks) == 2,
            "both tool tasks are in storage, unfinished",
        )
        self.checks.expect(self.bookings() == [], "no booking has been written yet")

    def _booking_op(self, tool_tasks: list[int]) -> str | None:
        token = mint_token(self.sandbox_secret, ACTOR, 60)
        for task in tool_tasks:
            op = f"{task}:book_1"
            response = httpx.get(
                f"{self.sandbox_url}/v1/ops/{op}",
                headers={"Authorization": f"Bearer {token}"},
                timeout=5,
            )
            if response.status_code == 202:  # recorded and running
                return op
        return None

    def recover(self) -> None:
        self.start_worker()
        self.step(
            "3. Restart and resume",
            "A new worker opens the same SQLite file and resumes: search (safe) runs "
            "again; book_seat (recoverable) asks the sandbox for its op and gets the "
            "recorded result instead of booking again.",
        )
        state = self.settled(self.job)
        answer = (state.get("answer") or {}).get("text", "")
        events = self.call("GET", "/conversations/1/view")["docs"].get("events", {})
        recovered = [e for e in events.get("items", []) if e.get("kind") == "tool_recovery"]
        told = summarize_recovery(sorted(recovered, key=lambda e: str(e.get("tool"))))
        self.note(f"[recovered after restart: {told}]  (the conversation's events, as chat shows)")
        self.checks.expect(
            told == "book_seat recovered from the sandbox, search reran",
            "the events say what was recovered and how",
        )
        self.console.print(Panel(Text(answer), title="answer", title_align="left"))
        self.checks.expect(state["status"] == "done", "job-42 is answered after the crash")
        bookings = self.bookings()
        self.checks.expect(
            len(bookings) == 1, f"the seat was booked exactly once ({len(bookings)} booking(s))"
        )
        self.checks.expect(
            bool(bookings) and bookings[0].split("ref=")[-1] in answer,
            "the answer quotes the booking the sandbox recorded",
        )
        self.checks.expect(self.searches() == 2, "search ran again after the restart")
        again = self.submit(JOB, "job-42")
        self.checks.expect(
            again["id"] == self.job and again["status"] == "done",
            "re-sending job-42 returns the same, already answered submission",
        )

    def remind_after_eviction(self) -> None:
        accepted = self.submit(REMIND, "job-43")
        state = self.settled(int(accepted["id"]))
        answer = (state.get("answer") or {}).get("text", "")
        self.step(
            "4. A reminder across eviction",
            f"{REMIND!r} (request id job-43)\n→ {answer}",
        )
        timers = self.call("GET", "/timers").get("timers", [])
        reminders = [t for t in timers if t.get("kind") == "perdure.reminder"]
        self.checks.expect(len(reminders) == 1, "one reminder is pending")
        due = int(reminders[0]["at"]) if reminders else 0
        assert self.worker is not None
        evicted = self.worker.next_event("evicted", 15)
        self.note(f"actor evicted: harness closed; next wake at {_when(evicted['wake_at'])} (heap)")
        self.checks.expect(evicted["wake_at"] == due, "the wake heap holds the reminder's time")
        woken = self.worker.next_event("activated", 30)
        self.note(f"actor re-opened at {_when(woken['at'])} for the reminder due at {_when(due)}")
        self.checks.expect(
            woken["actor"] == ACTOR and woken["at"] >= due,
            "the wake re-opened the actor when the reminder was due, not before",
        )

        def reminder_answered() -> tuple[str, str] | None:
            entries = self.call("GET", "/conversations/1/view")["entries"]
            for i, entry in enumerate(entries):
                message = entry.get("message") or {}
                if entry["kind"] == "user" and message.get("content") == REMINDER_TEXT:
                    answers = [e for e in entries[i + 1 :] if e["kind"] == "assistant"]
                    if answers:
                        text = "".join(b.get("text", "") for b in answers[0]["message"]["content"])
                        return str(message["content"]), text
            return None

        said, reply = _poll("the reminder's answer", reminder_answered, 30, every=0.2)
        self.console.print(
            Panel(Text(f"reminder: {said}\nanswer:   {reply}"), title="fired", title_align="left")
        )
        self.checks.expect(not self.call("GET", "/timers").get("timers"), "no timer is left")


def _when(ms: object) -> str:
    """Epoch ms for people: ISO-8601 in this terminal's zone, with its offset."""
    if not isinstance(ms, int):
        return str(ms)
    return iso_time(ms, datetime.now().astimezone().tzinfo)


@contextlib.contextmanager
def _workdir(keep: Path | None) -> Iterator[Path]:
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=False)
        yield keep
        return
    path = Path(tempfile.mkdtemp(prefix="perdure-demo-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def run_demo(workdir: Path | None = None, console: Console | None = None) -> bool:
    """Run the demo (in ``workdir``, kept afterwards, or a temporary directory); True when
    every expectation held."""
    console = console or Console(width=int(os.environ.get("COLUMNS", "100")))
    started = time.monotonic()
    with _workdir(workdir) as path:
        demo = _Demo(path, console)
        try:
            demo.run()
        except DemoFailed as error:
            demo.checks.failed.append(str(error))
            console.print(Text(f"  ✗ {error}", style="bold red"))
            for log in demo.logs:
                if log.exists():
                    tail = log.read_text(errors="replace")[-2000:]
                    console.print(Panel(Text(tail), title=str(log.name), title_align="left"))
        finally:
            demo.close()
        elapsed = time.monotonic() - started
        if demo.checks.failed:
            console.print(
                Panel(
                    Text("\n".join(demo.checks.failed)),
                    title=f"[bold red]demo failed after {elapsed:.1f} s",
                    title_align="left",
                )
            )
            return False
        console.print(
            Panel(
                Text(
                    "Crash mid-tools: nothing lost, nothing done twice. Reminder after "
                    "eviction: fired once, on time.",
                ),
                title=f"[bold green]demo passed in {elapsed:.1f} s",
                title_align="left",
            )
        )
        return True
