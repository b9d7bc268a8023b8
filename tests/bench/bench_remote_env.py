"""Loopback latency of the sandbox server and the cost of its op log.

Run: ``python tests/bench/bench_remote_env.py [--iterations N]``

Starts ``python -m remote_env.server`` on 127.0.0.1 in a temporary directory, drives it with
``RemoteEnv`` over a real socket and prints p50/p99 round-trip latencies:

* ``read 1 KiB``: a read-only call (not recorded in the op log);
* ``write 1 KiB (op)``: a mutating call: op-log insert, hash record and finish (three
  fsynced SQLite commits) plus the atomic file write (fsync of file and directory);
* ``replay write``: the same op id sent again, answered from the op log;
* ``exec true (op)``: a recorded command: op log plus a process spawn;
* ``op log only``: the three op-log commits of a mutating call, in process, no HTTP.

"op-log overhead per mutating call" is reported two ways: ``write - read`` over HTTP (which
also includes the file fsyncs) and the in-process ``op log only`` figure.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import httpx  # noqa: E402

from core.env import OpRef  # noqa: E402
from remote_env.auth import mint_token  # noqa: E402
from remote_env.client import RemoteEnv  # noqa: E402
from remote_env.server.oplog import OpLog, OpRow  # noqa: E402

SECRET = b"bench-secret-0123456789abcdef0123"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _percentiles(samples: list[float]) -> tuple[float, float, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return statistics.median(ordered) * 1000, p99 * 1000, statistics.fmean(ordered) * 1000


async def _measure(n: int, call: Callable[[int], Awaitable[object]]) -> list[float]:
    for i in range(min(20, n)):  # warm up connections, caches and the page cache
        await call(-1 - i)
    samples = []
    for i in range(n):
        started = time.perf_counter()
        await call(i)
        samples.append(time.perf_counter() - started)
    return samples


async def _bench_http(url: str, n: int) -> dict[str, list[float]]:
    payload = "x" * 1023 + "\n"
    results: dict[str, list[float]] = {}
    async with RemoteEnv(url, mint_token(SECRET, "bench", 3600)) as env:
        await env.write("read.txt", payload, OpRef("setup:1"))
        results["read 1 KiB"] = await _measure(n, lambda i: env.read("read.txt"))
        results["write 1 KiB (op)"] = await _measure(
            n, lambda i: env.write(f"w/{i}.txt", payload, OpRef(f"write:{i}"))
        )
        results["replay write (op)"] = await _measure(
            n, lambda i: env.write(f"w/{max(i, 0)}.txt", payload, OpRef(f"write:{max(i, 0)}"))
        )
        results["exec true (op)"] = await _measure(
            n, lambda i: env.run_command("true", op=OpRef(f"exec:{i}"))
        )
    return results


async def _bench_oplog(path: Path, n: int) -> list[float]:
    log = await OpLog.open(path)
    try:

        async def one(i: int) -> None:
            op_id = f"log:{i}"
            await log.insert(OpRow("bench", op_id, "write", "0" * 64, 1, "running", time.time()))
            await log.set_hashes("bench", op_id, pre=None, post="1" * 64, pending_result={})
            await log.finish(
                "bench",
                op_id,
                status="succeeded",
                result={"kind": "write"},
                error=None,
                output_bytes=0,
                finished_at=time.time(),
                expires_at=time.time() + 60,
            )

        return await _measure(n, one)
    finally:
        await log.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="perdure-bench-") as tmp:
        root, secret_file = Path(tmp) / "root", Path(tmp) / "secret"
        secret_file.write_bytes(SECRET)
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "remote_env.server",
                "--root",
                str(root),
                "--listen",
                f"127.0.0.1:{port}",
                "--secret-file",
                str(secret_file),
            ],
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            stdin=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 30
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"{url}/v1/health", timeout=1).status_code == 200:
                        break
                if time.monotonic() > deadline or server.poll() is not None:
                    raise SystemExit("the server did not start")
                time.sleep(0.05)
            results = asyncio.run(_bench_http(url, args.iterations))
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(30)
        results["op log only (3 commits)"] = asyncio.run(
            _bench_oplog(Path(tmp) / "bench.sqlite", args.iterations)
        )

    print(f"\nremote_env loopback, {args.iterations} iterations each (ms)\n")
    print(f"{'operation':<26}{'p50':>9}{'p99':>9}{'mean':>9}")
    print("-" * 53)
    table = {name: _percentiles(samples) for name, samples in results.items()}
    for name, (p50, p99, mean) in table.items():
        print(f"{name:<26}{p50:>9.2f}{p99:>9.2f}{mean:>9.2f}")
    overhead = table["write 1 KiB (op)"][0] - table["read 1 KiB"][0]
    print("-" * 53)
    print(f"{'write - read (p50)':<26}{overhead:>9.2f}   per mutating call, incl. file fsyncs")
    print(f"{'op log alone (p50)':<26}{table['op log only (3 commits)'][0]:>9.2f}")


if __name__ == "__main__":
    main()
