"""``perdure chat`` in a pseudo-terminal (pexpect) against a host process.

The host's model streams slowly and has a tool round that waits for a gate file (see
``tests.local.chat_host``). Every wait is an ``expect`` on what the chat prints, never a
sleep; timeouts are generous for a loaded machine.
"""

from __future__ import annotations

import io
import os
import socket
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pexpect
import pytest
from rich.console import Console

from core.times import iso_time
from runtimes.cli.chat import Chat, ChatOptions, Screen, sse_events
from runtimes.cli.transcript import Transcript
from runtimes.client import ActorClient
from tests.local.support import ROOT, TOKEN, start_host_process, stop

TIMEOUT = 60
LOCAL = datetime.now().astimezone().tzinfo


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A chat host process: its URL and the gate file its ``wait_gate`` tool waits for."""
    root = tmp_path_factory.mktemp("chat")
    gate = root / "gate"
    proc, url = start_host_process(
        root / "data", "--gate", str(gate), module="tests.local.chat_host"
    )
    try:
        yield url, gate
    finally:
        stop(proc)


def chat(url: str, actor: str, token: str = TOKEN) -> Any:
    child = pexpect.spawn(
        sys.executable,
        ["-m", "runtimes.cli.main", "chat", actor, "--url", url, "--token", token],
        cwd=str(ROOT),
        env={**os.environ, "PYTHONPATH": str(ROOT), "TERM": "dumb", "COLUMNS": "200"},
        encoding="utf-8",
        codec_errors="replace",
        timeout=TIMEOUT,
        dimensions=(50, 200),
    )
    return child


def api(url: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"authorization": f"Bearer {TOKEN}"}, timeout=30)


def finish(child: Any) -> int:
    child.expect(pexpect.EOF)
    child.close()
    status: int = child.exitstatus
    return status


def test_chat_streams_the_answer_shows_tools_and_steers_the_run(host: tuple[str, Path]) -> None:
    url, gate = host
    child = chat(url, "alice")
    try:
        child.expect_exact("your first message starts it")
        child.expect_exact("you> ")
        child.sendline("plan the trip")
        child.expect_exact("agent> Checking the gate first.")
        child.expect_exact('⚙ wait_gate {"why": "the plan"}')
        # Typed while the agent works: sent as a steer, queued until the tool round ends.
        child.sendline("also mention steering")
        child.expect_exact("(queued: it steers the current run")
        gate.touch()
        child.expect_exact("↳ gate open (the plan)")
        child.expect_exact("agent> steered: also mention steering")
        child.expect_exact("you> ")
        child.sendline("/quit")
        assert finish(child) == 0
    finally:
        child.close(force=True)
    # The steer joined the run: one answer settles both inputs.
    with api(url) as c:
        entries = c.get("/v1/actors/alice/conversations/1/view").json()["entries"]
        assert [e["kind"] for e in entries] == [
            "user",
            "assistant",
            "tool_result",
            "user",
            "assistant",
        ]
        submissions = [
            c.get(f"/v1/actors/alice/submissions/{e['data']['submission']}").json()
            for e in entries
            if e["kind"] == "user"
        ]
        assert [s["status"] for s in submissions] == ["done", "done"]
        assert {s["answer"]["entry"]["id"] for s in submissions} == {entries[-1]["id"]}
    # A new chat on the same conversation shows the recent history; Ctrl-D leaves.
    child = chat(url, "alice")
    try:
        child.expect_exact("» plan the trip")
        child.expect_exact("agent> steered: also mention steering")
        child.expect_exact("you> ")
        child.sendeof()
        assert finish(child) == 0
    finally:
        child.close(force=True)


def test_ctrl_c_aborts_a_streaming_answer_then_exits_when_idle(host: tuple[str, Path]) -> None:
    url, _ = host
    child = chat(url, "bob")
    try:
        child.expect_exact("you> ")
        child.sendline("long")
        child.expect_exact("agent> word0 ")
        child.expect_exact("word5 ")  # streamed: the answer is far from done (word399)
        child.sendintr()
        child.expect_exact("[aborted]")
        child.expect_exact("[run aborted (1 task)]")
        child.expect_exact("you> ")
        assert "word399" not in child.before
        # Still usable after an abort.
        child.sendline("still there?")
        child.expect_exact("agent> echo: still there?")
        child.expect_exact("you> ")
        child.sendintr()  # idle: Ctrl-C leaves
        assert finish(child) == 0
    finally:
        child.close(force=True)
    with api(url) as c:
        entries = c.get("/v1/actors/bob/conversations/1/view").json()["entries"]
        aborted = entries[1]
        assert aborted["kind"] == "assistant"
        assert aborted["message"]["stop_reason"] == "aborted"
        assert "word5 " in aborted["message"]["content"][0]["text"]
        sub = c.get(f"/v1/actors/bob/submissions/{entries[0]['data']['submission']}").json()
        assert (sub["status"], sub["reason"]) == ("unanswered", "aborted")


def test_a_compact_with_nothing_to_compact_ends_and_says_so(host: tuple[str, Path]) -> None:
    url, _ = host
    child = chat(url, "carol")
    try:
        child.expect_exact("you> ")
        child.sendline("hello")
        child.expect_exact("agent> echo: hello")
        child.expect_exact("you> ")
        child.sendline("/compact")
        child.expect(r"\[compaction started \(manual\) \(task (\d+)\)\]")
        task = child.match.group(1)
        # Its end follows: it does not stay "started" forever.
        child.expect_exact(f"[compaction skipped (nothing to compact) (task {task})]")
        child.expect_exact("you> ")
        child.sendline("/quit")
        assert finish(child) == 0
        assert "compaction started" not in child.before  # told once, in order
    finally:
        child.close(force=True)


def test_a_bad_token_or_an_unreachable_url_is_an_error_and_exit_code_1(
    host: tuple[str, Path],
) -> None:
    url, _ = host
    child = chat(url, "alice", token="wrong-token-0123456789")
    try:
        child.expect_exact("error: 401 unauthorized")
        assert finish(child) == 1
    finally:
        child.close(force=True)
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}"
    child = chat(closed, "alice")
    try:
        child.expect_exact(f"error: cannot reach {closed}")
        assert finish(child) == 1
    finally:
        child.close(force=True)


# --------------------------------------------------------------------------- rendering


def _lines(*items: str) -> Any:
    async def gen() -> Any:
        for item in items:
            yield item

    return gen()


async def test_sse_events_parse_events_ids_and_multiline_data_and_skip_comments() -> None:
    lines = _lines(
        "event: view", 'data: {"type": "view"}', "", ": ping", "",
        "event: delta", "id: 7", 'data: {"a":', "data: 1}", "", "data: 2", "",
    )  # fmt: skip
    events = [e async for e in sse_events(lines)]
    assert events == [("view", {"type": "view"}), ("delta", {"a": 1}), ("message", 2)]


def _user(id: int, text: str, submission: int) -> dict[str, Any]:
    message = {"role": "user", "content": text}
    return {"id": id, "kind": "user", "message": message, "data": {"submission": submission}}


def _assistant(id: int, task: int, *blocks: Any, stop: str = "stop") -> dict[str, Any]:
    content = [{"type": "text", "text": b} if isinstance(b, str) else b for b in blocks]
    message = {"role": "assistant", "content": content, "stop_reason": stop}
    return {"id": id, "kind": "assistant", "message": message, "by_task_id": task}


def _view(entries: list[Any], live: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"entries": entries, "docs": {"live": live or {}, "inbox": {"items": []}}}


def _partial(task: int, text: str) -> dict[str, Any]:
    partial = {"role": "assistant", "content": [{"type": "text", "text": text}]}
    return {"run": {}, "generation": {"task": task, "partial": partial}}


def test_the_transcript_streams_partials_then_finishes_with_the_entry() -> None:
    out = io.StringIO()
    screen = Screen(Console(file=out, width=200, color_system=None, soft_wrap=True))
    t = Transcript(screen, own={10})
    asked = _user(1, "hi", 10)
    t.show(_view([asked], _partial(5, "Hel")))
    assert t.busy and out.getvalue() == "agent> Hel"
    t.show(_view([asked], _partial(5, "Hello, wor")))
    screen.write("\n(queued)\n")  # other output in between: the stream is labelled again
    t.show(_view([asked], _partial(5, "Hello, world")))
    call = {"type": "tool_call", "id": "c1", "name": "echo", "arguments": {"text": "x"}}
    result = {
        "id": 4,
        "kind": "tool_result",
        "message": {"role": "tool_result", "content": "one\ntwo\nthree\nfour", "is_error": False},
    }
    t.show(_view([asked, _assistant(3, 5, "Hello, world!", call), result], {"run": {}}))
    retry = {"task": 6, "retry": {"at": 1, "attempt": 2, "error": "overloaded"}}
    t.show(_view([], {"run": {}, "generation": retry}))
    t.show(_view([_user(7, "from a reminder", 11), _assistant(8, 6, stop="aborted")]))
    assert not t.busy
    assert out.getvalue().splitlines() == [
        "agent> Hello, wor",
        "(queued)",
        "agent> … ld!",
        '  ⚙ echo {"text": "x"}',
        "  ↳ one",
        "    two",
        "    three",
        "    (+1 lines)",
        f"[overloaded: retrying (attempt 2) at {iso_time(1, LOCAL)}]",
        "» from a reminder",
        "agent> [aborted]",
    ]


def test_a_retry_of_a_later_round_of_the_same_generation_is_shown_too() -> None:
    """One generation task makes every model round of a run: the second round's retry
    has the task and attempt number of the first round's, and is still shown."""
    out = io.StringIO()
    screen = Screen(Console(file=out, width=200, color_system=None, soft_wrap=True))
    t = Transcript(screen, own={10})
    for n, at in ((1, 1000), (2, 9000)):
        event = {"n": n, "kind": "retry", "task": 5, "attempt": 2, "delay_ms": 2000}
        event |= {"until": at, "error": "overloaded"}
        retry = {"at": at, "attempt": 2, "error": "overloaded"}
        view = _view([_user(1, "hi", 10)], {"run": {}, "generation": {"task": 5, "retry": retry}})
        view["docs"]["events"] = {"items": [event]}
        t.show(view)
    assert out.getvalue().splitlines() == [
        f"[overloaded: retry 2 in 2.0 s (at {iso_time(at, LOCAL)})]" for at in (1000, 9000)
    ]


