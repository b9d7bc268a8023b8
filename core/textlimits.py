"""Cutting text to a line and byte budget: what tools and the harness show a model.

The defaults follow pi's coding tools: 2,000 lines or 50 KiB, whichever is hit first.
"""

from __future__ import annotations

from typing import Literal

from core.readonly import readonly

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_LINES",
    "Truncation",
    "format_size",
    "truncate_head",
    "truncate_tail",
]

DEFAULT_MAX_LINES = 2000
DEFAULT_MAX_BYTES = 50 * 1024


def format_size(size: int) -> str:
    """``512B``, ``50.0KB``, ``1.5MB`` (binary units, one decimal)."""
    if size < 1024:
        return f"{size}B"
    if size < 1024 * 1024:
        return f"{size / 1024:.1f}KB"
    return f"{size / (1024 * 1024):.1f}MB"


@readonly
class Truncation:
    """The result of cutting text to a line and byte budget.

    ``by`` says which limit cut it (``None`` when nothing was cut); ``partial_line`` is set by
    :func:`truncate_tail` when even the last line alone was too big and only its end is kept.
    """

    text: str
    by: Literal["lines", "bytes"] | None
    total_lines: int
    kept_lines: int
    kept_bytes: int
    partial_line: bool = False

    @property
    def truncated(self) -> bool:
        """Whether anything was cut."""
        return self.by is not None


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8"))


def truncate_head(text: str, max_lines: int, max_bytes: int) -> Truncation:
    """Keep whole lines from the start within ``max_lines`` and ``max_bytes``."""
    lines = text.split("\n")
    kept: list[str] = []
    used = 0
    by: Literal["lines", "bytes"] | None = None
    for line in lines:
        if len(kept) == max_lines:
            by = "lines"
            break
        cost = _utf8_len(line) + (1 if kept else 0)
        if used + cost > max_bytes:
            by = "bytes"
            break
        kept.append(line)
        used += cost
    return Truncation("\n".join(kept), by, len(lines), len(kept), used)


def truncate_tail(text: str, max_lines: int, max_bytes: int) -> Truncation:
    """Keep whole lines from the end within the limits; if the last line alone is too big,
    keep its last ``max_bytes`` bytes."""
    lines = text.split("\n")
    kept: list[str] = []
    used = 0
    by: Literal["lines", "bytes"] | None = None
    for line in reversed(lines):
        if len(kept) == max_lines:
            by = "lines"
            break
        cost = _utf8_len(line) + (1 if kept else 0)
        if used + cost > max_bytes:
            by = "bytes"
            if not kept:
                tail = line.encode("utf-8")[-max_bytes:].decode("utf-8", "ignore")
                return Truncation(tail, by, len(lines), 1, _utf8_len(tail), partial_line=True)
            break
        kept.append(line)
        used += cost
    kept.reverse()
    return Truncation("\n".join(kept), by, len(lines), len(kept), used)
