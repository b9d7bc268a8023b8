"""Search one open file for a :class:`~remote_env.server.patterns.LinePattern`, streaming.

The file is read in chunks of at most :data:`CHUNK_BYTES` and handed on as blocks of whole
lines, so memory stays bounded whatever the file's size: a line longer than
:data:`MAX_LINE_BYTES` is searched in its first ``MAX_LINE_BYTES`` only (the rest is read
past and counted in ``GrepOutput.long_lines``). Every byte read is charged to the search's
:class:`~remote_env.server.budget.SearchBudget`; the deadline is checked between chunks and
between batches of lines.

Matches and their context lines are appended in file order to a :class:`GrepSink`, shared
by all the files of one search, which also counts them against the request's ``limit``.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

from remote_env.protocol import GrepMatchModel
from remote_env.server.budget import SearchBudget
from remote_env.server.patterns import LinePattern

__all__ = ["CHUNK_BYTES", "MAX_LINE_BYTES", "GrepSink", "scan_file"]

CHUNK_BYTES = 1024 * 1024
MAX_LINE_BYTES = 4 * 1024 * 1024
_BINARY_PROBE = 8192
# Lines searched one by one (text-anchored patterns) between two deadline checks.
_LINES_PER_CHECK = 4096


@dataclass(slots=True)
class GrepSink:
    """The lines reported so far, and how many matches were counted.

    Attributes:
        limit: matches to report; the first one past it sets ``more`` and ends the search.
        context: lines of context shown around each reported match.
        max_line_length: characters of a line shown before ``[line truncated]``.
    """

    limit: int
    context: int
    max_line_length: int
    matches: list[GrepMatchModel] = field(default_factory=list)
    count: int = 0
    more: bool = False
    long_lines: int = 0

    def shown(self, raw: bytes) -> str:
        """The text reported for a line."""
        text = raw.decode("utf-8", "replace").rstrip("\r")
        if len(text) > self.max_line_length:
            text = text[: self.max_line_length] + " [line truncated]"
        return text


def _read(fd: int, size: int, budget: SearchBudget) -> bytes:
    data = os.read(fd, min(size, budget.scan_left)) if budget.scan_left else b""
    budget.charge(len(data))
    return data


def _more_in_file(fd: int) -> bool:
    return os.lseek(fd, 0, os.SEEK_CUR) < os.fstat(fd).st_size


def _blocks(fd: int, first: bytes, budget: SearchBudget, sink: GrepSink) -> Iterator[bytes]:
    """Blocks of whole lines (joined by ``\\n``, without the last newline), in file order.

    ``first`` is what was read already. Stops early when the budget is exhausted; a line
    cut by the scan cap is yielded as the last block.
    """
    pending = b""
    skipping = False  # reading past the rest of an over-long line
    data = first
    while True:
        if not data:
            if budget.scan_left == 0 and _more_in_file(fd):
                budget.stop("scan_bytes")
            if pending:
                yield pending
            return
        if skipping:
            newline = data.find(b"\n")
            skipping = newline < 0
            data = b"" if skipping else data[newline + 1 :]
        pending += data
        # Only the line pending starts with can be long: later ones began in this chunk.
        if len(pending) >= MAX_LINE_BYTES and pending.find(b"\n", 0, MAX_LINE_BYTES) < 0:
            sink.long_lines += 1
            yield pending[:MAX_LINE_BYTES]
            newline = pending.find(b"\n", MAX_LINE_BYTES)
            skipping = newline < 0
            pending = b"" if skipping else pending[newline + 1 :]
        cut = pending.rfind(b"\n")
        if cut >= 0:
            block, pending = pending[:cut], pending[cut + 1 :]
            yield block
        if budget.exhausted():
            return
        data = _read(fd, CHUNK_BYTES, budget)


def _hit_offsets(block: bytes, pattern: LinePattern, budget: SearchBudget) -> Iterator[int]:
    """Start offsets (in ``block``) of the lines the pattern matches, in order."""
    view = memoryview(block)
    if pattern.block is None:
        start = 0
        for number, line in enumerate(block.split(b"\n")):
            if number % _LINES_PER_CHECK == 0 and number and budget.exhausted():
                return
            if pattern.line.search(line) is not None:
                yield start
            start += len(line) + 1
        return
    pos = 0
    while pos <= len(block):
        found = pattern.block.search(block, pos)
        if found is None:
            return
        start = block.rfind(b"\n", 0, found.start()) + 1
        end = block.find(b"\n", found.start())
        end = len(block) if end < 0 else end
        # The block form finds every matching line; the line form is the definition.
        if pattern.line.search(view[start:end]) is not None:
            yield start
        pos = end + 1


@dataclass(slots=True)
class _Cursor:
    """Where the reported lines of one file stand, across blocks."""

    display: str
    emitted: int = 0  # number of the last line reported (1-based; 0: none)
    owed_until: int = 0  # context is owed after a match up to this line
    before: deque[tuple[int, bytes]] = field(default_factory=deque)  # recent unreported lines


def _report(
    sink: GrepSink, cursor: _Cursor, first: int, lines: list[bytes], hits: list[int]
) -> None:
    """Append this block's matches (line indexes ``hits``) and context lines to the sink."""
    wanted: dict[int, bool] = {}  # line number -> is context
    owed_stop = min(cursor.owed_until, first + len(lines) - 1)
    for number in range(max(first, cursor.emitted + 1), owed_stop + 1):
        wanted[number] = True
    for index in hits:
        number = first + index
        for near in range(number - sink.context, number + sink.context + 1):
            wanted.setdefault(near, True)
        wanted[number] = False
        cursor.owed_until = max(cursor.owed_until, number + sink.context)
    earlier = dict(cursor.before)
    for number in sorted(wanted):
        if number <= cursor.emitted:
            continue
        if number < first:
            raw = earlier.get(number)
        elif number < first + len(lines):
            raw = lines[number - first]
        else:
            continue  # after-context in the next block (owed_until carries it)
        if raw is None:
            continue
        sink.matches.append(
            GrepMatchModel(
                path=cursor.display,
                line=number,
                text=sink.shown(raw),
                is_context=wanted[number],
            )
        )
        cursor.emitted = number


