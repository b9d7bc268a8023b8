"""The sandbox's searches under hostile input: the figures behind docs/security.md.

    python tests/bench/bench_search.py            # all three parts, about 10 s
    python tests/bench/bench_search.py --quick    # small sizes (the smoke test)

1. ``gil``: how long the event loop waits while a worker thread runs one regex: RE2 (the
   engine the server uses) over a long line, and Python's ``re`` on a backtracking case.
   This is the measurement behind running searches on threads, not in killable worker
   processes: RE2 releases the GIL while it matches, so the loop keeps its turns.
2. ``stall``: a real server process; ``grep '(a+)+$'`` over a 10,000-character line and
   ``find '*a*a*a*a*a*a*ab'`` over a 250-character name, run back to back in one
   workspace while ``/v1/health`` and a ``read`` in another workspace are timed.
3. ``rss``: a real server process greps a 2 GiB sparse file (binary: all NUL), then one
   that starts with text lines; the rise of its peak RSS (VmHWM) and what it answered.

Run it from another checkout (``PYTHONPATH=/that/tree python /that/tree/tests/bench/...``)
to measure that code: every request has a timeout, so a stalled server is reported,
not waited for.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.remote_env.support import auth, server_process  # noqa: E402

GiB = 1024**3
MiB = 1024**2


async def _worst_loop_lag(work: Any, *args: Any) -> tuple[float, float]:
    """Run ``work(*args)`` in a thread; return (its seconds, the loop's worst lag)."""
    done = threading.Event()
    took = 0.0

    def run() -> None:
        nonlocal took
        start = time.monotonic()
        work(*args)
        took = time.monotonic() - start
        done.set()

    thread = threading.Thread(target=run)
    worst = 0.0
    last = time.monotonic()
    thread.start()  # (may itself wait for the GIL the new thread took)
    while not done.is_set():
        await asyncio.sleep(0.001)
        # Gaps between consecutive turns: the GIL may be taken back anywhere in the loop.
        now = time.monotonic()
        worst = max(worst, now - last - 0.001)
        last = now
    worst = max(worst, time.monotonic() - last)  # the loop may have been held until the end
    thread.join()
    return took, worst


def part_gil(quick: bool) -> None:
    import re2

    size = 2 * MiB if quick else 30 * MiB
    # All 'a': a match whose groups RE2 must work out, its slowest (still linear) path.
    text = b"a" * size
    pattern = re2.compile(b"(a+)+$")
    took, lag = asyncio.run(_worst_loop_lag(pattern.search, text))
    print(
        f"gil: RE2 '(a+)+$' over {size // MiB} MiB of 'a' in a thread: {took * 1000:.0f} ms; "
        f"the event loop's worst lag meanwhile {lag * 1000:.1f} ms"
    )
    count = 18 if quick else 23
    backtracking = re.compile("(a+)+$")
    took, lag = asyncio.run(_worst_loop_lag(backtracking.search, "a" * count + "!"))
    print(
        f"gil: Python re '(a+)+$' over {count} a's and '!' in a thread: {took * 1000:.0f} ms; "
        f"the event loop's worst lag meanwhile {lag * 1000:.1f} ms"
    )


async def _timed(
    client: httpx.AsyncClient, workspace: str, body: dict[str, Any] | None, timeout: float
) -> float | None:
    start = time.monotonic()
    try:
        if body is None:
            await client.get("/v1/health", timeout=timeout)
        else:
            await client.post("/v1/ops", json=body, headers=auth(workspace), timeout=timeout)
    except httpx.TimeoutException:
        return None
    return time.monotonic() - start


async def _stall(url: str, seconds: float) -> None:
    grep = {"kind": "grep", "args": {"pattern": "(a+)+$", "path": "line.txt"}}
    find = {"kind": "find", "args": {"pattern": "*a*a*a*a*a*a*ab"}}
    read = {"kind": "read", "args": {"path": "note.txt"}}
    until = time.monotonic() + seconds
    timings: dict[str, list[float | None]] = {"grep": [], "find": [], "health": [], "read": []}

    async def repeat(name: str, workspace: str, body: dict[str, Any] | None, pause: float) -> None:
        async with httpx.AsyncClient(base_url=url) as client:
            while True:  # at least once
                took = await _timed(client, workspace, body, timeout=10.0)
                timings[name].append(took)
                if took is None or time.monotonic() >= until:
                    return
                await asyncio.sleep(pause)

    await asyncio.gather(
        repeat("grep", "slow", grep, 0),
        repeat("find", "slow", find, 0),
        repeat("health", "other", None, 0.05),
        repeat("read", "other", read, 0.05),
    )
    for name, values in timings.items():
        answered = [value for value in values if value is not None]
        stuck = len(values) - len(answered)
        worst = f"slowest {max(answered) * 1000:.0f} ms" if answered else "none answered"
        print(
            f"stall: {name}: {len(answered)} answered, {worst}"
            + (f", {stuck} got no answer in 10 s" if stuck else "")
        )


def part_stall(quick: bool) -> None:
    with tempfile.TemporaryDirectory() as folder, server_process(Path(folder)) as server:
        slow = server.root / "slow"
        slow.mkdir()
        (slow / "line.txt").write_text("a" * 9_999 + "!\n")
        (slow / ("a" * 250)).write_text("")
        other = server.root / "other"
        other.mkdir()
        (other / "note.txt").write_text("hello\n")
        asyncio.run(_stall(server.url, 0.5 if quick else 2.0))
        server.kill()  # a stalled server would not stop in time


def _peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM")


def part_rss(quick: bool) -> None:
    size = 64 * MiB if quick else 2 * GiB
    with tempfile.TemporaryDirectory() as folder, server_process(Path(folder)) as server:
        assert server.process is not None
        big = server.root / "big"
        big.mkdir()
        with open(big / "zeros.bin", "wb") as handle:
            handle.truncate(size)
        with open(big / "text.log", "wb") as handle:
            handle.write(b"needle on the first line\n" + b"some text\n" * 10_000)
            handle.truncate(size)
        before = _peak_rss(server.process.pid)
        with httpx.Client(base_url=server.url, headers=auth("big"), timeout=600.0) as client:
            for name in ("zeros.bin", "text.log"):
                start = time.monotonic()
                body = {"kind": "grep", "args": {"pattern": "needle", "path": name}}
                answer = client.post("/v1/ops", json=body).json()
                took = time.monotonic() - start
                result = answer.get("result") or {}
                rise = (_peak_rss(server.process.pid) - before) / MiB
                print(
                    f"rss: grep of {size / GiB:g} GiB sparse {name}: {took:.2f} s, peak RSS "
                    f"+{rise:.0f} MiB (from {before / MiB:.0f} MiB), "
                    f"{len(result.get('matches', []))} match(es), "
                    f"stopped_by={result.get('stopped_by')}"
                )
        server.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("parts", nargs="*", default=["gil", "stall", "rss"])
    parser.add_argument("--quick", action="store_true", help="small sizes, for the smoke test")
    options = parser.parse_args()
    for part in options.parts:
        {"gil": part_gil, "stall": part_stall, "rss": part_rss}[part](options.quick)


if __name__ == "__main__":
    main()
