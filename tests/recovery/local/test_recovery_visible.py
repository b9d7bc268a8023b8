"""kill -9 of ``perdure dev`` mid-tool, then a restart: the chat, the dev log and the
watch stream say what was recovered and how. Real processes throughout: a sandbox
server, ``perdure dev`` against an OpenAI-compatible server on loopback, ``perdure
chat`` in a pseudo-terminal."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pexpect
import pytest

from tests.local.support import ROOT
from tests.local.test_cli import start_dev
from tests.models.fake_openai import FakeOpenAI, Stream, finish, text, tool_call, usage
from tests.remote_env.support import server_process

BOOK = "sleep 2; echo booked >> seats.txt; echo seat booked"


@pytest.fixture
def model() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI()
    server.start()
    yield server
    server.stop()


def _live_tools(url: str, token: str) -> dict[str, dict[str, object]]:
    r = httpx.get(
        f"{url}/v1/actors/trip/conversations/1/view",
        headers={"authorization": f"Bearer {token}"},
        timeout=10,
    )
    if r.status_code != 200:
        return {}
    tools = r.json()["docs"].get("live", {}).get("tools", {})
    return tools if isinstance(tools, dict) else {}


@pytest.mark.timeout(180)
def test_kill_9_mid_tool_shows_what_was_recovered(tmp_path: Path, model: FakeOpenAI) -> None:
    model.script(
        Stream(
            [
                tool_call(0, id="call_ls", name="ls", arguments='{"path": "."}'),
                tool_call(1, id="call_bash", name="bash", arguments=json.dumps({"command": BOOK})),
                finish("tool_calls"),
                usage(50, 20),
            ]
        ),
        Stream([text("Your seat is booked."), finish("stop"), usage(80, 6)]),
    )
    with server_process(tmp_path) as sandbox:  # confined, as a quick start runs it
        args = (
            *("--model", "openai/fake-model", "--api-base", model.base_url),
            *("--sandbox", sandbox.url, "--sandbox-secret", str(sandbox.secret_file)),
            *("--token-file", str(tmp_path / "token"), "--log-format", "json"),
        )
        env = {"OPENAI_API_KEY": "sk-test", "PERDURE_TOKEN": "", "PERDURE_MODEL": ""}
        data = tmp_path / "data"
        first, url, token, _ = start_dev(data, *args, env=env)
        headers = {"authorization": f"Bearer {token}"}
        try:
            r = httpx.post(
                f"{url}/v1/actors/trip/submissions",
                json={"type": "input", "content": "book me a seat", "request_id": "job-1"},
                headers=headers,
                timeout=10,
            )
            assert r.status_code == 202, r.text
            submission = r.json()["id"]
            deadline = time.monotonic() + 30
            while _live_tools(url, token).get("call_bash", {}).get("status") != "running":
                assert time.monotonic() < deadline, "bash never started"
                time.sleep(0.05)
            time.sleep(0.3)  # the command runs in the sandbox
        finally:
            first.send_signal(signal.SIGKILL)
            first.communicate(timeout=20)

        second, url, token2, _ = start_dev(data, *args, env=env)
        try:
            assert token2 == token  # --token-file: attached clients keep working
            r = httpx.post(
                f"{url}/v1/actors/trip/submissions",
                json={"type": "input", "content": "book me a seat", "request_id": "job-1"},
                headers=headers,
                timeout=10,
            )  # the actor is activated (and recovers) on its first request
            assert r.json()["id"] == submission
            r = httpx.get(
                f"{url}/v1/actors/trip/submissions/{submission}",
                params={"wait": 30},
                headers=headers,
                timeout=40,
            )
            assert r.json()["status"] == "done", r.text
            assert (sandbox.root / "trip" / "seats.txt").read_text() == "booked\n"  # once

            # The watch stream (what the inspector reads) carries the events in its view.
            with httpx.stream(
                "GET",
                f"{url}/v1/actors/trip/conversations/1/watch",
                headers=headers,
                timeout=10,
            ) as stream:
                first_data = next(line for line in stream.iter_lines() if line.startswith("data:"))
            events = json.loads(first_data[5:])["value"]["docs"]["events"]["items"]
            kinds = [e["kind"] for e in events]
            assert kinds[0] == "restart"
            recovered = {e["tool"]: e for e in events if e["kind"] == "tool_recovery"}
            # ``ls`` had finished before the kill: only ``bash`` was cut short.
            assert set(recovered) == {"bash"} and recovered["bash"]["how"] == "recovered"
            assert recovered["bash"]["op"].endswith(":call_bash")

            # The chat, attaching after the restart, tells the story in one line.
            child = pexpect.spawn(
                sys.executable,
                ["-m", "runtimes.cli.main", "chat", "trip", "--url", url, "--token", token],
                cwd=str(ROOT),
                env={**os.environ, "PYTHONPATH": str(ROOT), "TERM": "dumb", "COLUMNS": "200"},
                encoding="utf-8",
                timeout=60,
                dimensions=(50, 200),
            )
            try:
                # History first, then the latest restart's story.
                child.expect_exact("agent> Your seat is booked.")
                child.expect_exact("[recovered after restart: bash recovered from the sandbox]")
                child.expect_exact("you> ")
                child.sendline("/quit")
                child.expect(pexpect.EOF)
            finally:
                child.close(force=True)
        finally:
            second.send_signal(signal.SIGTERM)
            out, _ = second.communicate(timeout=20)
    logged = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    said = [line["message"] for line in logged if line["kind"] == "event"]
    assert any("recovering after restart: bash (task" in m for m in said), said
    assert any("recovered after restart: bash recovered from the sandbox (op" in m for m in said)
    assert any(line["kind"] == "model" and line["output_tokens"] == 6 for line in logged)
    assert any(line["kind"] == "tool" and line["tool"] == "bash" for line in logged)
    requests = [line for line in logged if line["kind"] == "request"]
    assert any(line["status"] == 202 for line in requests)
    # The app's start-up walk of its routes (a request no client sent) is not logged.
    assert not any(line["path"] == "/v1/-" for line in requests), requests
