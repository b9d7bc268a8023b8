"""The coding tools as a harness extension: read, ls, find, grep, write, edit, bash.

Every tool reaches files and shells only through the conversation's
:class:`~core.env.ExecutionEnv`. Replay policies: the read-only tools are ``safe`` (a
rerun after a crash is harmless); ``write``, ``edit`` and ``bash`` are ``recoverable`` —
their side effect is one environment op keyed by the call's op id, so after a crash the
harness gets the recorded result back instead of running them twice.
"""

from __future__ import annotations

from typing import Any

from core.harness.registry import Extension, define_extension, define_tool
from core.harness.tools import ToolContext, ToolResult
from core.jsonvalue import json_copy
from core.tools.coding import (
    BashArgs,
    EditArgs,
    FindArgs,
    GrepArgs,
    LsArgs,
    ReadArgs,
    ToolOutput,
    WriteArgs,
    run_bash,
    run_edit,
    run_find,
    run_grep,
    run_ls,
    run_read,
    run_write,
)

__all__ = ["coding_tools"]


def _result(output: ToolOutput) -> ToolResult:
    return ToolResult(
        output.text, is_error=output.is_error, details=json_copy(dict(output.details))
    )


async def _read(args: ReadArgs, ctx: ToolContext) -> ToolResult:
    return _result(await run_read(ctx.env, args))


async def _ls(args: LsArgs, ctx: ToolContext) -> ToolResult:
    return _result(await run_ls(ctx.env, args))


async def _find(args: FindArgs, ctx: ToolContext) -> ToolResult:
    return _result(await run_find(ctx.env, args))


async def _grep(args: GrepArgs, ctx: ToolContext) -> ToolResult:
    return _result(await run_grep(ctx.env, args))


async def _write(args: WriteArgs, ctx: ToolContext) -> ToolResult:
    return _result(await run_write(ctx.env, args, ctx.op))


async def _edit(args: EditArgs, ctx: ToolContext) -> ToolResult:
    return _result(await run_edit(ctx.env, args, ctx.op))


async def _bash(args: BashArgs, ctx: ToolContext) -> ToolResult:
    return _result(await run_bash(ctx.env, args, ctx.op, on_output=ctx.output))


def coding_tools(name: str = "coding") -> Extension:
    """The extension (install it in a :class:`~core.harness.Registry`)."""
    tools: list[Any] = [
        define_tool(
            "read",
            description="Read a text file (a window of lines; use offset/limit to page).",
            parameters=ReadArgs,
            execute=_read,
            replay="safe",
        ),
        define_tool(
            "ls", description="List a directory.", parameters=LsArgs, execute=_ls, replay="safe"
        ),
        define_tool(
            "find",
            description="Find files by glob pattern.",
            parameters=FindArgs,
            execute=_find,
            replay="safe",
        ),
        define_tool(
            "grep",
            description="Search file contents with a regular expression.",
            parameters=GrepArgs,
            execute=_grep,
            replay="safe",
        ),
        define_tool(
            "write",
            description="Write a whole file (creating directories).",
            parameters=WriteArgs,
            execute=_write,
            replay="recoverable",
        ),
        define_tool(
            "edit",
            description="Replace exact, unique text in a file; several edits apply all or nothing.",
            parameters=EditArgs,
            execute=_edit,
            replay="recoverable",
        ),
        define_tool(
            "bash",
            description="Run a shell command in the workspace.",
            parameters=BashArgs,
            execute=_bash,
            replay="recoverable",
        ),
    ]
    return define_extension(name, tools=tools)
