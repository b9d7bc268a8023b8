"""AWS front-door benchmark (moto in-process): what one tool round costs in AWS calls.

Run: ``python tests/bench/bench_aws_handler.py`` (``--rounds N``, ``--actors M``).

Each round is one Lambda invocation through :class:`~runtimes.aws.handler.ActorFunction`
with a Function URL event submitting ``tools`` to the kit's agent (a model turn calling
three tools, then the answer): lease, open (warm: the container's /tmp is kept),
commits, settle, schedule, release. Every AWS call is counted by operation (botocore's
``before-call`` event), so the table is exact, not estimated; the time is wall time per
invocation including moto's own.
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

from moto import mock_aws  # noqa: E402

from core.testing import VirtualClock  # noqa: E402
from tests.aws.aws_target import create_alarms  # noqa: E402
from tests.aws.conftest import create_resources  # noqa: E402
from tests.aws.lambda_support import answer, context, function, url_event  # noqa: E402


def _count(calls: Counter[str], client: Any, service: str) -> None:
    def hook(model: Any, **_: Any) -> None:
        calls[f"{service}.{model.name}"] += 1

    client.meta.events.register("before-call", hook)


async def _run(rounds: int, actors: int) -> None:
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
    print(f"{n} tool rounds ({actors} actors x {rounds}), one invocation each")
    print(f"  wall time per invocation: {elapsed / n * 1000:.1f} ms (moto in-process included)")
    for op, count in sorted(calls.items()):
        print(f"  {op:<34} {count / n:6.2f} per round")
    totals = {
        service: sum(c for k, c in calls.items() if k.startswith(service + ".")) / n
        for service in ("dynamodb", "s3", "scheduler")
    }
    print("  calls per round: " + ", ".join(f"{k} {v:.2f}" for k, v in totals.items()))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--actors", type=int, default=5)
    args = parser.parse_args()
    with mock_aws():
        asyncio.run(_run(args.rounds, args.actors))


if __name__ == "__main__":
    main()
