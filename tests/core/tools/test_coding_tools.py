"""The coding tools (core.tools.coding) over a real RemoteEnv and server."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from pydantic import ValidationError

from core.env import ExecutionEnv, OpRef
from core.tools.coding import (
    DEFAULT_MAX_BYTES,
    BashArgs,
    EditArgs,
    FindArgs,
    GrepArgs,
    LsArgs,
    ReadArgs,
    WriteArgs,
    format_size,
    run_bash,
    run_edit,
    run_find,
    run_grep,
    run_ls,
    run_read,
    run_write,
    truncate_head,
    truncate_tail,
)
from tests.remote_env.support import asgi_env, run, running_app, settings


def _with_env(tmp_path: Path, body: Callable[[ExecutionEnv], Awaitable[None]]) -> None:
    async def main() -> None:
        async with running_app(settings(tmp_path / "root")) as app, asgi_env(app, "ws") as env:
            await body(env)

    run(main())


def _files(tmp_path: Path, files: dict[str, str]) -> None:
    for name, content in files.items():
        path = tmp_path / "root" / "ws" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)


def test_read_truncates_the_head_and_says_how_to_continue(tmp_path: Path) -> None:
    _files(
        tmp_path,
        {
            "long.txt": "".join(f"{i}\n" for i in range(1, 2501)),
            "wide.txt": "".join("x" * 1000 + "\n" for _ in range(100)),
            "huge-line.txt": "y" * (DEFAULT_MAX_BYTES + 10),
            "empty.txt": "",
        },
    )

    async def body(env: ExecutionEnv) -> None:
        first = await run_read(env, ReadArgs(path="long.txt"))
        assert first.text.endswith(
            "\n\n[Showing lines 1-2000 of 2500. Use offset=2001 to continue.]"
        )
        assert first.text.startswith("1\n2\n")
        assert first.details["truncated_by"] == "lines"
        rest = await run_read(env, ReadArgs(path="long.txt", offset=2001))
        assert rest.text.split("\n")[0] == "2001"
        assert rest.text.endswith("2500")
        window = await run_read(env, ReadArgs(path="long.txt", offset=5, limit=10))
        assert window.text == "\n".join(str(i) for i in range(5, 15)) + (
            "\n\n[2486 more lines in file. Use offset=15 to continue.]"
        )
        wide = await run_read(env, ReadArgs(path="wide.txt"))
        assert wide.text.endswith(
            "[Showing lines 1-51 of 100 (50.0KB limit). Use offset=52 to continue.]"
        )
        huge = await run_read(env, ReadArgs(path="huge-line.txt"))
        assert huge.text == (
            "[Line 1 is 50.0KB, exceeds 50.0KB limit. "
            "Use bash: sed -n '1p' huge-line.txt | head -c 51200]"
        )
        beyond = await run_read(env, ReadArgs(path="long.txt", offset=9999))
        assert beyond.is_error
        assert beyond.text == "Offset 9999 is beyond end of file (2500 lines total)"
        missing = await run_read(env, ReadArgs(path="nope.txt"))
        assert missing.is_error
        assert missing.details["code"] == "not_found"
        assert (await run_read(env, ReadArgs(path="empty.txt"))).text == "(empty file)"

    _with_env(tmp_path, body)


def test_write_and_edit(tmp_path: Path) -> None:
    async def body(env: ExecutionEnv) -> None:
        written = await run_write(
            env, WriteArgs(path="pkg/mod.py", content="a = 1\nb = 2\n"), OpRef("t:1")
        )
        assert written.text == "Successfully wrote 12 bytes to pkg/mod.py"
        edited = await run_edit(
            env,
            EditArgs.model_validate(
                {"path": "pkg/mod.py", "edits": [{"oldText": "b = 2", "newText": "b = 3"}]}
            ),
            OpRef("t:2"),
        )
        assert edited.text == "Successfully replaced 1 block in pkg/mod.py."
        assert edited.details["first_changed_line"] == 2
        assert "+b = 3" in str(edited.details["diff"])
        ambiguous = await run_edit(
            env,
            EditArgs.model_validate(
                {"path": "pkg/mod.py", "edits": [{"old_text": " = ", "new_text": "="}]}
            ),
            OpRef("t:3"),
        )
        assert ambiguous.is_error
        assert ambiguous.details["code"] == "edit_not_unique"
        assert "2 occurrences" in ambiguous.text

    _with_env(tmp_path, body)


def test_bash_keeps_the_tail_and_reports_failures(tmp_path: Path) -> None:
    async def body(env: ExecutionEnv) -> None:
        many = await run_bash(env, BashArgs(command="seq 1 3000"), OpRef("b:1"))
        assert not many.is_error
        lines = many.text.split("\n")
        assert lines[0] == "1001"
        assert lines[-1] == "[Showing lines 1001-3000 of 3000.]"
        failed = await run_bash(env, BashArgs(command="echo oops; exit 2"), OpRef("b:2"))
        assert failed.is_error
        assert failed.text == "oops\n\nCommand exited with code 2"
        slow = await run_bash(
            env, BashArgs(command="echo partial; sleep 5", timeout=0.5), OpRef("b:3")
        )
        assert slow.is_error
        assert slow.text == "partial\n\nCommand timed out after 0.5 seconds"
        quiet = await run_bash(env, BashArgs(command="true"), OpRef("b:4"))
        assert quiet.text == "(no output)"
        wide = await run_bash(
            env, BashArgs(command="head -c 60000 /dev/zero | tr '\\0' z"), OpRef("b:5")
        )
        assert wide.text.endswith("[Showing last 50.0KB of line 1.]")
        seen: list[str] = []
        streamed = await run_bash(
            env, BashArgs(command="echo live"), OpRef("b:6"), on_output=seen.append
        )
        assert seen == ["live\n"]
        assert streamed.text == "live"

    _with_env(tmp_path, body)


def test_ls_find_grep_formatting(tmp_path: Path) -> None:
    _files(
        tmp_path,
        {
            "src/a.py": "def main():\n    pass\n",
            "src/b.py": "main()\n",
            ".env": "X=1\n",
            "README": "",
        },
    )

    async def body(env: ExecutionEnv) -> None:
        listing = await run_ls(env, LsArgs())
        assert listing.text == ".env\nREADME\nsrc/"
        short = await run_ls(env, LsArgs(limit=1))
        assert short.text == ".env\n\n[1 entries limit reached. Use limit=2 for more]"
        found = await run_find(env, FindArgs(pattern="*.py"))
        assert found.text == "src/a.py\nsrc/b.py"
        none = await run_find(env, FindArgs(pattern="*.rs"))
        assert none.text == "No files found matching pattern"
        grep = await run_grep(env, GrepArgs(pattern="main", context=1))
        assert grep.text == "src/a.py:1: def main():\nsrc/a.py-2-     pass\nsrc/b.py:1: main()"
        assert grep.details["matches"] == 2
        capped = await run_grep(env, GrepArgs(pattern="main", limit=1))
        assert capped.text.endswith(
            "[1 matches limit reached. Use limit=2 for more, or refine pattern]"
        )
        bad = await run_grep(env, GrepArgs(pattern="(unclosed"))
        assert bad.is_error
        assert bad.details["code"] == "invalid"

    _with_env(tmp_path, body)


def test_find_and_grep_say_which_sandbox_limit_stopped_them(tmp_path: Path) -> None:
    _files(tmp_path, {f"src/f{n}.py": "main()\n" * 100 for n in range(3)})

    async def main() -> None:
        capped = settings(tmp_path / "root", max_scan_bytes=1000)
        async with running_app(capped) as app, asgi_env(app, "ws") as env:
            grep = await run_grep(env, GrepArgs(pattern="main", limit=1000))
            assert grep.text.endswith(
                "[Search stopped: it read as much as one search may. Narrow the path or glob]"
            )
            assert grep.details["truncated"] is True
        late = settings(tmp_path / "root", search_timeout_s=1e-9)
        async with running_app(late) as app, asgi_env(app, "ws") as env:
            for output in (
                await run_grep(env, GrepArgs(pattern="main")),
                await run_find(env, FindArgs(pattern="*.py")),
            ):
                # Nothing found, but the agent is told the search did not finish.
                assert output.text.startswith("No ")
                assert output.text.endswith(
                    "[Search stopped at its time limit. Narrow the path, glob or pattern]"
                )

    run(main())


def test_argument_schemas_validate() -> None:
    with pytest.raises(ValidationError):
        ReadArgs(path="x", offset=0)
    with pytest.raises(ValidationError):
        BashArgs.model_validate({"command": "true", "timeout": float("inf")})
    with pytest.raises(ValidationError):
        BashArgs(command="true", timeout=0)
    with pytest.raises(ValidationError):
        EditArgs.model_validate({"path": "x", "edits": []})
    with pytest.raises(ValidationError):
        EditArgs.model_validate({"path": "x", "edits": [{"old_text": "", "new_text": "y"}]})
    with pytest.raises(ValidationError):
        WriteArgs.model_validate({"path": "x", "content": "y", "extra": 1})
    schema = EditArgs.model_json_schema()
    assert schema["required"] == ["path", "edits"]


def test_truncation_helpers() -> None:
    head = truncate_head("a\nb\nc", max_lines=2, max_bytes=100)
    assert (head.text, head.by, head.kept_lines, head.total_lines) == ("a\nb", "lines", 2, 3)
    tail = truncate_tail("a\nb\nc", max_lines=2, max_bytes=100)
    assert (tail.text, tail.by) == ("b\nc", "lines")
    by_bytes = truncate_tail("aaaa\nbbbb\ncccc", max_lines=10, max_bytes=9)
    assert (by_bytes.text, by_bytes.by) == ("bbbb\ncccc", "bytes")
    partial = truncate_tail("é" * 10, max_lines=10, max_bytes=5)
    assert partial.partial_line
    assert partial.text == "éé"
    untouched = truncate_head("x", 10, 10)
    assert not untouched.truncated
    assert [format_size(n) for n in (10, 51200, 3 * 1024 * 1024)] == ["10B", "50.0KB", "3.0MB"]