def test_a_retry_is_shown_once_though_the_event_and_the_live_document_both_tell_it() -> None:
    out = io.StringIO()
    screen = Screen(Console(file=out, width=200, color_system=None, soft_wrap=True))
    t = Transcript(screen, own={10})
    error = "cannot reach the model server: [Errno 111] Connect call failed"
    event = {"n": 1, "kind": "retry", "task": 5, "attempt": 2, "delay_ms": 2000}
    event |= {"until": 1, "error": error}
    live = {"run": {}, "generation": {"task": 5, "retry": {"at": 1, "attempt": 2, "error": error}}}
    view = _view([_user(1, "hi", 10)], live)
    view["docs"]["events"] = {"items": [event]}
    t.show(view)
    t.show(view)  # the next commit's view still holds both
    # The next attempt is told only by the live document (the event fell out of the
    # view's window): it is shown, once.
    live["generation"]["retry"] = {"at": 1, "attempt": 3, "error": error}
    t.show(_view([_user(1, "hi", 10)], live))
    assert out.getvalue().splitlines() == [
        f"[{error}: retry 2 in 2.0 s (at {iso_time(1, LOCAL)})]",
        f"[{error}: retrying (attempt 3) at {iso_time(1, LOCAL)}]",
    ]


def test_the_transcript_shows_recovery_tool_output_and_the_turn_s_tokens() -> None:
    out = io.StringIO()
    screen = Screen(Console(file=out, width=200, color_system=None, soft_wrap=True))
    t = Transcript(screen, own={10})
    asked = _user(1, "book it", 10)
    call = {"type": "tool_call", "id": "c1", "name": "bash", "arguments": {"command": "x"}}
    round_ = _assistant(2, 5, "", call)
    round_["message"]["usage"] = {"input": 100, "output": 10, "cost": 0.001}
    running = {"run": {}, "tools": {"c1": {"name": "bash", "status": "running", "task": 7}}}
    running["tools"]["c1"]["output"] = "line one\nline tw"
    t.show(_view([asked, round_], running))
    running["tools"]["c1"]["output"] = "line one\nline two\n"
    t.show(_view([asked, round_], running))
    restart = {"n": 1, "kind": "restart", "tasks": [{"task": 7, "kind": "tool", "tool": "bash"}]}
    search = {"n": 2, "kind": "tool_recovery", "task": 8, "tool": "search", "how": "rerun"}
    view = _view([asked, round_], running)
    view["docs"]["events"] = {"items": [restart, search]}
    t.show(view)  # the restart named bash: its recovery is still to come
    booked = {"n": 3, "kind": "tool_recovery", "task": 7, "tool": "bash", "how": "recovered"}
    view["docs"]["events"] = {"items": [restart, search, booked]}
    t.show(view)
    cut = _assistant(3, 9, "Bo", stop="aborted")
    cut["data"] = {"interrupted": "restart"}
    answer = _assistant(4, 9, "Booked.")
    answer["message"]["usage"] = {"input": 120, "output": 5, "cost": 0.002}
    t.show(_view([asked, round_, cut, answer]))
    assert out.getvalue().splitlines() == [
        '  ⚙ bash {"command": "x"}',
        "    │ line one",
        "    │ line two",
        "[recovered after restart: search reran, bash recovered from the sandbox]",
        "agent> Bo [cut short by a restart: asking the model again]",
        "agent> Booked.",
        "  (220 in / 15 out tokens, $0.0030)",
    ]


