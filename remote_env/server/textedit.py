"""Exact, unique, all-or-nothing text replacement (the ``edit`` operation's rules).

Every ``old_text`` is located in the *original* content; it must occur exactly once
(overlapping occurrences count), edits must not overlap each other, and the result must differ
from the original. Matching ignores the difference between CRLF and LF, and a UTF-8 BOM: the
file's own line ending and BOM are restored on the result.
"""

from __future__ import annotations

import difflib
import itertools
from dataclasses import dataclass

from remote_env.protocol import EditItem
from remote_env.server.errors import ToolFailure

__all__ = ["EditOutcome", "apply_edits"]

_BOM = "\ufeff"


@dataclass(frozen=True, slots=True)
class EditOutcome:
    """The new content plus what the caller reports about it."""

    content: str
    first_changed_line: int
    diff: str


def _occurrences(haystack: str, needle: str) -> list[int]:
    found: list[int] = []
    start = haystack.find(needle)
    while start != -1 and len(found) < 2:
        found.append(start)
        start = haystack.find(needle, start + 1)
    if len(found) == 2:
        # Count them all only for the error message.
        total, start = 2, haystack.find(needle, found[1] + 1)
        while start != -1:
            total += 1
            start = haystack.find(needle, start + 1)
        found.extend([-1] * (total - 2))
    return found


def apply_edits(original: str, edits: list[EditItem], display_path: str) -> EditOutcome:
    """Apply ``edits`` to ``original``.

    Raises:
        ToolFailure: ``invalid`` (empty old text), ``edit_not_found``, ``edit_not_unique``,
            ``edit_overlap`` or ``edit_no_change``; nothing is applied then.
    """
    has_bom = original.startswith(_BOM)
    body = original[1:] if has_bom else original
    uses_crlf = "\r\n" in body
    text = body.replace("\r\n", "\n")

    spans: list[tuple[int, int, str, int]] = []
    for index, edit in enumerate(edits):
        old = edit.old_text.replace("\r\n", "\n")
        new = edit.new_text.replace("\r\n", "\n")
        label = f"edits[{index}].old_text" if len(edits) > 1 else "old_text"
        if not old:
            raise ToolFailure("invalid", f"{label} must not be empty", path=display_path)
        hits = _occurrences(text, old)
        if not hits:
            raise ToolFailure(
                "edit_not_found",
                f"could not find {label} in {display_path}; it must match the file exactly, "
                "including whitespace and indentation",
                path=display_path,
            )
        if len(hits) > 1:
            raise ToolFailure(
                "edit_not_unique",
                f"found {len(hits)} occurrences of {label} in {display_path}; include more "
                "surrounding lines so it matches exactly once",
                path=display_path,
            )
        spans.append((hits[0], hits[0] + len(old), new, index))

    spans.sort()
    for previous, current in itertools.pairwise(spans):
        if current[0] < previous[1]:
            raise ToolFailure(
                "edit_overlap",
                f"edits[{previous[3]}] and edits[{current[3]}] overlap in {display_path}; "
                "merge them into one edit",
                path=display_path,
            )

    pieces: list[str] = []
    cursor = 0
    for start, end, new, _ in spans:
        pieces.append(text[cursor:start])
        pieces.append(new)
        cursor = end
    pieces.append(text[cursor:])
    result = "".join(pieces)
    if result == text:
        raise ToolFailure(
            "edit_no_change",
            f"the edits leave {display_path} unchanged",
            path=display_path,
        )

    # Text before the first span is untouched by construction, so the first difference is
    # inside the first span whose replacement differs from what it replaces.
    common = 0
    for start, end, new, _ in spans:
        old = text[start:end]
        if old != new:
            shared = 0
            while shared < min(len(old), len(new)) and old[shared] == new[shared]:
                shared += 1
            common = start + shared
            break
    first_changed_line = text.count("\n", 0, common) + 1
    diff = "".join(
        difflib.unified_diff(
            text.splitlines(keepends=True),
            result.splitlines(keepends=True),
            fromfile=f"a/{display_path}",
            tofile=f"b/{display_path}",
        )
    )
    restored = result.replace("\n", "\r\n") if uses_crlf else result
    if has_bom:
        restored = _BOM + restored
    return EditOutcome(content=restored, first_changed_line=first_changed_line, diff=diff)
