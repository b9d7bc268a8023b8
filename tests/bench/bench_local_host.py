"""Local host load benchmark: many actors, a few tool rounds each, over HTTP on loopback.

Run: ``python tests/bench/bench_local_host.py --actors 1000 --rounds 10``
(``--tools N`` tool calls per submission, ``--concurrency C`` actors driven at once,
``--idle S`` the host's eviction idle period, ``--raw`` every actor at once on its own
connection: ``--actors 100 --rounds 1 --tools 0 --raw`` is a burst of new actors;
``--journal-when-opening N`` the host's admission journal threshold, ``-1`` off).

The host runs in a subprocess (``--serve``: the local host with the scripted model of
``tests.local.support``, SQLite WAL + NORMAL, one file per actor). This process drives
it with httpx: each actor submits ``rounds`` inputs one after the other; each input
makes the model call the ``echo`` tool ``tools`` times before it answers, and is
long-polled to ``done``. Reported: HTTP requests/s (submissions and long polls),
submissions/s, p50/p99 submission-acceptance latency (``POST`` → ``202``), the host's
peak RSS, and its RSS once every actor has been evicted.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

TOKEN = "bench-token-0123456789abcdef"


# --------------------------------------------------------------------------- the host side


def _rss_kb() -> tuple[int, int]:
    """(current, peak) resident set size of this process, in KiB."""
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])


def serve(data: Path, idle_s: float, journal_when_opening: int | None) -> None:
    from core.harness import Harness
    from runtimes.actor.api import ApiConfig
    from runtimes.local.host import ActorHost
    from runtimes.local.server import bind, make_server
    from tests.local.support import host_config

    overrides: dict[str, Any] = {}
    if journal_when_opening is not None:  # else HostConfig's default
        overrides["journal_when_opening"] = (
            None if journal_when_opening < 0 else journal_when_opening
        )
    host = ActorHost(host_config(data, idle_evict_s=idle_s, recover_on_start=False, **overrides))
    server = make_server(host, ApiConfig(TOKEN, max_wait_s=60), graceful_s=2)

    async def stats(trim: bool = False) -> dict[str, int]:
        if trim:  # what is left once the garbage and the allocator's free pages are gone
            gc.collect()
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        rss, peak = _rss_kb()
        return {
            "active": len(host.active),
            "wakes": len(host.wakes),
            "harnesses": sum(isinstance(o, Harness) for o in gc.get_objects()) if trim else -1,
            "rss_kb": rss,
            "peak_kb": peak,
        }

    server.config.app.add_api_route("/bench/stats", stats, methods=["GET"])
    profile_to = os.environ.get("PERDURE_BENCH_PROFILE")
    if profile_to:  # cProfile the host until GET /bench/profile writes it out
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()

        async def dump() -> dict[str, str]:
            profiler.disable()
            profiler.dump_stats(profile_to)
            return {"written": profile_to}

        server.config.app.add_api_route("/bench/profile", dump, methods=["GET"])
    sock = bind("127.0.0.1", 0)
    print(json.dumps({"url": f"http://127.0.0.1:{sock.getsockname()[1]}"}), flush=True)
    server.run(sockets=[sock])


# --------------------------------------------------------------------------- the client side


@dataclass
class Result:
    actors: int
    rounds: int
    tools: int
    concurrency: int
    seconds: float
    requests: int
    retried_requests: int
    requests_per_s: float
    submissions_per_s: float
    accept_p50_ms: float
    accept_p99_ms: float
    accept_p99_active_ms: float  # without the submissions that activated their actor
    peak_rss_mb: float
    rss_after_eviction_mb: float
    rss_after_eviction_trimmed_mb: float
    harnesses_alive_after_eviction: int
    rss_before_mb: float
    eviction_s: float


def _poll_path(n: int, r: int, accepted: dict[str, Any], wait_s: int = 30) -> str:
    """Where to long-poll a submission: by id, or by request id while it has none
    (``mailed``: a new actor's first input accepted into the host's admission journal).
    The whole query is in the path: httpx's ``params=`` would replace ``request_id``."""
    if accepted["id"] is not None:
        return f"/v1/actors/bench-{n}/submissions/{accepted['id']}?wait={wait_s}"
    return (
        f"/v1/actors/bench-{n}/conversations/1/submissions/by-request"
        f"?request_id=round-{r}&wait={wait_s}"
    )


