"""AWS replica benchmark (moto in-process): per-commit cost, cold-start rebuild.

Run: ``python tests/bench/bench_aws_replica.py`` (``--quick`` for a smoke run).

(a) one-entry commits through the fenced gate: DynamoDB transactions, log items and
    compressed log bytes per commit (the WRU-equivalent: one unit per KB per item,
    doubled inside a transaction);
(b) cold start of an actor holding 10,000 entries: a snapshot (9,500 entries, written
    in batches) plus 500 one-entry log records, rebuilt in a fresh workdir. Reported as
    the total, the time inside AWS calls (moto's own time, in-process), and the rest
    (target: ≤ 0.5 s).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from core.storage import EntryQuery

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

for _name, _value in {
    "AWS_ACCESS_KEY_ID": "bench",
    "AWS_SECRET_ACCESS_KEY": "bench",
    "AWS_DEFAULT_REGION": "us-east-1",
}.items():
    os.environ.setdefault(_name, _value)

from moto import mock_aws  # noqa: E402

from core.records import ConversationRecord, Entry  # noqa: E402
from core.testing.clock import VirtualClock  # noqa: E402
from runtimes.aws import AwsResources, open_actor_replica  # noqa: E402
from tests.aws.conftest import create_resources  # noqa: E402


class Timed:
    """A client proxy that adds up the wall time spent in its calls."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.seconds = 0.0
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)
        if not callable(method):
            return method

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start
                self.calls += 1

        return timed


def _entry(entry_id: int) -> Entry:
    return Entry(entry_id, 1, "user", message={"role": "user", "content": f"message {entry_id}"})


async def per_commit(aws: AwsResources, tmp: Path, n: int) -> None:
    replica = await open_actor_replica(
        aws, "commits", owner="bench", now=VirtualClock().now, workdir=tmp
    )
    await replica.storage.commit([ConversationRecord(1)])
    s = replica.gate.stats
    before = s.transactions, s.log_items, s.log_bytes, s.write_units, s.s3_puts
    start = time.perf_counter()
    for _ in range(n):
        await replica.storage.commit([_entry(await replica.storage.mint_id())])
    elapsed = time.perf_counter() - start
    print(
        f"(a) {n} one-entry commits, per commit: {(s.transactions - before[0]) / n:.2f}"
        f" DynamoDB transactions, {(s.log_items - before[1]) / n:.2f} log items,"
        f" {(s.log_bytes - before[2]) / n:.0f} compressed log bytes,"
        f" {(s.write_units - before[3]) / n:.1f} WRU (estimated);"
        f" {s.s3_puts - before[4]} S3 puts ({s.snapshots} snapshots) in all;"
        f" {1000 * elapsed / n:.2f} ms/commit with moto in-process"
    )
    await replica.close()


async def cold_start(aws: AwsResources, tmp: Path, entries: int, log_records: int) -> None:
    build = tmp / "build"
    build.mkdir()
    replica = await open_actor_replica(
        aws, "big", owner="bench", now=VirtualClock().now, workdir=build, snapshot_every=10**9
    )
    await replica.storage.commit([ConversationRecord(1)])
    in_snapshot = entries - log_records
    for start in range(0, in_snapshot, 100):
        ids = [await replica.storage.mint_id() for _ in range(min(100, in_snapshot - start))]
        await replica.storage.commit([_entry(i) for i in ids])
    await replica.snapshot()
    for _ in range(log_records):
        await replica.storage.commit([_entry(await replica.storage.mint_id())])
    await replica.close()

    dynamodb, s3 = Timed(aws.dynamodb), Timed(aws.s3)
    timed = AwsResources(dynamodb, s3, aws.table, aws.bucket)
    cold = tmp / "cold"
    cold.mkdir()
    start = time.perf_counter()
    replica = await open_actor_replica(
        timed, "big", owner="bench-2", now=VirtualClock().now, workdir=cold
    )
    total = time.perf_counter() - start
    page = await replica.storage.scan_entries(EntryQuery(1, limit=entries))
    assert len(page.items) == entries and page.next is None, len(page.items)
    assert (replica.origin, replayed := replica.replayed) == ("rebuilt", log_records), replayed
    aws_s = dynamodb.seconds + s3.seconds
    print(
        f"(b) cold start, {entries} entries = snapshot + {log_records} log records"
        f" ({(cold / 'big.sqlite').stat().st_size // 1024} KiB file):"
        f" {total:.3f} s total, {aws_s:.3f} s in {dynamodb.calls + s3.calls} AWS calls (moto),"
        f" {total - aws_s:.3f} s ours (target <= 0.5 s)"
    )
    await replica.close()


async def main(quick: bool) -> None:
    with mock_aws(), tempfile.TemporaryDirectory() as tmp:
        aws = create_resources()
        await per_commit(aws, Path(tmp), 20 if quick else 200)
        await cold_start(aws, Path(tmp), 1_000 if quick else 10_000, 50 if quick else 500)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    asyncio.run(main(parser.parse_args().quick))
