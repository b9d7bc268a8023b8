"""``grep`` and ``find``: RE2 semantics, streaming, and the limits that stop a search.

The stall and memory probes against a real server process are in
``test_search_bounds.py``.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from pathlib import Path
from typing import Any

import pytest
import re2
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from remote_env.protocol import GrepArgs
from remote_env.server import grepscan
from remote_env.server.budget import SearchBudget
from remote_env.server.patterns import compile_line_pattern, re2_compile, re2_options
from remote_env.server.search import grep_files
from remote_env.server.workspaces import Workspaces
from tests.remote_env.support import asgi_client, run, running_app, settings


async def _post(root: Path, body: dict[str, Any], **overrides: Any) -> tuple[int, dict[str, Any]]:
    async with (
        running_app(settings(root, **overrides)) as app,
        asgi_client(app, "ws") as client,
    ):
        response = await client.post("/v1/ops", json=body)
        return response.status_code, response.json()


def _result(root: Path, body: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    status, record = run(_post(root, body, **overrides))
    assert status == 200, record
    result: dict[str, Any] = record["result"]
    return result


def _workspace(root: Path) -> Path:
    folder = root / "ws"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


# ----------------------------------------------------------------- patterns RE2 cannot run


@pytest.mark.parametrize(
    ("pattern", "feature"),
    [
        (r"(a)\1", "backreferences"),
        (r"(?P<x>a)(?P=x)", "backreferences"),
        (r"foo(?=bar)", "lookahead"),
        (r"foo(?!bar)", "lookahead"),
        (r"(?<=a)b", "lookbehind"),
        (r"(?<!a)b", "lookbehind"),
        (r"a++", "possessive"),
    ],
)
def test_a_pattern_re2_cannot_express_is_refused_422_in_words(
    tmp_path: Path, pattern: str, feature: str
) -> None:
    status, body = run(_post(tmp_path, {"kind": "grep", "args": {"pattern": pattern}}))
    assert status == 422
    assert body["error"]["code"] == "invalid"
    message = body["error"]["message"]
    assert "grep uses RE2" in message
    assert feature in message
    assert not (tmp_path / "ws").exists()  # refused before anything, the workspace included


def test_a_broken_pattern_and_a_broken_glob_are_refused_422(tmp_path: Path) -> None:
    status, body = run(_post(tmp_path, {"kind": "grep", "args": {"pattern": "(unclosed"}}))
    assert status == 422
    assert body["error"]["message"].startswith("invalid regular expression: missing )")
    status, body = run(_post(tmp_path, {"kind": "find", "args": {"pattern": "[z-a]"}}))
    assert status == 422
    assert "invalid glob" in body["error"]["message"]


def test_compiled_patterns_are_not_kept_in_re2s_module_cache() -> None:
    # re2.compile keeps the last 128 patterns, each with up to 8 MiB of matching state:
    # a client sending distinct patterns would grow the server. A cached pattern would
    # come back as the same object from the next compile.
    ours = re2_compile("(a|b)*a(a|b){12}x", re2_options())
    assert re2.compile("(a|b)*a(a|b){12}x", re2_options()) is not ours


# ----------------------------------------------------------------- streaming = the old grep


def _reference(
    files: dict[str, bytes], args: GrepArgs, probe: int
) -> tuple[list[tuple[str, int, str, bool]], bool]:
    """The grep of before this change (whole files, Python ``re``), the specification."""
    source = re.escape(args.pattern) if args.literal else args.pattern
    # RE2's \b, \w, \d and \s are ASCII (docs/security.md): so are the reference's.
    regex = re.compile(source, re.ASCII | (re.IGNORECASE if args.ignore_case else 0))
    context, limit = args.context, args.limit
    out: list[tuple[str, int, str, bool]] = []
    count = 0
    for name in sorted(files):
        data = files[name]
        if b"\x00" in data[:probe]:
            continue
        text = data.decode("utf-8", "replace")
        lines = text.split("\n")
        if text.endswith("\n"):
            lines.pop()
        if not text:
            lines = []
        all_hits = [n for n, line in enumerate(lines) if regex.search(line)]
        shown: dict[int, bool] = {}
        for n in all_hits[: max(0, limit - count)]:
            for near in range(max(0, n - context), min(len(lines), n + context + 1)):
                shown.setdefault(near, True)
            shown[n] = False
        out += [(name, n + 1, lines[n].rstrip("\r"), shown[n]) for n in sorted(shown)]
        count += len(all_hits)
        if count > limit:
            return out, True
    return out, False


_PATTERNS = ["a", "ab+", "^b", "a$", "b.a", "(a|b)b", "^$", "x*", r"\bab", "[^a]", "é", r"\Aa", "A"]


@hsettings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    contents=st.lists(
        st.lists(st.sampled_from([b"a", b"A", b"b", b"\n", b"\n", b"\r", b"\xff", "é".encode()]))
        .map(b"".join)
        .filter(lambda data: len(data) < 400),
        min_size=1,
        max_size=3,
    ),
    pattern=st.sampled_from(_PATTERNS),
    context=st.integers(0, 3),
    limit=st.integers(1, 6),
    chunk=st.integers(1, 9),
    ignore_case=st.booleans(),
    literal=st.booleans(),
)
def test_streaming_grep_reports_what_the_whole_file_grep_did(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    contents: list[bytes],
    pattern: str,
    context: int,
    limit: int,
    chunk: int,
    ignore_case: bool,
    literal: bool,
) -> None:
    # Tiny chunks put block boundaries everywhere: inside lines, at newlines, mid-UTF-8.
    monkeypatch.setattr(grepscan, "CHUNK_BYTES", chunk)
    monkeypatch.setattr(grepscan, "_BINARY_PROBE", chunk)
    root = tmp_path / f"r{os.urandom(6).hex()}"
    folder = _workspace(root)
    files = {f"f{n}.txt": data for n, data in enumerate(contents)}
    for name, data in files.items():
        (folder / name).write_bytes(data)
    args = GrepArgs(
        pattern=pattern, context=context, limit=limit, ignore_case=ignore_case, literal=literal
    )
    expected, more = _reference(files, args, probe=chunk)
    compiled = compile_line_pattern(pattern, literal=literal, ignore_case=ignore_case)
    with Workspaces(settings(root)).open("ws") as conf:
        budget = SearchBudget.start(timeout_s=60, max_scan_bytes=1 << 30)
        result = grep_files(conf, args, compiled, None, budget)
    got = [(m.path, m.line, m.text, m.is_context) for m in result.matches]
    assert got == expected
    assert result.truncated == more
    assert result.stopped_by == ("limit" if more else None)


# ----------------------------------------------------------------- the limits, named


def test_the_scan_cap_stops_a_single_file_and_is_named(tmp_path: Path) -> None:
    folder = _workspace(tmp_path / "root")
    lines = [f"line {n} {'hit' if n % 10 == 0 else ''}" for n in range(2000)]
    (folder / "big.txt").write_text("\n".join(lines) + "\n")
    body = {"kind": "grep", "args": {"pattern": "hit", "path": "big.txt", "limit": 1000}}
    result = _result(tmp_path / "root", body, max_scan_bytes=2000)
    assert result["stopped_by"] == "scan_bytes"
    assert result["truncated"] is True
    numbers = [match["line"] for match in result["matches"]]
    # Only lines within the first 2000 bytes were searched (about 200 lines).
    assert numbers and numbers[0] == 1
    assert all(number < 250 for number in numbers)
    # Under the cap, the same search is complete and names no limit.
    result = _result(tmp_path / "root", body)
    assert result["stopped_by"] is None
    assert len(result["matches"]) == 200


def test_the_scan_cap_counts_across_files(tmp_path: Path) -> None:
    folder = _workspace(tmp_path / "root")
    for n in range(10):
        (folder / f"f{n}.txt").write_text("hit\n" * 100)  # 400 bytes each
    body = {"kind": "grep", "args": {"pattern": "hit", "limit": 10_000}}
    result = _result(tmp_path / "root", body, max_scan_bytes=1000)
    assert result["stopped_by"] == "scan_bytes"
    assert {match["path"] for match in result["matches"]} == {"f0.txt", "f1.txt", "f2.txt"}
    assert len(result["matches"]) == 250


@pytest.mark.parametrize("kind", ["grep", "find"])
def test_the_deadline_stops_a_search_and_is_named(tmp_path: Path, kind: str) -> None:
    folder = _workspace(tmp_path / "root")
    for n in range(3):
        (folder / f"d{n}").mkdir()
        (folder / f"d{n}" / "x.txt").write_text("hit\n")
    args = {"pattern": "hit"} if kind == "grep" else {"pattern": "*.txt"}
    body = {"kind": kind, "args": args}
    result = _result(tmp_path / "root", body, search_timeout_s=1e-9)
    assert result["stopped_by"] == "deadline"
    assert result["truncated"] is True
    result = _result(tmp_path / "root", body)
    assert result["stopped_by"] is None
    assert len(result["matches" if kind == "grep" else "paths"]) == 3


def test_a_line_longer_than_the_line_cap_is_searched_in_its_head(tmp_path: Path) -> None:
    folder = _workspace(tmp_path / "root")
    size = grepscan.MAX_LINE_BYTES
    long_line = b"head-hit " + b"x" * size + b" tail-hit"
    (folder / "long.txt").write_bytes(b"first hit\n" + long_line + b"\nlast hit\n")
    body = {"kind": "grep", "args": {"pattern": "hit", "max_line_length": 20}}
    result = _result(tmp_path / "root", body)
    assert [(m["line"], m["text"]) for m in result["matches"]] == [
        (1, "first hit"),
        (2, "head-hit xxxxxxxxxxx [line truncated]"),
        (3, "last hit"),
    ]
    assert result["long_lines"] == 1
    tail = _result(tmp_path / "root", {**body, "args": {"pattern": "tail-hit"}})
    assert tail["matches"] == []  # past the line cap: documented, and counted


def test_find_matches_names_that_are_not_utf8(tmp_path: Path) -> None:
    folder = _workspace(tmp_path / "root")
    (folder / "ok.txt").write_text("")
    os.close(os.open(os.path.join(os.fsencode(folder), b"caf\xe9.txt"), os.O_CREAT, 0o644))
    found = _result(tmp_path / "root", {"kind": "find", "args": {"pattern": "*.txt"}})
    assert len(found["paths"]) == 2
    found = _result(tmp_path / "root", {"kind": "find", "args": {"pattern": "caf?.txt"}})
    assert len(found["paths"]) == 1


def test_a_running_search_stops_when_the_server_shuts_down(tmp_path: Path) -> None:
    folder = _workspace(tmp_path / "root")
    with open(folder / "text.log", "wb") as handle:  # 64 GiB, sparse: half a minute to read
        handle.write(b"needle\n" + b"some text\n" * 1000)  # text first: not binary
        handle.truncate(64 * 1024**3)
    config = settings(tmp_path / "root", max_scan_bytes=64 * 1024**3, search_timeout_s=20)

    async def main() -> tuple[dict[str, Any], float]:
        async with running_app(config) as app, asgi_client(app, "ws") as client:
            body = {"kind": "grep", "args": {"pattern": "needle", "path": "text.log"}}
            running = asyncio.create_task(client.post("/v1/ops", json=body, timeout=60))
            await asyncio.sleep(0.3)
            start = time.monotonic()
            await app.state.service.ops.shutdown()
            answer = await running
            return answer.json(), time.monotonic() - start

    record, took = run(main())
    assert record["result"]["stopped_by"] == "deadline"
    assert [m["line"] for m in record["result"]["matches"]] == [1]
    assert took < 2.0, f"the search went on for {took:.1f} s"
