"""The chat on a real terminal: the input line kept apart from the streaming answer.

The bottom of the terminal is a small live area that prompt_toolkit draws and redraws::

    agent> Looking at trains to Gr            <- the answer's unfinished line, growing
    ⠙ waiting for the model (2 s)             <- the status, while the agent works
    you (steer)> prefer the mor               <- what is being typed

Finished lines go above it, into the scrollback, through prompt_toolkit's
:class:`~prompt_toolkit.patch_stdout.StdoutProxy` (the standard way to print above a
prompt: it hides the prompt, writes, and draws it again; ``raw``, so rich's own colours
pass). The unfinished line is held here and drawn as part of the prompt's message rather
than printed — a partial line printed above the prompt would be overwritten by it — so
the answer grows in place *above* the input, never beside it. A line sent while the agent
works is shown in the transcript as ``you (steer): ...`` where it was sent.

Why prompt_toolkit and not a terminal layer of our own: it already does the hard parts
(raw mode, line editing, wide characters and wrapping, resizes, redraws), is well kept,
and is pure Python. It is used only when both standard input and output are terminals
and ``TERM`` is not ``dumb`` (:func:`~runtimes.cli.screen.interactive_terminal`);
otherwise the chat is the plain :class:`~runtimes.cli.screen.Screen` and writes no
cursor movements.
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, cast

from prompt_toolkit import PromptSession
from prompt_toolkit.formatted_text import ANSI
from prompt_toolkit.patch_stdout import StdoutProxy
from rich.console import Console
from rich.text import Text

from runtimes.cli.screen import STEER_LABEL, YOU, Screen

__all__ = ["TerminalScreen", "terminal_screen"]

_FLUSH_S = 0.02  # finished lines reach the scrollback in batches at most this far apart


class TerminalScreen(Screen):
    """A :class:`Screen` whose finished lines go above a live area (the answer's
    unfinished line, the status, the input line) that is redrawn as they come."""

    def __init__(self, console: Console) -> None:
        super().__init__(console)
        self._tail: list[tuple[str, str]] = []  # the unfinished line: (text, style) parts
        self._tail_ansi = ""
        self._status_text: str | None = None
        # Renders the live area's parts to ANSI, in the colours the real console uses.
        self._ansi = Console(
            file=io.StringIO(),
            force_terminal=True,
            color_system=cast(Any, console.color_system),  # the name rich chose
            highlight=False,
            soft_wrap=True,
            emoji=False,
        )
        self.session: PromptSession[str] = PromptSession(erase_when_done=True)

    # output -------------------------------------------------------------------

    def _out(self, text: str, style: str | None) -> None:
        part = (text, style or "")
        cut = text.rfind("\n")
        if cut < 0:
            self._tail.append(part)
        else:
            done = [*self._tail, (text[: cut + 1], part[1])]
            self.console.print(Text.assemble(*done), end="")
            rest = text[cut + 1 :]
            self._tail = [(rest, part[1])] if rest else []
        self._tail_ansi = self._render(self._tail)
        self.session.app.invalidate()

    def status(self, text: str | None) -> None:
        """The status is a line of the live area, between the answer and the input."""
        if text != self._status_text:
            self._status_text = text
            self.session.app.invalidate()

    def _erase(self) -> None:
        return None  # the status is not in the scrollback: nothing to erase there

    def prompt(self) -> None:
        self.prompted = True  # the input line is always there

    def typed(self, line: str, *, steer: bool) -> None:
        """Nothing was echoed (the input line is erased when sent): show the line in the
        transcript, as its own entry — ``you (steer): ...`` when it steers the run."""
        text = line.strip()
        if not text:
            return
        self.end_line()  # an unfinished answer line goes up first; it goes on below
        if steer and not text.startswith("/"):
            self.write(STEER_LABEL, "bold cyan")
        else:
            self.write(YOU, "bold cyan")
        self.write(text + "\n")

    def _message(self) -> ANSI:
        parts = []
        if self._tail_ansi:
            parts.append(self._tail_ansi + "\n")
        if self._status_text:
            parts.append(self._render([(self._status_text, "dim")]) + "\n")
        label = "you (steer)> " if self.working() else YOU
        parts.append(self._render([(label, "bold cyan")]))
        return ANSI("".join(parts))

    def _render(self, parts: list[tuple[str, str]]) -> str:
        if not parts:
            return ""
        with self._ansi.capture() as capture:
            self._ansi.print(Text.assemble(*parts), end="")
        return capture.get()

    # input --------------------------------------------------------------------

    def read_input(
        self,
        loop: asyncio.AbstractEventLoop,
        lines: asyncio.Queue[str | None],
        interrupt: Callable[[], None],
    ) -> asyncio.Task[None] | None:
        return loop.create_task(self._prompt(lines, interrupt))

    async def _prompt(
        self, lines: asyncio.Queue[str | None], interrupt: Callable[[], None]
    ) -> None:
        while True:
            try:
                # The chat's own SIGINT handler stays: raw mode turns Ctrl-C into a key.
                line = await self.session.prompt_async(self._message, handle_sigint=False)
            except KeyboardInterrupt:  # Ctrl-C: abort the run (or leave when idle)
                interrupt()
                continue
            except EOFError:  # Ctrl-D on an empty line
                lines.put_nowait(None)
                return
            lines.put_nowait(line)


@contextmanager
def terminal_screen() -> Iterator[TerminalScreen]:
    """A :class:`TerminalScreen` writing through a stdout proxy, closed (flushed) after."""
    with StdoutProxy(sleep_between_writes=_FLUSH_S, raw=True) as proxy:
        console = Console(file=proxy, highlight=False, soft_wrap=True, emoji=False)  # type: ignore[arg-type]
        screen = TerminalScreen(console)
        try:
            yield screen
        finally:
            screen.end_line()