def _keep_tail(sink: GrepSink, cursor: _Cursor, first: int, block: bytes, lines: int) -> None:
    """Remember the block's last unreported lines as context of a match to come."""
    tail: list[tuple[int, bytes]] = []
    end = len(block)
    keep = 4 * sink.max_line_length + 4  # a context line is never shown longer (UTF-8)
    for number in range(first + lines - 1, max(first, first + lines - sink.context) - 1, -1):
        if number <= cursor.emitted:
            break
        start = block.rfind(b"\n", 0, end) + 1
        tail.append((number, block[start : min(end, start + keep)]))
        end = start - 1
    cursor.before.extend(reversed(tail))  # a deque of at most ``context`` lines


def scan_file(
    fd: int,
    display: str,
    pattern: LinePattern,
    budget: SearchBudget,
    sink: GrepSink,
    *,
    named: bool = False,
) -> None:
    """Search the open regular file ``fd`` (closed by the caller) and report into ``sink``.

    Met in a directory, a file whose first 8 KiB hold a NUL byte is binary and skipped, as
    ripgrep does. A file the caller ``named`` is searched whatever it holds (ripgrep too
    searches a file it is given): asked for one file, the answer is about that file, and a
    huge one ends at the scan cap with ``stopped_by`` saying so.
    """
    first = _read(fd, _BINARY_PROBE, budget)
    if not named and b"\x00" in first:
        return
    cursor = _Cursor(display=display, before=deque(maxlen=sink.context))
    number = 1  # the number of the block's first line
    for raw in _blocks(fd, first, budget, sink):
        # RE2 matches UTF-8: bytes that are not are searched as U+FFFD, as before.
        block = raw if raw.isascii() else raw.decode("utf-8", "replace").encode("utf-8")
        count = block.count(b"\n") + 1
        hits: list[int] = []
        offsets = [] if sink.more else _hit_offsets(block, pattern, budget)
        for offset in offsets:
            if sink.count == sink.limit:
                sink.more = True
                budget.stop("limit")
                break
            sink.count += 1
            hits.append(offset)
        if hits or cursor.owed_until >= number:
            lines = block.split(b"\n")
            indexes = _line_indexes(block, hits)
            _report(sink, cursor, number, lines, indexes)
        if sink.more and cursor.owed_until < number + count:
            return
        if sink.context:
            _keep_tail(sink, cursor, number, block, count)
        number += count


def _line_indexes(block: bytes, offsets: list[int]) -> list[int]:
    """Line indexes of line-start ``offsets`` (ascending) in ``block``."""
    indexes: list[int] = []
    index, counted = 0, 0
    for offset in offsets:
        index += block.count(b"\n", counted, offset)
        counted = offset
        indexes.append(index)
    return indexes
