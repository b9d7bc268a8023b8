"""``grep`` patterns compiled with RE2, whose matching time is linear in the text searched.

Python's ``re`` backtracks: ``(a+)+$`` against a line of ``a`` ending in ``!`` takes time
exponential in the line's length, and the thread running it holds the GIL, so the whole
server stalls. RE2 (the ``google-re2`` wheel) never backtracks and releases the GIL while
it matches. The price is its syntax: no backreferences, lookaround, possessive or atomic
repeats. A pattern that needs one is refused with a message saying so.

A pattern is matched against each line on its own (``^`` and ``$`` are the line's start and
end). Calling RE2 once per line costs about a microsecond of Python per line, so a block of
lines is first searched as a whole with :attr:`LinePattern.block` — the same pattern in
multi-line mode, with ``never_nl`` so a match cannot span lines — and only the lines where
that finds something are checked with :attr:`LinePattern.line`.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass

import re2

__all__ = [
    "LinePattern",
    "PatternError",
    "compile_line_pattern",
    "re2_compile",
    "re2_options",
    "re2_reason",
]

# Beyond these RE2's multi-line block search could miss a line the per-line search
# matches: ``\A``/``\z`` (start/end of the text, which is the line only when matched
# line by line), ``\C`` (any byte, even a newline, despite never_nl) and a flag group
# clearing ``m``. Such patterns are searched line by line: slower, still linear. An
# escaped backslash before A, C or z is a false alarm that only costs speed.
_TEXT_ANCHORED = re.compile(r"\\[ACz]|\(\?[A-Za-z]*-")

_UNSUPPORTED = (
    "grep uses RE2, which matches in time linear in the text, and RE2 cannot run this "
    "pattern: it has no backreferences (\\1, (?P=name)), no lookahead or lookbehind "
    "((?=...), (?!...), (?<=...), (?<!...)), no possessive or atomic repeats and no \\Z "
    "(use \\z), and it allows at most 1000 repetitions ({n,m}, nested counts multiplied) "
    "and a bounded compiled size"
)


class PatternError(ValueError):
    """A pattern that cannot be compiled; the message is meant for the person who wrote it."""


@dataclass(frozen=True, slots=True)
class LinePattern:
    """A compiled ``grep`` pattern.

    Attributes:
        line: the pattern, searched in one line (bytes without the newline).
        block: the pattern in multi-line, never-newline mode, searched in a block of whole
            lines: every line ``line`` matches holds a match of ``block``. ``None`` when the
            pattern is text-anchored (see above) and lines must be searched one by one.
    """

    line: re2._Regexp
    block: re2._Regexp | None


def re2_options(*, ignore_case: bool = False, never_nl: bool = False) -> re2.Options:
    """RE2 options for a yes/no match: quiet, and without capture groups.

    Searches only ask whether and where a match starts; with groups to report, RE2 must
    leave its DFA for a slower engine (``(a+)+$`` over 30 MiB: 3.2 s instead of 40 ms).
    """
    options = re2.Options()
    options.log_errors = False  # RE2 would log every refused pattern to stderr
    options.never_capture = True
    options.case_sensitive = not ignore_case
    options.never_nl = never_nl
    return options


def re2_compile(source: str, options: re2.Options) -> re2._Regexp:
    """Compile without keeping the pattern in ``re2``'s module cache.

    That cache holds the last 128 patterns, each with up to 8 MiB of matching state
    (measured: 128 distinct patterns kept 180 MiB): a client sending many patterns would
    grow the server's memory. Searches hold their own reference while they run.

    Raises:
        re2.error: the pattern does not compile.
    """
    try:
        return re2.compile(source, options)
    finally:
        re2.purge()


def re2_reason(exc: re2.error) -> str:
    """RE2's own words for why it refused a pattern."""
    detail = exc.args[0] if exc.args else ""
    return detail.decode("utf-8", "replace") if isinstance(detail, bytes) else str(detail)


def compile_line_pattern(pattern: str, *, literal: bool, ignore_case: bool) -> LinePattern:
    """Compile a ``grep`` pattern (``literal``: the text itself, no syntax).

    Raises:
        PatternError: the pattern is not a regular expression, or needs a feature RE2
            lacks (told apart by whether Python's ``re`` accepts it).
    """
    source = re2.escape(pattern) if literal else pattern
    try:
        line = re2_compile(source, re2_options(ignore_case=ignore_case))
    except re2.error as exc:
        reason = re2_reason(exc)
        try:
            re.compile(source)
        except (re.error, RecursionError, OverflowError):
            raise PatternError(f"invalid regular expression: {reason}") from None
        raise PatternError(f"{_UNSUPPORTED} (RE2: {reason})") from None
    block = None
    if _TEXT_ANCHORED.search(source) is None:
        # Cannot fail where the line form compiled; if it did, line by line still works.
        with contextlib.suppress(re2.error):
            block = re2_compile(
                f"(?m:{source})", re2_options(ignore_case=ignore_case, never_nl=True)
            )
    return LinePattern(line=line, block=block)
