"""``perdure dev`` and ``perdure inspect`` end to end."""

from __future__ import annotations

import asyncio
import io
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from rich.console import Console
from typer.testing import CliRunner

from core.harness import HarnessSettings, RetrySettings
from runtimes.actor.api.schemas import TaskGraph, TaskNode
from runtimes.cli.dev import choose_model
from runtimes.cli.main import app
from runtimes.cli.preflight import PreflightError
from runtimes.cli.taskview import render_task_graph
from runtimes.local.host import ActorHost
from tests.local.support import AGENT, ROOT, host_config
from tests.models.fake_openai import FakeOpenAI, Stream, finish, text


def start_dev(
    data: Path, *args: str, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[str], str, str, list[str]]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-u",
            "-m",
            "runtimes.cli.main",
            "dev",
            "--port",
            "0",
            "--data",
            str(data),
            *args,
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200", **(env or {})},
    )
    assert proc.stdout is not None
    lines: list[str] = []
    url = token = ""
    while not token:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"perdure dev ended early: {lines}")
        lines.append(line.rstrip("\n"))
        if line.startswith("url:"):
            url = line.split()[1]
        if line.startswith("token:"):
            token = line.split()[1]
    return proc, url, token, lines


def ask(url: str, token: str, actor: str, content: str) -> dict[str, object]:
    with httpx.Client(base_url=url, headers={"authorization": f"Bearer {token}"}, timeout=30) as c:
        r = c.post(f"/v1/actors/{actor}/submissions", json={"type": "input", "content": content})
        assert r.status_code == 202, r.text
        r = c.get(f"/v1/actors/{actor}/submissions/{r.json()['id']}", params={"wait": 20})
        answer: dict[str, object] = r.json()
        return answer


def test_dev_serves_the_demo_model_and_stops_cleanly_on_sigint(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = {"PERDURE_MODEL": "", "PERDURE_TOKEN": ""}
    proc, url, token, lines = start_dev(data, env=env)
    try:
        assert "scripted demo model" in lines[0]
        assert url.startswith("http://127.0.0.1:") and len(token) >= 16
        # The inspector's address is printed, and it serves the page.
        ui = [line.split()[1] for line in lines if line.startswith("ui:")]
        assert ui == [f"{url}/ui"], lines
        assert "API token" in httpx.get(ui[0]).text
        state = ask(url, token, "demo", "hello there")
        assert state["status"] == "done"
        assert "hello there" in str(state["answer"]) and "demo model" in str(state["answer"])
        shown = CliRunner().invoke(app, ["inspect", "demo", "--url", url, "--token", token])
        assert shown.exit_code == 0, shown.output
        assert "actor demo" in shown.output and "no live tasks" in shown.output
        # While the host runs, the actor's storage is locked.
        locked = CliRunner().invoke(app, ["inspect", "demo", "--data", str(data)])
        assert locked.exit_code == 1 and "use --url" in locked.output
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=20)
        assert proc.returncode == 0 and "stopped" in out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    shown = CliRunner().invoke(app, ["inspect", "demo", "--data", str(data)])
    assert shown.exit_code == 0 and "no live tasks" in shown.output


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI()
    server.start()
    yield server
    server.stop()


@pytest.mark.parametrize("ends", ["returns", "raises KeyboardInterrupt"])
def test_dev_says_stopped_however_the_server_s_shutdown_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ends: str
) -> None:
    """After a SIGINT uvicorn either returns or re-raises it as KeyboardInterrupt,
    depending on when asyncio's runner sees the signal: both are a clean stop."""
    import runtimes.cli.dev

    def serve_until_sigint(options: object, say: object) -> None:
        if ends != "returns":
            raise KeyboardInterrupt

    monkeypatch.setattr(runtimes.cli.dev, "run_dev", serve_until_sigint)
    result = CliRunner().invoke(app, ["dev", "--data", str(tmp_path)])
    assert result.exit_code == 0 and result.output.strip().endswith("stopped"), result.output


def test_dev_talks_to_a_litellm_model(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    fake_openai.script(Stream([text("Hi from "), text("the model"), finish("stop")]))
    proc, url, token, lines = start_dev(
        tmp_path / "data",
        "--model",
        "openai/fake-model",
        "--api-base",
        fake_openai.base_url,
        env={"OPENAI_API_KEY": "sk-test"},
    )
    try:
        assert lines[0] == "perdure dev: model openai/fake-model via litellm"
        state = ask(url, token, "a", "hello")
        assert state["status"] == "done", state
        assert state["answer"]["text"] == "Hi from the model"  # type: ignore[index]
        assert fake_openai.last_body()["model"] == "fake-model"
        # The agent can set reminders and schedules: dev installs the reminders extension.
        tools = [t["function"]["name"] for t in fake_openai.last_body().get("tools", [])]
        assert tools == ["remind", "schedule", "cancel_schedule"]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=20)


def test_without_credentials_dev_refuses_the_model_instead_of_the_demo_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert choose_model(None).demo
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(PreflightError, match="needs OPENAI_API_KEY: export OPENAI_API_KEY="):
        choose_model("openai/gpt-4o-mini")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    choice = choose_model("openai/gpt-4o-mini")
    assert not choice.demo and choice.model_id == "openai/gpt-4o-mini"
    info = choice.models.info("openai/gpt-4o-mini")
    assert info is not None and info.context_window > 0


async def _store_a_waiting_actor(data: Path) -> None:
    # The generation fails retryably and waits ten minutes for its retry: a live task
    # with a durable deadline stays in storage.
    settings = HarnessSettings(retry=RetrySettings(base_delay_ms=600_000))
    host = ActorHost(host_config(data, settings=settings))
    await host.start()
    try:
        async with host.use("a", create=True) as harness:
            root = await harness.root(agent=AGENT)
            await root.submit("fail-once:inspect")
        async with host.use("a") as harness:
            while not any(v.state == "waiting" for v in harness.inspect().tasks):  # noqa: ASYNC110
                await asyncio.sleep(0.01)
    finally:
        await host.close()


def test_inspect_prints_the_task_tree_of_a_stored_actor(tmp_path: Path) -> None:
    asyncio.run(_store_a_waiting_actor(tmp_path))
    shown = CliRunner().invoke(
        app, ["inspect", "a", "--data", str(tmp_path)], env={"COLUMNS": "200"}
    )
    assert shown.exit_code == 0, shown.output
    assert "conversation 1" in shown.output
    assert "perdure.generation" in shown.output and "waiting" in shown.output
    assert "until 20" in shown.output  # ISO-8601 (with the zone), not epoch ms
    assert "paused: read from its storage, where nothing runs" in shown.output
    missing = CliRunner().invoke(app, ["inspect", "nobody", "--data", str(tmp_path)])
    assert missing.exit_code == 1 and "no actor" in missing.output
    neither = CliRunner().invoke(app, ["inspect", "a"])
    assert neither.exit_code != 0


def test_inspect_shows_a_tool_task_s_tool_arguments_and_age() -> None:
    graph = TaskGraph(
        scheduling="running",
        tasks=[
            TaskNode(
                id=7,
                kind="perdure.tool",
                conversation_id=1,
                state="running",
                status="running",
                background=False,
                abort_requested=False,
                started_at=1_000_000,
                tool="bash",
                arguments={"command": "make test"},
            )
        ],
    )
    out = io.StringIO()
    Console(file=out, width=200).print(render_task_graph("a", graph, now_ms=1_000_000 + 75_000))
    assert "running: served by a live host" in out.getvalue()
    assert '#7 perdure.tool bash {"command": "make test"}  running for 1 min 15 s' in out.getvalue()