async def test_the_status_line_shows_waiting_a_running_tool_and_a_retry_countdown() -> None:
    out = io.StringIO()
    screen = Screen(Console(file=out, width=200, force_terminal=True, color_system=None))
    async with ActorClient("http://127.0.0.1:9", "t") as client:
        chat = Chat(ChatOptions(url="http://127.0.0.1:9", token="t"), client, screen)
        started: dict[object, float] = {}
        chat.view = {"entries": [], "docs": {"live": {"run": {}, "generation": {"task": 5}}}}
        chat.transcript.busy = True
        assert chat._progress(started)[0] == "waiting for the model (0 s)"
        tools = {"c1": {"name": "bash", "status": "running", "task": 7}}
        chat.view["docs"]["live"]["tools"] = tools  # type: ignore[index]
        assert chat._progress(started)[0] == "running bash 0 s"
        retry = {"task": 5, "retry": {"at": int(time.time() * 1000) + 5400, "attempt": 2}}
        chat.view["docs"]["live"]["generation"] = retry  # type: ignore[index]
        assert chat._progress(started)[0] in ("retry 2 in 5 s", "retry 2 in 6 s")
        chat.transcript.busy = False
        chat.view["docs"]["live"] = {}  # type: ignore[index]
        assert chat._progress(started)[0] is None
    screen.status("⠋ running bash 3 s")
    screen.write("  ↳ done\n")  # other output erases the status line first
    assert out.getvalue() == "\r\x1b[K⠋ running bash 3 s\r\x1b[K  ↳ done\n"


