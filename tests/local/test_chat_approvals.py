"""``perdure chat`` asks inline about a tool call that needs approval (issue 34): on a
real terminal (pexpect + the pyte screen of ``test_chat_terminal``), ``y`` approves and
the tool runs once; a note denies, and the agent answers having read it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pexpect
import pytest

from tests.local.support import start_host_process, stop
from tests.local.test_chat_terminal import Terminal, _has


@pytest.fixture
def host(tmp_path: Path) -> Iterator[str]:
    proc, url = start_host_process(tmp_path / "data", "--approvals", "3600")
    try:
        yield url
    finally:
        stop(proc)


def test_the_chat_asks_approve_y_n_note_and_posts_the_answer(host: str, tmp_path: Path) -> None:
    approved, denied = tmp_path / "approved.txt", tmp_path / "denied.txt"
    term = Terminal(host, "gina")
    try:
        term.until(_has("your first message starts it"), "the new conversation")
        term.until(lambda rows: rows[-1] == "you>", "the input line")
        term.type(f"guard:{approved}\r")
        term.until(_has("? guarded needs your approval: approve? [y/n/note]"), "the question")
        assert not approved.exists()
        term.type("y\r")
        term.until(_has("[guarded: approved]"), "the decision (its event)")
        term.until(_has("agent> guarded finished: guarded wrote"), "the answer")
        assert approved.read_text() == "ran\n"

        term.until(lambda rows: rows[-1] == "you>", "the prompt again")
        term.type(f"guard:{denied}\r")
        term.until(lambda rows: sum(QUESTION_ROW in r for r in rows) == 2, "the second question")
        term.type("not on Sundays\r")
        term.until(_has("[guarded: denied: not on Sundays]"), "the denial (its event)")
        # The tool's result row carries the note before the agent's answer does: wait for
        # the answer itself (waiting for the note alone raced it).
        rows = term.until(
            lambda rows: any(r.startswith("agent> guarded finished: [denied]") for r in rows),
            "the answer",
        )
        assert any("Note from the person asked: not on Sundays" in r for r in rows), rows
        assert not denied.exists()
        term.child.sendline("/quit")
        term.child.expect(pexpect.EOF)
    finally:
        term.close()
    assert approved.read_text() == "ran\n"


QUESTION_ROW = "needs your approval: approve? [y/n/note]"
