"""The host scenario kit on the AWS host (moto in-process)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from runtimes.actor.testing import HOST_CHECKS, KitTarget
from runtimes.aws import AwsResources
from tests.aws.aws_target import AwsTarget, LeaseClock, create_alarms


@pytest.mark.parametrize("check", HOST_CHECKS, ids=lambda c: c.__name__)
async def test_aws_host(
    check: Callable[[KitTarget], Awaitable[None]], aws: AwsResources, tmp_path: Path
) -> None:
    lease = LeaseClock()
    await check(AwsTarget(aws, create_alarms(lease.now), tmp_path, lease))