def test_the_transcript_shows_every_abort_path_and_labels_an_answer_cut_after_one() -> None:
    out = io.StringIO()
    screen = Screen(Console(file=out, width=200, color_system=None, soft_wrap=True))
    t = Transcript(screen, own={10})
    asked = _user(1, "go on", 10)
    view = _view([asked], _partial(5, "Going"))
    t.show(view)
    # Another client aborted the run's generation by its submission: the event comes in
    # the abort's commit, before the cut answer's entry.
    cut = {"n": 1, "kind": "abort", "scope": "submission", "submission": 10, "task": 5}
    cut["task_kind"] = "generation"
    view["docs"]["events"] = {"items": [cut]}
    t.show(view)
    view = _view([asked, _assistant(2, 5, "Going", stop="aborted")])
    view["docs"]["events"] = {"items": [cut]}
    t.show(view)
    timer = {"n": 2, "kind": "abort", "scope": "timer", "task": 8, "task_kind": "reminder"}
    own = {"n": 3, "kind": "abort", "scope": "conversation", "tasks": 1, "background": False}
    view["docs"]["events"] = {"items": [cut, timer, own]}
    t.events.own_abort = True  # this chat asked for that one: its own line tells it
    t.show(view)
    assert out.getvalue().splitlines() == [
        "agent> Going",
        "[submission 10 aborted: its run (generation task 5)]",
        "agent> [aborted]",
        "[reminder 8 cancelled]",
    ]


def test_the_schedules_command_lists_and_cancels_the_conversation_s_schedules(
    host: tuple[str, Path],
) -> None:
    url, _gate = host
    with api(url) as c:
        r = c.post("/v1/actors/sam/submissions", json={"type": "input", "content": "hi"})
        assert r.status_code == 202, r.text
        body = {"message": "Daily report", "cron": "0 9 * * *", "timezone": "Europe/Vienna"}
        made = c.post("/v1/actors/sam/conversations/1/schedules", json=body).json()
    child = chat(url, "sam")
    try:
        child.expect_exact("you> ")
        child.sendline("/schedules")
        child.expect_exact(
            f"schedule {made['id']}: cron 0 9 * * * Europe/Vienna: 'Daily report' — next "
            f"{made['next'][0]}, {made['next'][1]} (fired 0, skipped 0)"
        )
        child.sendline(f"/schedules cancel {made['id']}")
        child.expect_exact(f"[schedule {made['id']} cancelled]")
        child.sendline("/schedules")
        child.expect_exact("(no schedules)")
        child.sendline("/quit")
        assert finish(child) == 0
    finally:
        child.close(force=True)
