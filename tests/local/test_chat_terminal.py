"""``perdure chat`` on a real terminal: the input line stays apart from the streaming answer.

The chat runs in a pseudo-terminal (pexpect, ``TERM=xterm-256color``) against a host
process whose model streams slowly (``tests.local.chat_host``). What a person would see
is read back through a VT100 emulator (pyte) fed every byte the chat wrote — cursor
movements, erases and redraws included — so the assertions are about the screen, not
about the byte stream. Waits poll the emulated screen, never sleep blindly.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pexpect
import pyte
import pytest

from tests.local.chat_host import TRIP
from tests.local.support import ROOT, TOKEN, start_host_process, stop

TIMEOUT = 60
COLUMNS, ROWS = 120, 60
STEER = "also ask for a window seat"


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("chat-terminal")
    gate = root / "gate"
    gate.touch()  # the tool round ends at once: the steer is placed right after it
    proc, url = start_host_process(
        root / "data", "--gate", str(gate), module="tests.local.chat_host"
    )
    try:
        yield url
    finally:
        stop(proc)


class Terminal:
    """The chat in a pseudo-terminal, and the screen it draws (a pyte emulator)."""

    def __init__(self, url: str, actor: str) -> None:
        self.child: Any = pexpect.spawn(
            sys.executable,
            ["-m", "runtimes.cli.main", "chat", actor, "--url", url, "--token", TOKEN],
            cwd=str(ROOT),
            env={**os.environ, "PYTHONPATH": str(ROOT), "TERM": "xterm-256color"},
            encoding="utf-8",
            codec_errors="replace",
            timeout=TIMEOUT,
            dimensions=(ROWS, COLUMNS),
        )
        self.child.delaybeforesend = None  # keys as fast as they are sent
        self.screen = pyte.Screen(COLUMNS, ROWS)
        # A terminal answers what the program asks it (the cursor position): so does this.
        self.screen.write_process_input = self.child.send  # type: ignore[method-assign]
        self.stream = pyte.Stream(self.screen)
        self.raw: list[str] = []

    def pump(self, seconds: float = 0.05) -> None:
        try:
            data = self.child.read_nonblocking(65536, timeout=seconds)
        except (pexpect.TIMEOUT, pexpect.EOF):
            return
        self.raw.append(data)
        self.stream.feed(data)

    def rows(self) -> list[str]:
        """The screen's rows, trailing spaces cut, down to the last one with text."""
        rows = [row.rstrip() for row in self.screen.display]
        while rows and not rows[-1]:
            rows.pop()
        return rows

    def until(self, seen: Callable[[list[str]], bool], what: str) -> list[str]:
        deadline = time.monotonic() + TIMEOUT
        while not seen(self.rows()):
            if time.monotonic() > deadline:
                raise AssertionError(f"never saw {what}; the screen:\n" + "\n".join(self.rows()))
            self.pump()
        return self.rows()

    def type(self, text: str) -> None:
        for char in text:  # a key at a time: the stream goes on between the keys
            self.child.send(char)
            self.pump(0.01)

    def close(self) -> None:
        self.child.close(force=True)


def _has(text: str) -> Callable[[list[str]], bool]:
    return lambda rows: any(text in row for row in rows)