def _percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


async def _drive(
    url: str, actors: int, rounds: int, tools: int, concurrency: int
) -> tuple[list[float], int, int, float]:
    limits = httpx.Limits(
        max_connections=concurrency * 2, max_keepalive_connections=concurrency * 2
    )
    headers = {"authorization": f"Bearer {TOKEN}"}
    accept: list[float] = []
    requests = retries = 0
    gate = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(
        base_url=url, headers=headers, limits=limits, timeout=120
    ) as client:

        async def send(method: str, path: str, **kwargs: Any) -> httpx.Response:
            # Every request here is safe to repeat: GETs, and submissions carry a
            # request id the host dedupes. So a dropped connection is simply retried.
            nonlocal requests, retries
            for attempt in range(5):
                try:
                    response = await client.request(method, path, **kwargs)
                except httpx.TransportError:
                    retries += 1
                    await asyncio.sleep(0.05 * (attempt + 1))
                    continue
                requests += 1
                return response
            raise RuntimeError(f"{method} {path} kept failing")

        async def actor(n: int) -> None:
            async with gate:
                for r in range(rounds):
                    body = {
                        "type": "input",
                        "content": f"tools:{tools}",
                        "request_id": f"round-{r}",
                    }
                    path = f"/v1/actors/bench-{n}/submissions"
                    started = time.perf_counter()
                    response = await send("POST", path, json=body)
                    accept.append((time.perf_counter() - started) * 1000)
                    assert response.status_code == 202, response.text
                    poll = _poll_path(n, r, response.json())
                    while True:
                        polled = await send("GET", poll)
                        assert polled.status_code == 200, (poll, polled.text)
                        state = polled.json()
                        if state["status"] in ("done", "unanswered"):
                            assert state["status"] == "done", state
                            break

        started = time.perf_counter()
        await asyncio.gather(*(actor(n) for n in range(actors)))
        return accept, requests, retries, time.perf_counter() - started


