"""AWS front-door benchmark (moto in-process): what one tool round costs in AWS calls,
beside the local host in the same run, and the cold-start rebuild of a big actor.

Run: ``python tests/bench/bench_aws_handler.py`` (``--rounds N``, ``--actors M``,
``--cold-entries E`` / ``--cold-log L`` for the rebuild, ``--quick`` for a smoke run).

Each round is one Lambda invocation through :class:`~runtimes.aws.handler.ActorFunction`
with a Function URL event submitting ``tools`` to the kit's agent (a model turn calling
three tools, then the answer): lease, open (warm: the container's /tmp is kept),
commits, settle, schedule, release. Every AWS call is counted by operation (botocore's
``before-call`` event), so the table is exact, not estimated; DynamoDB write request
units are estimated from the request payloads (one per started KB of each item written,
doubled inside a transaction); the time is wall time per invocation including moto's
own. The local host runs the same rounds on the same app (its SQLite files in a temp
dir; submit, then long-poll to done — what a Lambda invocation does before it returns),
and the ratio of the two is printed. Then the cold start of
:mod:`tests.bench.bench_aws_replica`: 10,000 entries (snapshot + 500 log records)
rebuilt on a fresh /tmp, target <= 0.5 s plus moto's own time.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

for _name, _value in {
    "AWS_ACCESS_KEY_ID": "bench",
    "AWS_SECRET_ACCESS_KEY": "bench",
    "AWS_DEFAULT_REGION": "us-east-1",
}.items():
    os.environ.setdefault(_name, _value)

import httpx  # noqa: E402
from moto import mock_aws  # noqa: E402

from core.testing import VirtualClock  # noqa: E402
from runtimes.actor.api import ApiConfig, create_app  # noqa: E402
from runtimes.actor.testing import KIT_TOKEN, kit_config  # noqa: E402
from runtimes.aws import AwsResources  # noqa: E402
from runtimes.local.host import ActorHost, HostConfig  # noqa: E402
from tests.aws.aws_target import create_alarms  # noqa: E402
from tests.aws.conftest import create_resources  # noqa: E402
from tests.aws.lambda_support import answer, context, function, url_event  # noqa: E402
from tests.bench.bench_aws_replica import cold_start  # noqa: E402
from tests.bench.edge_aws import write_units  # noqa: E402


def _count(calls: Counter[str], client: Any, service: str) -> None:
    def hook(model: Any, **_: Any) -> None:
        calls[f"{service}.{model.name}"] += 1

    def payload(params: dict[str, Any], model: Any, **_: Any) -> None:
        calls["~wru"] += write_units(model.name, params)  # the API's own parameters

    client.meta.events.register("before-call", hook)
    if service == "dynamodb":
        client.meta.events.register("before-parameter-build.dynamodb", payload)


async def _local(rounds: int, actors: int) -> float:
    """Seconds per tool round on the local host (same app, same agent), in-process."""
    with tempfile.TemporaryDirectory() as tmp:
        host = ActorHost(HostConfig(data_dir=Path(tmp), actor=kit_config(), recover_on_start=False))
        app = create_app(host, ApiConfig(KIT_TOKEN))
        await host.start()
        transport = httpx.ASGITransport(app=app)
        headers = {"authorization": f"Bearer {KIT_TOKEN}"}
        body = {"type": "input", "content": "tools"}
        try:
            async with httpx.AsyncClient(
                transport=transport, base_url="http://local", headers=headers
            ) as client:

                async def round_trip(actor: str) -> None:
                    r = await client.post(f"/v1/actors/{actor}/submissions", json=body)
                    assert r.status_code == 202, r.text
                    while True:
                        path = f"/v1/actors/{actor}/submissions/{r.json()['id']}"
                        state = (await client.get(path, params={"wait": 30})).json()
                        if state["status"] == "done":
                            return

                for a in range(actors):
                    await round_trip(f"b{a}")  # the warm-up creates each actor
                started = time.perf_counter()
                for _ in range(rounds):
                    for a in range(actors):
                        await round_trip(f"b{a}")
                return (time.perf_counter() - started) / (rounds * actors)
        finally:
            await host.close()


async def _run(rounds: int, actors: int) -> tuple[float, AwsResources]:
    clock = VirtualClock()
    aws = create_resources()
    alarms = create_alarms(clock.now)
    calls: Counter[str] = Counter()
    _count(calls, aws.dynamodb, "dynamodb")
    _count(calls, aws.s3, "s3")
    _count(calls, alarms.scheduler, "scheduler")
    with tempfile.TemporaryDirectory() as tmp:
        fn = function(aws, alarms, Path(tmp), clock)
        body = {"type": "input", "content": "tools"}
        # One warm-up round per actor creates it (the first open is a cold start).
        for a in range(actors):
            status, out = answer(
                await fn.invoke(url_event("POST", f"/v1/actors/b{a}/submissions", body), context())
            )
            assert status == 202, out
        calls.clear()
        started = time.perf_counter()
        for _ in range(rounds):
            for a in range(actors):
                event = url_event("POST", f"/v1/actors/b{a}/submissions", body)
                status, out = answer(await fn.invoke(event, context()))
                assert status == 202, out
        elapsed = time.perf_counter() - started
    n = rounds * actors
    wru = calls.pop("~wru", 0)
    print(f"{n} tool rounds ({actors} actors x {rounds}), one invocation each")
    print(f"  wall time per invocation: {elapsed / n * 1000:.1f} ms (moto in-process included)")
    for op, count in sorted(calls.items()):
        print(f"  {op:<34} {count / n:6.2f} per round")
    totals = {
        service: sum(c for k, c in calls.items() if k.startswith(service + ".")) / n
        for service in ("dynamodb", "s3", "scheduler")
    }
    print("  calls per round: " + ", ".join(f"{k} {v:.2f}" for k, v in totals.items()))
    print(
        f"  per round: {calls['dynamodb.TransactWriteItems'] / n:.2f} DynamoDB transactions,"
        f" {wru / n:.1f} WRU (estimated from the payloads), {totals['s3']:.2f} S3 calls"
    )
    return elapsed / n, aws


async def _compare(rounds: int, actors: int, cold_entries: int, cold_log: int) -> None:
    aws_s, aws = await _run(rounds, actors)
    local_s = await _local(rounds, actors)
    print(
        f"local host, same rounds: {local_s * 1000:.1f} ms/round;"
        f" AWS (moto) / local = {aws_s / local_s:.1f}x"
    )
    with tempfile.TemporaryDirectory() as tmp:
        # Its own actor on the same moto table and bucket.
        await cold_start(aws, Path(tmp), cold_entries, cold_log)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--actors", type=int, default=5)
    parser.add_argument("--cold-entries", type=int, default=10_000)
    parser.add_argument("--cold-log", type=int, default=500)
    parser.add_argument("--quick", action="store_true", help="a smoke run: few rounds")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.actors, args.cold_entries, args.cold_log = 2, 2, 1_000, 50
    with mock_aws():
        asyncio.run(_compare(args.rounds, args.actors, args.cold_entries, args.cold_log))


if __name__ == "__main__":
    main()