def test_typing_a_steer_while_the_answer_streams_keeps_them_on_separate_lines(
    host: str,
) -> None:
    term = Terminal(host, "carol")
    try:
        term.until(_has("your first message starts it"), "the new conversation")
        term.until(lambda rows: rows[-1] == "you>", "the input line")
        term.type("trip to Graz\r")
        term.until(_has("train5 "), "the answer streaming")
        half = len(STEER) // 2
        typing = f"you (steer)> {STEER[:half]}".rstrip()  # rows are compared cut
        term.type(STEER[:half])
        # Mid-stream: the input line is the last row and holds exactly what was typed; the
        # answer streams in the rows above it.
        rows = term.until(lambda rows: rows[-1] == typing, "the typed text on the input line")
        assert "train" in rows[-2]
        streamed = "\n".join(rows[:-1])
        term.until(lambda rows: "\n".join(rows[:-1]) != streamed, "the answer going on")
        assert term.rows()[-1] == typing  # redrawn below it, untouched
        term.type(STEER[half:])
        assert "train59." not in "\n".join(term.rows())  # still streaming when it is sent
        term.type("\r")
        rows = term.until(_has(f"agent> steered: {STEER}"), "the steered answer")
        term.until(lambda rows: rows[-1] == "you>", "the prompt again")
        rows = term.rows()
        term.child.sendline("/quit")
        term.child.expect(pexpect.EOF)
    finally:
        term.close()

    # The steer is its own labelled row, where it was sent, and nowhere else.
    steer_rows = [i for i, row in enumerate(rows) if STEER in row]
    assert [rows[i] for i in steer_rows] == [
        f"you (steer): {STEER}",
        f"agent> steered: {STEER}",
    ]
    start = rows.index("you> trip to Graz")
    call = next(i for i, row in enumerate(rows) if row.startswith("  ⚙ wait_gate"))
    answer_rows = [
        row
        for row in rows[start + 1 : call]
        if not row.startswith(("you (steer): ", "(queued: it steers"))
    ]
    # The rows of the answer hold the answer and nothing else: not one typed character
    # got in between its words (the rows wrap at the screen's width; the answer goes on
    # as ``agent> … `` after the steer's row).
    shown = "".join(answer_rows).replace("agent> … ", "").replace("agent> ", "")
    assert re.sub(r"\s", "", shown) == re.sub(r"\s", "", TRIP)
    assert start < steer_rows[0] < call

    # The steer reached the run: placed after the tool round, it is in the model's next
    # request (the model answers the newest user message it was sent), and that one
    # answer settles both inputs.
    with httpx.Client(base_url=host, headers={"authorization": f"Bearer {TOKEN}"}) as c:
        entries = c.get("/v1/actors/carol/conversations/1/view").json()["entries"]
        kinds = [(e["kind"], e["message"].get("content")) for e in entries]
        assert [k for k, _ in kinds] == ["user", "assistant", "tool_result", "user", "assistant"]
        assert kinds[3][1] == STEER
        assert entries[4]["message"]["content"][0]["text"] == f"steered: {STEER}"
        subs = [
            c.get(f"/v1/actors/carol/submissions/{e['data']['submission']}").json()
            for e in entries
            if e["kind"] == "user"
        ]
        assert [s["status"] for s in subs] == ["done", "done"]
        assert {s["answer"]["entry"]["id"] for s in subs} == {entries[4]["id"]}


def test_ctrl_c_on_the_input_line_aborts_the_streaming_run_then_leaves_when_idle(
    host: str,
) -> None:
    term = Terminal(host, "erin")
    try:
        term.until(_has("your first message starts it"), "the new conversation")
        term.type("long\r")
        term.until(_has("word5 "), "the answer streaming")
        term.child.send("\x03")  # raw mode: Ctrl-C is a key of the input line, not SIGINT
        rows = term.until(_has("[run aborted (1 task)]"), "the abort")
        assert "word399" not in "\n".join(rows)
        # The cut answer ends with its mark (rows wrap at the width: joined first).
        assert re.search(r"\w\s{1,2}\[aborted\]", "".join(rows))
        term.until(lambda rows: rows[-1] == "you>", "the input line, idle")
        term.child.send("\x03")  # idle: Ctrl-C leaves
        term.child.expect(pexpect.EOF)
        term.child.close()
        assert term.child.exitstatus == 0
    finally:
        term.close()


def test_piped_the_chat_writes_plain_lines_without_escape_codes(host: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "runtimes.cli.main", "chat", "dave", "--url", host],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "PERDURE_TOKEN": TOKEN, "TERM": "xterm"},
        input="hello there\n",
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout and "\r" not in done.stdout
    lines = done.stdout.splitlines()
    assert "hello there" in lines  # the piped line, shown as if typed
    assert "agent> echo: hello there" in lines
