"""The coding tools' logic as pure functions over the :class:`~core.env.ExecutionEnv` port.

Each ``run_*`` function takes an env, validated arguments (the pydantic models below are the
tools' parameter schemas) and, for mutating tools, the call's :class:`~core.env.OpRef`, and
returns a :class:`ToolOutput`: the text the model sees plus structured ``details``.

Failures the model can act on (:class:`~core.env.EnvOperationError`: missing file, ambiguous
edit, timeout, non-zero exit, ...) become outputs with ``is_error=True``. Failures of the
environment itself (unreachable, unauthorised, op conflict, op lost) propagate as exceptions
for the harness to classify.

Limits follow pi's coding tools: output is cut at 2,000 lines or 50 KiB, whichever comes
first. ``read`` keeps the head and tells the model which ``offset`` continues; ``bash`` keeps
the tail (the end of a command's output is what matters).

Replay policies (docs/design.md § The execution environment): ``read``, ``ls``, ``find``,
``grep`` are ``safe``; ``bash`` is ``recoverable`` (its op id lets the env return the
recorded result); ``write`` and ``edit`` carry op ids too and may be declared
``recoverable`` by the harness.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import field

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator

from core.env import (
    CommandCancelled,
    CommandTimeout,
    EnvOperationError,
    ExecResult,
    ExecutionEnv,
    GrepOptions,
    OpRef,
    OutputCallback,
    TextEdit,
)
from core.readonly import readonly
from core.textlimits import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_LINES,
    Truncation,
    format_size,
    truncate_head,
    truncate_tail,
)

__all__ = [
    "DEFAULT_FIND_LIMIT",
    "DEFAULT_GREP_LIMIT",
    "DEFAULT_LS_LIMIT",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_LINES",
    "GREP_MAX_LINE_LENGTH",
    "BashArgs",
    "EditArgs",
    "EditSpec",
    "FindArgs",
    "GrepArgs",
    "LsArgs",
    "ReadArgs",
    "ToolOutput",
    "Truncation",
    "WriteArgs",
    "format_size",
    "run_bash",
    "run_edit",
    "run_find",
    "run_grep",
    "run_ls",
    "run_read",
    "run_write",
    "truncate_head",
    "truncate_tail",
]

GREP_MAX_LINE_LENGTH = 500
DEFAULT_LS_LIMIT = 500
DEFAULT_FIND_LIMIT = 1000
DEFAULT_GREP_LIMIT = 100


# --------------------------------------------------------------------------- schemas


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class ReadArgs(_Args):
    """Read a text file. ``offset`` is the 1-based first line; ``limit`` caps the lines."""

    path: str = Field(min_length=1, description="file to read, relative to the workspace")
    offset: int | None = Field(default=None, ge=1, description="line to start from (1-based)")
    limit: int | None = Field(default=None, ge=1, description="maximum number of lines")


class WriteArgs(_Args):
    """Create or overwrite a file (parent directories are created)."""

    path: str = Field(min_length=1, description="file to write")
    content: str = Field(description="the complete new content")


class EditSpec(_Args):
    """One exact replacement; ``old_text`` must occur exactly once in the file."""

    old_text: str = Field(
        min_length=1,
        validation_alias=AliasChoices("old_text", "oldText"),
        description="exact text to replace, unique in the file",
    )
    new_text: str = Field(
        validation_alias=AliasChoices("new_text", "newText"), description="replacement text"
    )


class EditArgs(_Args):
    """Several exact replacements in one file, applied together or not at all."""

    path: str = Field(min_length=1, description="file to edit")
    edits: list[EditSpec] = Field(min_length=1, description="replacements, matched on the original")


class LsArgs(_Args):
    """List a directory."""

    path: str = Field(default=".", min_length=1, description="directory to list")
    limit: int | None = Field(
        default=None, ge=1, description=f"maximum entries (default {DEFAULT_LS_LIMIT})"
    )


class FindArgs(_Args):
    """Find files by glob pattern (``*.py``, ``src/**/*.ts``)."""

    pattern: str = Field(min_length=1, description="glob pattern")
    path: str = Field(default=".", min_length=1, description="directory to search")
    limit: int | None = Field(
        default=None, ge=1, description=f"maximum results (default {DEFAULT_FIND_LIMIT})"
    )


class GrepArgs(_Args):
    """Search file contents for a regular expression."""

    pattern: str = Field(min_length=1, description="regular expression (or text with literal)")
    path: str = Field(default=".", min_length=1, description="file or directory to search")
    glob: str | None = Field(
        default=None, min_length=1, description="only files matching this glob"
    )
    ignore_case: bool = Field(
        default=False, validation_alias=AliasChoices("ignore_case", "ignoreCase")
    )
    literal: bool = Field(default=False, description="treat the pattern as plain text")
    context: int | None = Field(default=None, ge=0, le=100, description="lines around each match")
    limit: int | None = Field(
        default=None, ge=1, description=f"maximum matches (default {DEFAULT_GREP_LIMIT})"
    )


class BashArgs(_Args):
    """Run a shell command in the workspace."""

    command: str = Field(min_length=1, description="bash command line")
    timeout: float | None = Field(
        default=None, gt=0, description="seconds before the command is killed"
    )

    @field_validator("timeout")
    @classmethod
    def _finite(cls, value: float | None) -> float | None:
        if value is not None and not math.isfinite(value):
            raise ValueError("timeout must be finite")
        return value


# --------------------------------------------------------------------------- output


@readonly
class ToolOutput:
    """What a tool returns: ``text`` for the model, ``details`` for the harness and UIs."""

    text: str
    details: Mapping[str, object] = field(default_factory=dict)
    is_error: bool = False


def _failure(exc: EnvOperationError, **details: object) -> ToolOutput:
    return ToolOutput(text=exc.message, details={"code": exc.code, **details}, is_error=True)


# --------------------------------------------------------------------------- read


async def run_read(env: ExecutionEnv, args: ReadArgs) -> ToolOutput:
    """Read a window of a text file with head truncation and a continuation notice."""
    offset = args.offset or 1
    window = DEFAULT_MAX_LINES if args.limit is None else min(args.limit, DEFAULT_MAX_LINES)
    try:
        result = await env.read(args.path, offset, window, max_bytes=DEFAULT_MAX_BYTES)
    except EnvOperationError as exc:
        return _failure(exc, path=args.path)
    details: dict[str, object] = {
        "path": args.path,
        "offset": offset,
        "lines": result.lines,
        "total_lines": result.total_lines,
        "total_bytes": result.total_bytes,
        "truncated": False,
    }
    if result.total_lines == 0 and offset == 1:
        return ToolOutput(text="(empty file)", details=details)
    if offset > result.total_lines:
        return ToolOutput(
            text=f"Offset {offset} is beyond end of file ({result.total_lines} lines total)",
            details={**details, "code": "invalid"},
            is_error=True,
        )
    if result.lines == 0 and result.truncated:
        size = format_size(result.next_line_bytes or 0)
        return ToolOutput(
            text=(
                f"[Line {offset} is {size}, exceeds {format_size(DEFAULT_MAX_BYTES)} limit. "
                f"Use bash: sed -n '{offset}p' {args.path} | head -c {DEFAULT_MAX_BYTES}]"
            ),
            details={**details, "truncated": True, "truncated_by": "bytes"},
        )
    end = offset + result.lines - 1
    text = result.text
    if end < result.total_lines:
        following = end + 1
        if result.truncated:
            notice = (
                f"[Showing lines {offset}-{end} of {result.total_lines} "
                f"({format_size(DEFAULT_MAX_BYTES)} limit). Use offset={following} to continue.]"
            )
            details.update(truncated=True, truncated_by="bytes")
        elif args.limit is None or args.limit > DEFAULT_MAX_LINES:
            notice = (
                f"[Showing lines {offset}-{end} of {result.total_lines}. "
                f"Use offset={following} to continue.]"
            )
            details.update(truncated=True, truncated_by="lines")
        else:
            remaining = result.total_lines - end
            notice = f"[{remaining} more lines in file. Use offset={following} to continue.]"
        text = f"{text}\n\n{notice}"
    return ToolOutput(text=text, details=details)


# --------------------------------------------------------------------------- write / edit


async def run_write(env: ExecutionEnv, args: WriteArgs, op: OpRef) -> ToolOutput:
    """Write a whole file atomically."""
    try:
        result = await env.write(args.path, args.content, op)
    except EnvOperationError as exc:
        return _failure(exc, path=args.path)
    return ToolOutput(
        text=f"Successfully wrote {result.bytes_written} bytes to {args.path}",
        details={"path": args.path, "bytes": result.bytes_written, "sha256": result.sha256},
    )


async def run_edit(env: ExecutionEnv, args: EditArgs, op: OpRef) -> ToolOutput:
    """Apply exact, unique replacements, all or nothing."""
    edits = [TextEdit(spec.old_text, spec.new_text) for spec in args.edits]
    try:
        result = await env.edit(args.path, edits, op)
    except EnvOperationError as exc:
        return _failure(exc, path=args.path)
    blocks = "block" if result.replacements == 1 else "blocks"
    return ToolOutput(
        text=f"Successfully replaced {result.replacements} {blocks} in {args.path}.",
        details={
            "path": args.path,
            "diff": result.diff,
            "first_changed_line": result.first_changed_line,
            "sha256": result.sha256,
        },
    )


# --------------------------------------------------------------------------- ls / find / grep


def _capped(lines: list[str], notices: list[str]) -> tuple[str, bool]:
    # Entry counts are capped by the env already; only the byte budget applies here.
    cut = truncate_head("\n".join(lines), max(len(lines), 1), DEFAULT_MAX_BYTES)
    if cut.truncated:
        notices.append(f"[{format_size(DEFAULT_MAX_BYTES)} limit reached]")
    return cut.text, cut.truncated


def _with_notices(text: str, notices: list[str]) -> str:
    return text if not notices else f"{text}\n\n" + " ".join(notices)


async def run_ls(env: ExecutionEnv, args: LsArgs) -> ToolOutput:
    """List a directory: sorted, dotfiles included, ``/`` after directories."""
    limit = args.limit or DEFAULT_LS_LIMIT
    try:
        result = await env.ls(args.path, limit=limit)
    except EnvOperationError as exc:
        return _failure(exc, path=args.path)
    if not result.entries:
        return ToolOutput(text="(empty directory)", details={"path": args.path, "entries": 0})
    names = [entry.name + ("/" if entry.kind == "dir" else "") for entry in result.entries]
    notices: list[str] = []
    if result.truncated:
        notices.append(f"[{limit} entries limit reached. Use limit={limit * 2} for more]")
    text, cut = _capped(names, notices)
    return ToolOutput(
        text=_with_notices(text, notices),
        details={"path": args.path, "entries": len(names), "truncated": result.truncated or cut},
    )


def _search_stopped(stopped_by: str | None) -> list[str]:
    """The notice for a search the environment cut short (not by the caller's limit)."""
    if stopped_by == "scan_bytes":
        return ["[Search stopped: it read as much as one search may. Narrow the path or glob]"]
    if stopped_by == "deadline":
        return ["[Search stopped at its time limit. Narrow the path, glob or pattern]"]
    return []


async def run_find(env: ExecutionEnv, args: FindArgs) -> ToolOutput:
    """Find paths by glob, relative to the searched directory."""
    limit = args.limit or DEFAULT_FIND_LIMIT
    try:
        result = await env.find(args.pattern, args.path, limit=limit)
    except EnvOperationError as exc:
        return _failure(exc, path=args.path)
    if not result.paths:
        # An empty answer cut short by the environment is not proof that nothing matches.
        text = _with_notices("No files found matching pattern", _search_stopped(result.stopped_by))
        return ToolOutput(text=text, details={"path": args.path, "results": 0})
    notices = _search_stopped(result.stopped_by)
    if result.truncated and not notices:
        notices.append(
            f"[{limit} results limit reached. Use limit={limit * 2} for more, or refine pattern]"
        )
    text, cut = _capped(list(result.paths), notices)
    return ToolOutput(
        text=_with_notices(text, notices),
        details={
            "path": args.path,
            "results": len(result.paths),
            "truncated": result.truncated or cut,
        },
    )


async def run_grep(env: ExecutionEnv, args: GrepArgs) -> ToolOutput:
    """Search contents; ``path:line: text`` for matches, ``path-line- text`` for context."""
    limit = args.limit or DEFAULT_GREP_LIMIT
    options = GrepOptions(
        glob=args.glob,
        ignore_case=args.ignore_case,
        literal=args.literal,
        context=args.context or 0,
        limit=limit,
        max_line_length=GREP_MAX_LINE_LENGTH,
    )
    try:
        result = await env.grep(args.pattern, args.path, options)
    except EnvOperationError as exc:
        return _failure(exc, path=args.path)
    if not result.matches:
        text = _with_notices("No matches found", _search_stopped(result.stopped_by))
        return ToolOutput(text=text, details={"path": args.path, "matches": 0})
    lines = [
        f"{m.path}-{m.line}- {m.text}" if m.is_context else f"{m.path}:{m.line}: {m.text}"
        for m in result.matches
    ]
    count = sum(1 for m in result.matches if not m.is_context)
    notices = _search_stopped(result.stopped_by)
    if result.truncated and not notices:
        notices.append(
            f"[{limit} matches limit reached. Use limit={limit * 2} for more, or refine pattern]"
        )
    if any(len(m.text) > GREP_MAX_LINE_LENGTH for m in result.matches):
        notices.append(
            f"[Some lines truncated to {GREP_MAX_LINE_LENGTH} chars. Use read to see full lines]"
        )
    text, cut = _capped(lines, notices)
    return ToolOutput(
        text=_with_notices(text, notices),
        details={"path": args.path, "matches": count, "truncated": result.truncated or cut},
    )


# --------------------------------------------------------------------------- bash


def _render_command(result: ExecResult) -> tuple[str, dict[str, object]]:
    output = result.output[:-1] if result.output.endswith("\n") else result.output
    cut = truncate_tail(output, DEFAULT_MAX_LINES, DEFAULT_MAX_BYTES)
    # Line numbers refer to the command's whole output, not just the tail we received.
    total = result.total_lines + (0 if result.output.endswith("\n") or not output else 1)
    total = max(total, cut.total_lines if output else 0)
    details: dict[str, object] = {
        "exit_code": result.exit_code,
        "signal": result.signal,
        "total_bytes": result.total_bytes,
        "total_lines": total,
        "truncated": cut.truncated or result.truncated,
    }
    text = cut.text or "(no output)"
    if cut.truncated or result.truncated:
        start, end = total - cut.kept_lines + 1, total
        if cut.partial_line:
            notice = f"[Showing last {format_size(cut.kept_bytes)} of line {end}."
        elif cut.by == "bytes":
            notice = (
                f"[Showing lines {start}-{end} of {total} ({format_size(DEFAULT_MAX_BYTES)} limit)."
            )
        else:
            notice = f"[Showing lines {start}-{end} of {total}."
        if result.truncated:
            notice += f" The command wrote {format_size(result.total_bytes)} in total."
        text = f"{text}\n\n{notice}]"
    return text, details


async def run_bash(
    env: ExecutionEnv,
    args: BashArgs,
    op: OpRef,
    *,
    on_output: OutputCallback | None = None,
) -> ToolOutput:
    """Run a command; keep the tail of its output; a non-zero exit is an error result."""
    try:
        result = await env.run_command(
            args.command, op=op, timeout=args.timeout, on_output=on_output
        )
    except (CommandTimeout, CommandCancelled) as exc:
        if exc.result is None:
            return _failure(exc)
        text, details = _render_command(exc.result)
        prefix = "" if text == "(no output)" else f"{text}\n\n"
        return ToolOutput(
            text=f"{prefix}{exc.message}", details={**details, "code": exc.code}, is_error=True
        )
    except EnvOperationError as exc:
        return _failure(exc)
    text, details = _render_command(result)
    if result.exit_code == 0:
        return ToolOutput(text=text, details=details)
    reason = (
        f"Command exited with code {result.exit_code}"
        if result.exit_code is not None
        else f"Command was killed by signal {result.signal}"
    )
    return ToolOutput(text=f"{text}\n\n{reason}", details=details, is_error=True)
