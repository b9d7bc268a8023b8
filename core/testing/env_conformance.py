"""Conformance cases every :class:`~core.env.ExecutionEnv` must pass (runner independent).

Each :class:`Case` is a plain async function with plain ``assert`` statements; nothing here
imports a test framework, so any runner (or none) can drive it::

    for case in env_cases():
        asyncio.run(case.run(factory))

``factory`` is an :data:`EnvFactory`: calling it returns an async context manager that yields
an env. **Every env a factory yields must see the same workspace**, which must be empty when
the case starts; give each case a fresh factory. Cases enter the factory more than once to
check that op results outlive one client. The env's shell must be a POSIX shell with
``echo``, ``sleep``, ``pwd`` and ``printf``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import TypeVar

from core.env import (
    CommandTimeout,
    EditNotFound,
    EditNotUnique,
    EnvError,
    ExecResult,
    ExecutionEnv,
    GrepOptions,
    OpConflict,
    OpRef,
    PathIsDirectory,
    PathNotDirectory,
    PathNotFound,
    PathOutsideWorkspace,
    TextEdit,
)
from core.readonly import readonly

__all__ = ["Case", "EnvCase", "EnvFactory", "env_cases"]

EnvFactory = Callable[[], AbstractAsyncContextManager[ExecutionEnv]]

_E = TypeVar("_E", bound=EnvError)


@readonly
class Case:
    """One named conformance check; ``run(factory)`` raises ``AssertionError`` on failure."""

    name: str
    run: Callable[[EnvFactory], Awaitable[None]]


#: Alias for re-exporting next to ``StorageCase`` from ``core.testing``.
EnvCase = Case


async def _raises(kind: type[_E], call: Awaitable[object]) -> _E:
    try:
        await call
    except kind as exc:
        return exc
    raise AssertionError(f"expected {kind.__name__}")


def _op(case: str, n: int) -> OpRef:
    return OpRef(id=f"conformance.{case}:{n}")


async def _put(env: ExecutionEnv, path: str, content: str, op: OpRef) -> None:
    await env.write(path, content, op)


async def _content(env: ExecutionEnv, path: str) -> str:
    result = await env.read(path)
    return result.text


# ----------------------------------------------------------------------------- files


async def read_windows(factory: EnvFactory) -> None:
    async with factory() as env:
        await _put(env, "lines.txt", "".join(f"line{i}\n" for i in range(1, 11)), _op("read", 1))
        whole = await env.read("lines.txt")
        assert whole.lines == 10
        assert whole.total_lines == 10
        assert whole.text.split("\n") == [f"line{i}" for i in range(1, 11)]
        assert not whole.truncated
        window = await env.read("lines.txt", 3, 2)
        assert window.text == "line3\nline4"
        assert (window.offset, window.lines, window.total_lines) == (3, 2, 10)
        tail = await env.read("lines.txt", 9)
        assert tail.text == "line9\nline10"
        past = await env.read("lines.txt", 11)
        assert (past.lines, past.total_lines, past.text) == (0, 10, "")
        capped = await env.read("lines.txt", 1, None, max_bytes=12)
        assert capped.text == "line1\nline2"
        assert capped.truncated
        assert capped.next_line_bytes == 5
        too_big = await env.read("lines.txt", 1, None, max_bytes=3)
        assert (too_big.lines, too_big.truncated, too_big.next_line_bytes) == (0, True, 5)
        await _put(env, "empty.txt", "", _op("read", 2))
        empty = await env.read("empty.txt")
        assert (empty.lines, empty.total_lines, empty.total_bytes) == (0, 0, 0)


async def read_errors(factory: EnvFactory) -> None:
    async with factory() as env:
        await _raises(PathNotFound, env.read("missing.txt"))
        await _put(env, "dir/file.txt", "x", _op("read_errors", 1))
        await _raises(PathIsDirectory, env.read("dir"))
        await _raises(PathNotFound, env.read("dir/nope/file.txt"))


async def write_then_read(factory: EnvFactory) -> None:
    async with factory() as env:
        content = "héllo wörld\nsecond line\n"
        result = await env.write("a/b/c.txt", content, _op("write", 1))
        assert result.bytes_written == len(content.encode("utf-8"))
        assert len(result.sha256) == 64
        assert await _content(env, "a/b/c.txt") == "héllo wörld\nsecond line"
        await env.write("a/b/c.txt", "replaced", _op("write", 2))
        again = await env.read("a/b/c.txt")
        assert (again.text, again.total_bytes) == ("replaced", 8)
        await _raises(PathIsDirectory, env.write("a/b", "x", _op("write", 3)))


async def edit_unique(factory: EnvFactory) -> None:
    async with factory() as env:
        await _put(env, "code.py", "def f():\n    return 1\n\nx = f()\n", _op("edit", 1))
        result = await env.edit(
            "code.py",
            [TextEdit("return 1", "return 2"), TextEdit("x = f()", "y = f()")],
            _op("edit", 2),
        )
        assert result.replacements == 2
        assert result.first_changed_line == 2
        assert "-    return 1" in result.diff
        assert "+    return 2" in result.diff
        assert await _content(env, "code.py") == "def f():\n    return 2\n\ny = f()"


async def edit_all_or_nothing(factory: EnvFactory) -> None:
    async with factory() as env:
        original = "alpha\nbeta\nbeta\n"
        await _put(env, "f.txt", original, _op("edit_aon", 1))
        await _raises(
            EditNotFound,
            env.edit(
                "f.txt", [TextEdit("alpha", "ALPHA"), TextEdit("gamma", "x")], _op("edit_aon", 2)
            ),
        )
        unique = await _raises(
            EditNotUnique,
            env.edit(
                "f.txt", [TextEdit("alpha", "ALPHA"), TextEdit("beta", "x")], _op("edit_aon", 3)
            ),
        )
        assert unique.code == "edit_not_unique"
        assert await _content(env, "f.txt") == original.rstrip("\n")
        await _raises(PathNotFound, env.edit("nope.txt", [TextEdit("a", "b")], _op("edit_aon", 4)))


async def edit_keeps_crlf(factory: EnvFactory) -> None:
    async with factory() as env:
        await _put(env, "win.txt", "one\r\ntwo\r\n", _op("crlf", 1))
        await env.edit("win.txt", [TextEdit("one\ntwo", "uno\ndos")], _op("crlf", 2))
        raw = await env.read("win.txt")
        assert raw.text == "uno\r\ndos\r"
        assert raw.total_bytes == len(b"uno\r\ndos\r\n")


async def ls_entries(factory: EnvFactory) -> None:
    async with factory() as env:
        await _put(env, "b.txt", "12345", _op("ls", 1))
        await _put(env, ".hidden", "", _op("ls", 2))
        await _put(env, "A/inner.txt", "", _op("ls", 3))
        listing = await env.ls(".")
        names = [(entry.name, entry.kind) for entry in listing.entries]
        assert names == [(".hidden", "file"), ("A", "dir"), ("b.txt", "file")]
        assert listing.entries[2].size == 5
        limited = await env.ls(".", limit=2)
        assert len(limited.entries) == 2
        assert limited.truncated
        await _raises(PathNotFound, env.ls("missing"))
        await _raises(PathNotDirectory, env.ls("b.txt"))


async def find_glob(factory: EnvFactory) -> None:
    async with factory() as env:
        for n, path in enumerate(["a.py", "sub/b.py", "sub/c.txt", "sub/deep/d.py"]):
            await _put(env, path, "x", _op("find", n))
        found = await env.find("*.py")
        assert found.paths == ("a.py", "sub/b.py", "sub/deep/d.py")
        assert (await env.find("sub/*.txt")).paths == ("sub/c.txt",)
        assert (await env.find("**/deep/*.py")).paths == ("sub/deep/d.py",)
        assert (await env.find("*.{py,txt}", "sub")).paths == ("b.py", "c.txt", "deep/d.py")
        assert (await env.find("deep")).paths == ("sub/deep/",)
        limited = await env.find("*.py", limit=1)
        assert len(limited.paths) == 1
        assert limited.truncated
        assert (await env.find("*.rs")).paths == ()


async def grep_matches(factory: EnvFactory) -> None:
    async with factory() as env:
        await _put(env, "src/a.py", "import os\nx = 1\nTODO: fix\ny = 2\n", _op("grep", 1))
        await _put(env, "src/b.txt", "todo later\n(a+b)\n", _op("grep", 2))
        plain = await env.grep("TODO")
        assert [(m.path, m.line, m.text) for m in plain.matches] == [("src/a.py", 3, "TODO: fix")]
        folded = await env.grep("todo", ".", GrepOptions(ignore_case=True))
        assert [m.path for m in folded.matches] == ["src/a.py", "src/b.txt"]
        only_txt = await env.grep("todo", "src", GrepOptions(ignore_case=True, glob="*.txt"))
        assert [(m.path, m.line) for m in only_txt.matches] == [("b.txt", 1)]
        literal = await env.grep("(a+b)", ".", GrepOptions(literal=True))
        assert [m.line for m in literal.matches] == [2]
        around = await env.grep("TODO", "src/a.py", GrepOptions(context=1))
        assert [(m.line, m.is_context) for m in around.matches] == [
            (2, True),
            (3, False),
            (4, True),
        ]
        capped = await env.grep("=", ".", GrepOptions(limit=1))
        assert len([m for m in capped.matches if not m.is_context]) == 1
        assert capped.truncated
        assert (await env.grep("nothing-here")).matches == ()


# ----------------------------------------------------------------------------- exec


async def exec_exit_codes(factory: EnvFactory) -> None:
    async with factory() as env:
        ok = await env.run_command("echo out; echo err >&2", op=_op("exec", 1))
        assert ok.exit_code == 0
        assert "out\n" in ok.output
        assert "err\n" in ok.output
        assert ok.total_bytes == 8
        assert ok.total_lines == 2
        failed = await env.run_command("exit 3", op=_op("exec", 2))
        assert failed.exit_code == 3
        await _put(env, "sub/keep", "", _op("exec", 3))
        where = await env.run_command("pwd", op=_op("exec", 4), cwd="sub")
        assert where.output.rstrip("\n").endswith("/sub")
        with_env = await env.run_command(
            'printf %s "$GREETING"', op=_op("exec", 5), env={"GREETING": "hi"}
        )
        assert with_env.output == "hi"


async def exec_streams_output(factory: EnvFactory) -> None:
    async with factory() as env:
        chunks: list[str] = []
        result = await env.run_command(
            "echo one; sleep 0.3; echo two", op=_op("stream", 1), on_output=chunks.append
        )
        assert "".join(chunks) == "one\ntwo\n"
        assert result.output == "one\ntwo\n"

        async def collect(text: str) -> None:
            chunks.append(text)

        chunks.clear()
        await env.run_command("printf 'a\\nb'", op=_op("stream", 2), on_output=collect)
        assert "".join(chunks) == "a\nb"


async def exec_timeout(factory: EnvFactory) -> None:
    async with factory() as env:
        error = await _raises(
            CommandTimeout,
            env.run_command("echo started; sleep 10", op=_op("timeout", 1), timeout=0.5),
        )
        assert error.result is not None
        assert error.result.timed_out
        assert "started" in error.result.output
        status = await env.op_status(_op("timeout", 1).id)
        assert status.state == "done"
        assert isinstance(status.error, CommandTimeout)


# ----------------------------------------------------------------------------- ops


async def op_executes_once(factory: EnvFactory) -> None:
    async with factory() as env:
        op = _op("once", 1)
        first = await env.run_command("echo run >> count.txt; echo done", op=op)
        second = await env.run_command("echo run >> count.txt; echo done", op=op)
        assert first == second
        retried = await env.run_command(
            "echo run >> count.txt; echo done", op=OpRef(op.id, attempt=2)
        )
        assert retried == first
        assert (await env.read("count.txt")).total_lines == 1


async def op_concurrent_duplicates(factory: EnvFactory) -> None:
    async with factory() as env:
        op = _op("concurrent", 1)
        results = await asyncio.gather(
            *(env.run_command("echo run >> count.txt; sleep 0.2", op=op) for _ in range(5))
        )
        assert all(result == results[0] for result in results)
        assert (await env.read("count.txt")).total_lines == 1


async def op_write_replays_record(factory: EnvFactory) -> None:
    async with factory() as env:
        op = _op("replay", 1)
        first = await env.write("f.txt", "first", op)
        await env.write("f.txt", "changed by someone else", _op("replay", 2))
        again = await env.write("f.txt", "first", op)
        assert again == first
        # The replay returned the record; it did not write again.
        assert await _content(env, "f.txt") == "changed by someone else"


async def op_conflict(factory: EnvFactory) -> None:
    async with factory() as env:
        op = _op("conflict", 1)
        await env.run_command("echo a", op=op)
        await _raises(OpConflict, env.run_command("echo b", op=op))
        await env.write("g.txt", "x", _op("conflict", 2))
        await _raises(OpConflict, env.write("g.txt", "y", _op("conflict", 2)))


async def op_status_after_completion(factory: EnvFactory) -> None:
    op = _op("status", 1)
    async with factory() as env:
        result = await env.run_command("echo recorded", op=op)
        await _put(env, "e.txt", "dup dup", _op("status", 2))
        await _raises(EditNotUnique, env.edit("e.txt", [TextEdit("dup", "x")], _op("status", 3)))
    # A different client instance (a restarted harness) recovers the recorded outcomes.
    async with factory() as env:
        status = await env.op_status(op.id)
        assert status.state == "done"
        assert isinstance(status.result, ExecResult)
        assert status.result == result
        assert status.error is None
        failed = await env.op_status(_op("status", 3).id)
        assert failed.state == "done"
        assert isinstance(failed.error, EditNotUnique)


async def op_status_unknown(factory: EnvFactory) -> None:
    async with factory() as env:
        status = await env.op_status("never-sent:1")
        assert status.state == "unknown"
        assert status.result is None


async def paths_stay_inside(factory: EnvFactory) -> None:
    async with factory() as env:
        await _raises(PathOutsideWorkspace, env.read("../outside.txt"))
        await _raises(PathOutsideWorkspace, env.read("/etc/passwd"))
        await _raises(PathOutsideWorkspace, env.write("a/../../x.txt", "x", _op("inside", 1)))
        await _raises(PathOutsideWorkspace, env.ls(".."))
        await _raises(PathOutsideWorkspace, env.run_command("pwd", op=_op("inside", 2), cwd=".."))
        # Refused before any effect: the op id is still free.
        assert (await env.op_status(_op("inside", 1).id)).state == "unknown"
        await env.write("a/../x.txt", "fine", _op("inside", 1))
        assert await _content(env, "x.txt") == "fine"


_CASES = (
    read_windows,
    read_errors,
    write_then_read,
    edit_unique,
    edit_all_or_nothing,
    edit_keeps_crlf,
    ls_entries,
    find_glob,
    grep_matches,
    exec_exit_codes,
    exec_streams_output,
    exec_timeout,
    op_executes_once,
    op_concurrent_duplicates,
    op_write_replays_record,
    op_conflict,
    op_status_after_completion,
    op_status_unknown,
    paths_stay_inside,
)


def env_cases() -> list[Case]:
    """Every conformance case, in a stable order."""
    return [Case(name=case.__name__, run=case) for case in _CASES]
