"""The host scenario kit on the AWS host: moto in-process, and a ThreadedMotoServer on
127.0.0.1 reached over real HTTP."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from runtimes.actor.testing import HOST_CHECKS, KitTarget
from tests.aws.aws_target import AwsTarget, LeaseClock, create_alarms


@pytest.mark.parametrize("backend", ["in-process", "http"])
@pytest.mark.parametrize("check", HOST_CHECKS, ids=lambda c: c.__name__)
async def test_aws_host(
    check: Callable[[KitTarget], Awaitable[None]],
    backend: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    lease = LeaseClock()
    if backend == "in-process":
        aws = request.getfixturevalue("aws")
        alarms = create_alarms(lease.now)
    else:
        aws = request.getfixturevalue("aws_http")
        alarms = create_alarms(lease.now, request.getfixturevalue("moto_server"))
    await check(AwsTarget(aws, alarms, tmp_path, lease))
