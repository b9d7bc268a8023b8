"""Rig for local host tests: a scripted model, a real uvicorn server in a thread or a
process, and storage snapshots to prove that a refused request wrote nothing."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from pydantic import BaseModel

from core.faux import FauxModel, FauxState, faux_error, faux_message, faux_tool_call
from core.harness import (
    HarnessSettings,
    ModelRequest,
    SystemMessage,
    ToolContext,
    ToolResultMessage,
    UserMessage,
    define_extension,
    define_tool,
)
from core.harness.compaction import SUMMARY_PROMPT
from runtimes.actor import ActorConfig
from runtimes.actor.api import ApiConfig
from runtimes.local.host import ActorHost, HostConfig
from runtimes.local.server import HostServer, bind, make_server

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "test-token-0123456789abcdef"
MODEL = "faux/faux-1"
AGENT = {"model": MODEL, "tools": ["echo"]}


class EchoArgs(BaseModel):
    text: str = ""


async def _echo(args: EchoArgs, ctx: ToolContext) -> str:
    return f"echo: {args.text}"


def echo_extension() -> Any:
    tool = define_tool(
        "echo", description="Echo the text.", parameters=EchoArgs, execute=_echo, replay="safe"
    )
    return define_extension("test-tools", tools=[tool])


class GuardArgs(BaseModel):
    path: str


async def _guarded(args: GuardArgs, ctx: ToolContext) -> str:
    # One line per run, flushed at once: the count proves exactly-once across kills.
    with open(args.path, "a") as f:  # noqa: ASYNC230 - one small local append
        f.write("ran\n")
    return f"guarded wrote {args.path}"


def approval_extension(expires_s: float = 3600.0) -> Any:
    """``guarded`` asks for approval every time; ``expiring`` too, and is denied after
    ``expires_s`` undecided. Both append a line to ``path`` when they run."""
    guarded = define_tool(
        "guarded",
        description="Write a line (needs approval).",
        parameters=GuardArgs,
        execute=_guarded,
        approval="always",
    )
    expiring = define_tool(
        "expiring",
        description="Write a line (needs approval; expires).",
        parameters=GuardArgs,
        execute=_guarded,
        approval="always",
        approval_expires_s=expires_s,
    )
    return define_extension("test-approvals", tools=[guarded, expiring])


APPROVAL_AGENT = {"model": MODEL, "tools": ["echo", "guarded", "expiring"]}


def scripted_model() -> FauxModel:
    """An endless FauxModel that acts on the last user message:

    * ``gate:<path>`` — waits until the file exists, then answers ``opened``;
    * ``fail-once:<tag>`` — a retryable error the first time, then answers ``recovered``;
    * ``guard:<path>`` / ``expire:<path>`` — one call of ``guarded`` / ``expiring`` (see
      :func:`approval_extension`), then answers ``<tool> finished: <its result>``;
    * ``tools:<n>`` — ``n`` rounds of one ``echo`` tool call each, then ``tools done``;
    * anything else — answers ``echo: <text>``.

    A compaction's summary request is answered ``summary of <n> lines`` (plus ``focus:
    <instructions>`` when it has some).
    """
    failed: set[str] = set()

    async def step(request: ModelRequest, state: FauxState) -> Any:
        first = request.messages[0] if request.messages else None
        if isinstance(first, SystemMessage) and first.content == SUMMARY_PROMPT:
            prompt = request.messages[-1]
            assert isinstance(prompt, UserMessage)
            body, _, focus = prompt.content.partition("Additional focus: ")
            lines = body.strip().count("\n") - 1  # inside <conversation>...</conversation>
            summary = f"summary of {lines} lines" + (f"; focus: {focus}" if focus else "")
            return faux_message(summary)
        users = [m for m in request.messages if isinstance(m, UserMessage)]
        text = users[-1].content if users else ""
        rounds = 0
        for message in reversed(request.messages):
            if isinstance(message, UserMessage):
                break
            if isinstance(message, ToolResultMessage):
                rounds += 1
        if text.startswith("gate:"):
            gate = text.removeprefix("gate:")
            while not file_exists(gate):  # noqa: ASYNC110 - the test (or another process) makes it
                await asyncio.sleep(0.02)
            return faux_message("opened")
        if text.startswith("fail-once:"):
            if text not in failed:
                failed.add(text)
                return faux_error("overloaded", retryable=True)
            return faux_message("recovered")
        if text.startswith(("guard:", "expire:")):
            name = "guarded" if text.startswith("guard:") else "expiring"
            if rounds == 0:
                path = text.partition(":")[2]
                call_id = f"call_guard_{len(users)}"  # one per input: ids stay unique
                return faux_message(faux_tool_call(name, {"path": path}, id=call_id))
            result = next(m for m in reversed(request.messages) if isinstance(m, ToolResultMessage))
            return faux_message(f"{name} finished: {result.content}")
        if text.startswith("tools:"):
            wanted = int(text.removeprefix("tools:"))
            if rounds < wanted:
                return faux_message(
                    faux_tool_call("echo", {"text": f"r{rounds}"}, id=f"call_{rounds}")
                )
            return faux_message("tools done")
        return faux_message(f"echo: {text}")

    # Endless, and keeping no history of requests: hosts serve many.
    return FauxModel(fallback=step, record_requests=False)


def file_exists(path: str | Path) -> bool:
    return Path(path).exists()


def files(directory: Path) -> list[str]:
    """The actors' files in ``directory``: not the host's admission journal (its file,
    WAL and lock, made when the host starts), which holds no actor."""
    if not directory.exists():
        return []
    return sorted(p.name for p in directory.iterdir() if not p.name.startswith(".admissions."))


def host_config(data_dir: Path, **overrides: Any) -> HostConfig:
    fields: dict[str, Any] = {
        "data_dir": data_dir,
        "models": scripted_model(),
        "extensions": [echo_extension()],
        "default_agent": dict(AGENT),
        "idle_evict_s": 30.0,
        "settings": HarnessSettings(),
    }
    fields.update(overrides)
    local = {k: fields.pop(k) for k in _LOCAL_FIELDS if k in fields}
    return HostConfig(actor=ActorConfig(**fields), **local)


_LOCAL_FIELDS = (
    "data_dir",
    "idle_evict_s",
    "recover_on_start",
    "synchronous",
    "clock",
    "journal_when_opening",
)


# --------------------------------------------------------------------------- servers


@dataclass
class Running:
    url: str
    host: ActorHost
    server: HostServer
    data_dir: Path

    def client(self, token: str | None = TOKEN, timeout: float = 30.0) -> httpx.Client:
        headers = {"authorization": f"Bearer {token}"} if token is not None else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=timeout)


@contextmanager
def serve_in_thread(
    config: HostConfig,
    *,
    max_body_bytes: int = 64 * 1024,
    max_wait_s: float = 60.0,
    heartbeat_s: float = 15.0,
    cors_origins: tuple[str, ...] = (),
) -> Iterator[Running]:
    """A real uvicorn server on a free loopback port, in a background thread."""
    host = ActorHost(config)
    api = ApiConfig(
        TOKEN,
        max_body_bytes=max_body_bytes,
        max_wait_s=max_wait_s,
        heartbeat_s=heartbeat_s,
        cors_origins=cors_origins,
    )
    server = make_server(host, api)
    sock = bind("127.0.0.1", 0)
    port = sock.getsockname()[1]
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "server did not start"
            time.sleep(0.01)
        yield Running(f"http://127.0.0.1:{port}", host, server, config.data_dir)
    finally:
        server.should_exit = True
        thread.join(15)
        sock.close()
        assert not thread.is_alive(), "server did not stop"


def start_host_process(
    data_dir: Path, *extra: str, module: str = "tests.local.host_proc"
) -> tuple[subprocess.Popen[str], str]:
    """A host process (``module``, by default ``tests/local/host_proc.py``) that prints
    its URL as the JSON line ``{"url": ...}``; returns it and its URL."""
    proc = subprocess.Popen(
        [sys.executable, "-u", "-m", module, "--data", str(data_dir), *extra],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    try:
        url = json.loads(line)["url"]
    except (ValueError, KeyError):
        proc.kill()
        rest = proc.communicate(timeout=10)[0]
        raise AssertionError(f"host process did not start: {line}{rest}") from None
    return proc, str(url)


def stop(proc: subprocess.Popen[str]) -> str:
    if proc.poll() is None:
        proc.kill()
    out, _ = proc.communicate(timeout=15)
    return out or ""


# --------------------------------------------------------------------------- storage


def snapshot(db: Path) -> dict[str, list[tuple[Any, ...]]] | None:
    """Every row of every table of an actor's SQLite (read-only), or ``None`` if the
    actor has no file: compares before/after a refused request."""
    if not db.exists():
        return None
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        tables = [
            r[0]
            for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            if not r[0].startswith("sqlite_")
        ]
        return {
            t: sorted(conn.execute(f'SELECT * FROM "{t}"').fetchall(), key=repr) for t in tables
        }
    finally:
        conn.close()


def outcomes(db: Path) -> dict[str, list[tuple[Any, ...]]] | None:
    """:func:`snapshot` without ``meta``: what a clean close may still write there (the
    id and seq counters, stored exactly; they are reserved ahead while the actor is open)
    is bookkeeping, not work."""
    tables = snapshot(db)
    return None if tables is None else {t: rows for t, rows in tables.items() if t != "meta"}


def wait_until(predicate: Any, timeout: float = 10.0, interval: float = 0.02) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(interval)
