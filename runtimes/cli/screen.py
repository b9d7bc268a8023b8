"""What ``perdure chat`` prints: plain lines on a rich console.

:class:`Screen` is the plain kind, for pipes, dumb terminals and tests: output is written
as it comes, and a terminal echoes what the user types where the cursor is — so typing
while an answer streams mixes the two on screen. ``runtimes.cli.terminal`` has the kind
that keeps the input line apart, for real terminals.
"""

from __future__ import annotations

import asyncio
import codecs
import os
import threading
from collections.abc import Callable

from rich.console import Console
from rich.text import Text

__all__ = ["STEER_LABEL", "YOU", "Screen", "interactive_terminal"]

YOU = "you> "
STEER_LABEL = "you (steer): "  # a line typed while the agent works, in the transcript


def interactive_terminal() -> bool:
    """Whether the chat runs on a terminal that can keep the input line apart (both
    standard streams are terminals, and one that moves its cursor)."""
    return os.isatty(0) and os.isatty(1) and os.environ.get("TERM", "") not in ("", "dumb")


class Screen:
    """Plain lines on a rich console, remembering whether the cursor is mid-line."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.midline = False
        self.writes = 0  # counts output, so a caller can tell whether something was shown
        self.prompted = False  # the prompt is the last thing on screen
        self._status = False  # a status line is on screen
        self.working: Callable[[], bool] = lambda: False  # the agent works (set by the chat)

    def status(self, text: str | None) -> None:
        """A transient status line (terminals only), rewritten in place and erased before
        any other output; shown only at the start of an empty line."""
        if not self.console.is_terminal or (text and (self.midline or self.prompted)):
            return
        if text is None:
            self._erase()
            return
        self.console.file.write("\r\x1b[K" + text)
        self.console.file.flush()
        self._status = True

    def _erase(self) -> None:
        if self._status:
            self.console.file.write("\r\x1b[K")
            self._status = False

    def write(self, text: str, style: str | None = None) -> None:
        if text:
            self._erase()
            self._out(text, style)
            self.midline = not text.endswith("\n")
            self.writes += 1
            self.prompted = False

    def _out(self, text: str, style: str | None) -> None:
        self.console.print(Text(text, style=style or ""), end="")

    def typed(self, line: str, *, steer: bool) -> None:
        """The user ended ``line`` (``steer``: while the agent works). Here the terminal
        echoed it and its Enter already."""
        self._status = False  # the echoed line overwrote it
        self.midline = self.prompted = False
        self.writes += 1

    def line(self, text: str = "", style: str | None = None) -> None:
        self.end_line()
        self.write(text + "\n", style)

    def end_line(self) -> None:
        if self.midline:
            self.write("\n")

    def prompt(self) -> None:
        if self.prompted:
            return
        self.end_line()
        self.write(YOU, "bold cyan")
        self.prompted = True

    def read_input(
        self,
        loop: asyncio.AbstractEventLoop,
        lines: asyncio.Queue[str | None],
        interrupt: Callable[[], None],
    ) -> asyncio.Task[None] | None:
        """Start putting the user's lines into ``lines`` (``None`` at the end of input);
        returns the task doing it, if it is one. Here: standard input, read by a daemon
        thread; Ctrl-C is the chat's SIGINT handler's, not ``interrupt``."""
        threading.Thread(target=_read_lines, args=(loop, lines), daemon=True).start()
        return None


def _read_lines(loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[str | None]) -> None:
    """In a daemon thread: lines of standard input into ``queue`` (``None`` at its end).

    Reads the file descriptor directly, so an exit while it waits takes no Python lock.
    """
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    pending = ""

    def put(item: str | None) -> bool:
        try:
            loop.call_soon_threadsafe(queue.put_nowait, item)
        except RuntimeError:  # the loop is closed: the chat is over
            return False
        return True

    while True:
        try:
            chunk = os.read(0, 4096)
        except OSError:
            chunk = b""
        if not chunk:
            if pending and not put(pending):
                return
            put(None)
            return
        pending += decoder.decode(chunk)
        *lines, pending = pending.split("\n")
        for line in lines:
            if not put(line.rstrip("\r")):
                return
