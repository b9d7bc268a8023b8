"""``perdure ls`` / ``perdure log`` against a real host, and the command line's own
manners: ``--version``, ``-h`` everywhere, flags shown without a ``<bool>`` placeholder."""

from __future__ import annotations

import re
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import pytest
from typer.testing import CliRunner

from runtimes.cli.history import format_entry, iso_time
from runtimes.cli.main import app
from tests.local.support import TOKEN, Running, host_config, serve_in_thread

ISO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{3})?Z"


@pytest.fixture
def running(tmp_path: Path) -> Iterator[Running]:
    with serve_in_thread(host_config(tmp_path / "data")) as r:
        yield r


def answered(running: Running, actor: str, content: str) -> dict[str, object]:
    with running.client() as c:
        r = c.post(f"/v1/actors/{actor}/submissions", json={"type": "input", "content": content})
        state = c.get(f"/v1/actors/{actor}/submissions/{r.json()['id']}", params={"wait": 20})
        value: dict[str, object] = state.json()
        assert value["status"] == "done", value
        return value


def cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})
    return result.exit_code, result.output


def test_ls_lists_actors_and_an_actors_conversations(running: Running) -> None:
    answered(running, "bob", "hi")
    first = answered(running, "alice", "hello")
    with running.client() as c:
        entry = first["answer"]["entry"]["id"]  # type: ignore[index]
        assert c.post("/v1/actors/alice/conversations/1/fork", json={"at_entry": entry}).is_success
    code, out = cli("ls", "--url", running.url, "--token", TOKEN)
    assert code == 0 and out.split() == ["alice", "bob"]
    code, out = cli("ls", "alice", "--url", running.url, "--token", TOKEN)
    assert code == 0, out
    lines = out.splitlines()
    assert lines[0].split() == ["1", "root"]
    assert re.fullmatch(rf"\s*\d+  fork of 1 at entry {entry}", lines[1]), lines


def test_log_prints_the_transcript_with_roles_tools_and_iso_times(running: Running) -> None:
    answered(running, "alice", "tools:1")
    code, out = cli("log", "alice", "--url", running.url, "--token", TOKEN)
    assert code == 0, out
    assert re.search(rf"^{ISO}  #\d+  user\n    tools:1$", out, re.M), out
    assert re.search(r'^    → echo \{"text": "r0"\}$', out, re.M), out
    assert re.search(rf"^{ISO}  #\d+  ← echo\n    echo: r0$", out, re.M), out
    assert re.search(r"^    tools done$", out, re.M), out
    assert re.search(r"^    \(\d+ in · \d+ out · \$0\.000000\)$", out, re.M), out
    # The same with the conversation named, and through PERDURE_URL / PERDURE_TOKEN.
    result = CliRunner().invoke(
        app, ["log", "alice", "1"], env={"PERDURE_URL": running.url, "PERDURE_TOKEN": TOKEN}
    )
    assert result.exit_code == 0 and result.output == out


def test_ls_and_log_fail_with_one_line_saying_why(running: Running) -> None:
    code, out = cli("ls", "--url", running.url, "--token", "wrong-token-0123456789")
    assert code == 1 and "refused the token" in out and len(out.strip().splitlines()) == 1
    code, out = cli("log", "nobody", "--url", running.url, "--token", TOKEN)
    assert code == 1 and "no actor 'nobody'" in out and "unknown_actor" in out
    answered(running, "alice", "hello")
    code, out = cli("log", "alice", "7", "--url", running.url, "--token", TOKEN)
    assert code == 1 and "404 not_found" in out
    code, out = cli("log", "../etc", "--url", running.url, "--token", TOKEN)
    assert code == 1 and "actor ids match" in out
    dead = running.url.rsplit(":", 1)[0] + ":9"  # a port nothing listens on
    code, out = cli("ls", "--url", dead, "--token", TOKEN)
    assert code == 1 and "cannot reach" in out
    code, out = cli("ls", "--url", running.url)
    assert code == 2 and "--token" in out


def test_inspect_url_reads_the_task_graph_through_the_client(running: Running) -> None:
    answered(running, "alice", "hello")
    code, out = cli("inspect", "alice", "--url", running.url, "--token", TOKEN)
    assert code == 0 and "actor alice" in out and "no live tasks" in out, out
    code, out = cli("inspect", "nobody", "--url", running.url, "--token", TOKEN)
    assert code == 1 and "404: no actor 'nobody'" in out, out
    dead = running.url.rsplit(":", 1)[0] + ":9"
    code, out = cli("inspect", "alice", "--url", dead, "--token", TOKEN)
    assert code == 1 and "cannot reach" in out, out


def test_version_h_and_flags_without_a_bool_placeholder() -> None:
    code, out = cli("--version")
    assert code == 0 and out.strip() == f"perdure {version('perdure')}"
    assert cli("-V")[1] == out
    code, short = cli("-h")
    assert code == 0 and short == cli("--help")[1] and "Commands:" in short
    commands = re.findall(r"^  (\w+)  ", short.split("Commands:")[1], re.M)
    assert {"dev", "chat", "inspect", "ls", "log", "sandbox", "demo"} <= set(commands)
    for command in commands:
        code, out = cli(command, "-h")
        assert code == 0, (command, out)
        assert "<bool>" not in out, (command, out)
    code, out = cli("sandbox", "-h")
    assert re.search(r"^  --unconfined\s+run commands WITHOUT", out, re.M), out
    assert re.search(r"^  --run-as-root\s+a server running as root runs commands", out, re.M), out


def test_entry_formatting_of_kinds_it_does_not_know_and_of_errors() -> None:
    assert iso_time(0) == "1970-01-01T00:00:00Z" and iso_time(None) == "-"
    event = {"id": 9, "kind": "perdure.event", "created_at": 0, "data": {"what": "recovered"}}
    assert format_entry(event) == '1970-01-01T00:00:00Z  #9  [perdure.event] {"what": "recovered"}'
    aborted = {
        "id": 3,
        "kind": "assistant",
        "created_at": 0,
        "message": {"role": "assistant", "content": [], "stop_reason": "aborted", "usage": {}},
    }
    assert format_entry(aborted).endswith("(0 in · 0 out · $0.000000 · aborted)")
    failed = {
        "id": 4,
        "kind": "tool_result",
        "created_at": 0,
        "message": {
            "role": "tool_result",
            "tool_name": "bash",
            "content": "a\nb",
            "is_error": True,
        },
    }
    assert format_entry(failed) == "1970-01-01T00:00:00Z  #4  ← bash (error)\n    a\n    b"
