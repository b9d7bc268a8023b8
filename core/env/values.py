"""The values of the :class:`~core.env.ExecutionEnv` surface: the op reference its
mutating calls carry, the requests (edits, grep options) and the results it returns.

Plain read-only dataclasses (:mod:`core.readonly`) with no behaviour beyond validating
themselves; the conventions they follow are in :mod:`core.env`.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Literal, TypeAlias

from core.readonly import readonly

__all__ = [
    "OP_ID_PATTERN",
    "DirEntry",
    "EditResult",
    "ExecResult",
    "FindResult",
    "GrepMatch",
    "GrepOptions",
    "GrepResult",
    "LsResult",
    "OpRef",
    "OpResult",
    "OpState",
    "OutputCallback",
    "ReadResult",
    "SearchStop",
    "TextEdit",
    "WriteResult",
]


#: Why a search stopped before it was complete: the request's ``limit``, the environment's
#: cap on bytes read per search, or its time limit per search.
SearchStop: TypeAlias = Literal["limit", "scan_bytes", "deadline"]

#: Op ids: at most 255 characters of ``[A-Za-z0-9._:-]`` (wire-safe, log-safe).
OP_ID_PATTERN = re.compile(r"[A-Za-z0-9._:-]{1,255}")


# --------------------------------------------------------------------------------------
# Values
# --------------------------------------------------------------------------------------


@readonly
class OpRef:
    """Identity of one mutating call: ``id`` is ``"<task id>:<tool call id>"``.

    ``attempt`` counts how often the harness has issued this op (1 for the first try). It is
    not part of the op's identity: the environment dedupes on ``id`` alone.

    Raises:
        ValueError: ``id`` does not match :data:`OP_ID_PATTERN` or ``attempt < 1``.
    """

    id: str
    attempt: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or OP_ID_PATTERN.fullmatch(self.id) is None:
            raise ValueError(f"invalid op id {self.id!r}: use 1-255 of [A-Za-z0-9._:-]")
        if isinstance(self.attempt, bool) or not isinstance(self.attempt, int):
            raise ValueError("attempt must be an int")
        if self.attempt < 1:
            raise ValueError("attempt must be >= 1")


@readonly
class TextEdit:
    """Replace the single exact occurrence of ``old_text`` with ``new_text``."""

    old_text: str
    new_text: str


@readonly
class ReadResult:
    """A window of whole lines from a UTF-8 text file.

    Lines are split on ``\\n``; a final newline does not start another line, so ``"a\\nb\\n"``
    has two lines and an empty file has none. Invalid UTF-8 is replaced with U+FFFD.

    Attributes:
        text: the lines of the window joined with ``\\n`` (no trailing newline).
        offset: 1-based number of the first line requested.
        lines: how many lines ``text`` holds (0 when ``offset`` is past the end, or when the
            first line alone exceeds ``max_bytes``).
        total_lines: lines in the whole file.
        total_bytes: size of the whole file in bytes.
        truncated: the window stopped early because the next line would exceed ``max_bytes``.
        next_line_bytes: when ``truncated``, the UTF-8 size of the first line left out.
    """

    text: str
    offset: int
    lines: int
    total_lines: int
    total_bytes: int
    truncated: bool = False
    next_line_bytes: int | None = None


@readonly
class WriteResult:
    """A completed write: ``bytes_written`` UTF-8 bytes now at ``path`` with ``sha256``."""

    path: str
    bytes_written: int
    sha256: str


@readonly
class EditResult:
    """A completed edit.

    Attributes:
        path: the edited file.
        replacements: number of edits applied (all of them, or the call raised).
        first_changed_line: 1-based line of the first change in the new content.
        diff: unified diff of old against new content.
        sha256: hash of the new content.
    """

    path: str
    replacements: int
    first_changed_line: int
    diff: str
    sha256: str


@readonly
class DirEntry:
    """One directory entry; ``kind`` describes the entry itself (symlinks are not followed)."""

    name: str
    kind: Literal["file", "dir", "symlink", "other"]
    size: int


@readonly
class LsResult:
    """Entries of one directory sorted by name; ``truncated`` when ``limit`` cut the list."""

    entries: tuple[DirEntry, ...]
    truncated: bool = False


@readonly
class FindResult:
    """Paths matching a glob, relative to the search path, sorted.

    Directories end with ``/``. ``truncated`` when the list is incomplete; ``stopped_by``
    then names why: the ``limit``, or the environment's time limit (``deadline``).
    """

    paths: tuple[str, ...]
    truncated: bool = False
    stopped_by: SearchStop | None = None


@readonly
class GrepOptions:
    """Filters and caps for :meth:`ExecutionEnv.grep`.

    Attributes:
        glob: only files whose name (or relative path, when the glob has a ``/``) matches.
        ignore_case: case-insensitive matching.
        literal: treat the pattern as a plain string, not a regular expression.
        context: lines of context before and after each match.
        limit: maximum number of matching lines reported.
        max_line_length: longer lines are cut to this many characters.
    """

    glob: str | None = None
    ignore_case: bool = False
    literal: bool = False
    context: int = 0
    limit: int = 100
    max_line_length: int = 500

    def __post_init__(self) -> None:
        if self.context < 0 or self.limit < 1 or self.max_line_length < 1:
            raise ValueError("context must be >= 0, limit and max_line_length >= 1")


@readonly
class GrepMatch:
    """One reported line: a match, or context around one (``is_context``)."""

    path: str
    line: int
    text: str
    is_context: bool = False


@readonly
class GrepResult:
    """Matching lines in file order; ``truncated`` when more may exist.

    ``stopped_by`` names why: ``limit`` matches were reached, the environment's cap on
    bytes read per search (``scan_bytes``) or its time limit (``deadline``).
    """

    matches: tuple[GrepMatch, ...]
    truncated: bool = False
    stopped_by: SearchStop | None = None


@readonly
class ExecResult:
    """Outcome of a shell command; stdout and stderr are merged into one stream.

    Attributes:
        exit_code: the process's exit status, or ``None`` when it was killed by a signal.
        output: the tail of the merged output, decoded as UTF-8 with replacement.
        truncated: ``output`` is not the whole output (the environment keeps a bounded tail).
        total_bytes: bytes the command wrote in total.
        total_lines: newline characters the command wrote in total.
        signal: the signal that ended the process, if any.
        timed_out: the environment killed the command at its timeout.
    """

    exit_code: int | None
    output: str
    truncated: bool
    total_bytes: int
    total_lines: int
    signal: int | None = None
    timed_out: bool = False


OpResult: TypeAlias = WriteResult | EditResult | ExecResult
OpState: TypeAlias = Literal["running", "done", "lost", "unknown"]

#: Receives decoded chunks of a command's merged output as they arrive; may be async.
OutputCallback: TypeAlias = Callable[[str], Awaitable[None] | None]