class _Connection:
    """A minimal HTTP/1.1 keep-alive client connection (JSON bodies, Content-Length).

    httpx's pool costs the *client* process milliseconds per request once a hundred
    connections are open, so with many clients the benchmark measured its own client;
    this costs a few tens of microseconds."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def connect(self) -> None:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)

    async def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        await self.connect()
        assert self.reader is not None
        data = b"" if body is None else json.dumps(body).encode()
        head = (
            f"{method} {path} HTTP/1.1\r\nhost: {self.host}\r\n"
            f"authorization: Bearer {TOKEN}\r\ncontent-length: {len(data)}\r\n"
            + ("content-type: application/json\r\n" if body is not None else "")
            + "\r\n"
        )
        self.writer.write(head.encode() + data)
        status_line = await self.reader.readline()
        if not status_line:
            raise ConnectionError("closed")
        status = int(status_line.split()[1])
        length = 0
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        payload = await self.reader.readexactly(length)
        return status, json.loads(payload) if payload else None

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


async def drive_raw(
    url: str, actors: int, rounds: int, tools: int
) -> tuple[list[float], list[float], float]:
    """Each actor submits ``rounds`` inputs one after the other over one keep-alive
    connection, long-polling each to ``done``; all actors at once. Returns the
    acceptance latencies (ms), those of all but each actor's first submission (which
    activates it), and the seconds it took."""
    host, _, port = url.removeprefix("http://").partition(":")
    accept: list[float] = []
    warm: list[float] = []

    async def actor(n: int, conn: _Connection) -> None:
        try:
            for r in range(rounds):
                body = {"type": "input", "content": f"tools:{tools}", "request_id": f"round-{r}"}
                path = f"/v1/actors/bench-{n}/submissions"
                started = time.perf_counter()
                status, sent = await conn.request("POST", path, body)
                accept.append((time.perf_counter() - started) * 1000)
                if r:  # the actor is active: what acceptance costs without its activation
                    warm.append(accept[-1])
                assert status == 202, sent
                poll = _poll_path(n, r, sent)
                while True:
                    polled, state = await conn.request("GET", poll)
                    assert polled == 200, (poll, state)
                    if state["status"] in ("done", "unanswered"):
                        assert state["status"] == "done", state
                        break
        finally:
            conn.close()

    # Connected first, as clients with keep-alive connections are: an acceptance is
    # timed from its request being sent, not from the TCP handshake before it.
    conns = [_Connection(host, int(port)) for _ in range(actors)]
    await asyncio.gather(*(conn.connect() for conn in conns))
    started = time.perf_counter()
    await asyncio.gather(*(actor(n, conn) for n, conn in enumerate(conns)))
    return accept, warm, time.perf_counter() - started


def run_bench(
    *,
    actors: int,
    rounds: int,
    tools: int = 1,
    concurrency: int = 64,
    idle_s: float = 1.0,
    wait_eviction: bool = True,
    raw_client: bool = False,
    journal_when_opening: int | None = None,
) -> Result:
    with tempfile.TemporaryDirectory(prefix="perdure-bench-") as tmp:
        log = open(Path(tmp) / "host.log", "w")  # noqa: SIM115 - closed below
        proc = subprocess.Popen(
            [
                *(sys.executable, "-u", __file__, "--serve", "--data", tmp),
                *("--idle", str(idle_s)),
                *(
                    ("--journal-when-opening", str(journal_when_opening))
                    if journal_when_opening is not None
                    else ()
                ),
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        try:
            assert proc.stdout is not None
            url = json.loads(proc.stdout.readline())["url"]
            before = httpx.get(f"{url}/bench/stats").json()
            if raw_client:  # every actor at once, each on its own connection
                accept, warm, seconds = asyncio.run(drive_raw(url, actors, rounds, tools))
                requests, retries = 2 * actors * rounds, 0  # at least: a POST and a GET each
            else:
                accept, requests, retries, seconds = asyncio.run(
                    _drive(url, actors, rounds, tools, concurrency)
                )
                warm = accept
            finished = time.perf_counter()
            while (stats := httpx.get(f"{url}/bench/stats").json())["active"] and wait_eviction:
                time.sleep(0.1)
            evicted_in = time.perf_counter() - finished
            trimmed = httpx.get(f"{url}/bench/stats", params={"trim": True}).json()
        except BaseException:
            log.flush()
            print((Path(tmp) / "host.log").read_text()[-4000:], file=sys.stderr)
            raise
        finally:
            proc.terminate()
            proc.wait(30)
            if proc.stdout is not None:
                proc.stdout.close()
            log.close()
    return Result(
        actors=actors,
        rounds=rounds,
        tools=tools,
        concurrency=concurrency,
        seconds=round(seconds, 2),
        requests=requests,
        retried_requests=retries,
        requests_per_s=round(requests / seconds, 1),
        submissions_per_s=round(actors * rounds / seconds, 1),
        accept_p50_ms=round(statistics.median(accept), 2),
        accept_p99_ms=round(_percentile(accept, 99), 2),
        accept_p99_active_ms=round(_percentile(warm, 99), 2) if warm else 0.0,
        peak_rss_mb=round(stats["peak_kb"] / 1024, 1),
        rss_after_eviction_mb=round(stats["rss_kb"] / 1024, 1),
        rss_after_eviction_trimmed_mb=round(trimmed["rss_kb"] / 1024, 1),
        harnesses_alive_after_eviction=trimmed["harnesses"],
        rss_before_mb=round(before["rss_kb"] / 1024, 1),
        eviction_s=round(evicted_in, 2),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--actors", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tools", type=int, default=1, help="tool calls per submission")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--idle", type=float, default=1.0, help="eviction idle period, s")
    parser.add_argument(
        "--raw",
        action="store_true",
        help="every actor at once, each on its own connection (the suite's client)",
    )
    parser.add_argument(
        "--journal-when-opening",
        type=int,
        default=None,
        help="the host's HostConfig.journal_when_opening (default: HostConfig's; -1: off)",
    )
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.data, args.idle, args.journal_when_opening)
        return
    result = run_bench(
        actors=args.actors,
        rounds=args.rounds,
        tools=args.tools,
        concurrency=args.concurrency,
        idle_s=args.idle,
        raw_client=args.raw,
        journal_when_opening=args.journal_when_opening,
    )
    for key, value in asdict(result).items():
        print(f"{key:>22}: {value}")


if __name__ == "__main__":
    main()
