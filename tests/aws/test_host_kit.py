"""The host scenario kit on the AWS host: moto in-process, and a ThreadedMotoServer on
127.0.0.1 reached over real HTTP."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from runtimes.actor.testing import HOST_CHECKS, KitTarget, check_actor_listing_pages
from runtimes.aws import AwsResources
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


@pytest.mark.slow
@pytest.mark.timeout(2400)
async def test_a_thousand_actors_are_listed_in_pages_of_a_hundred(
    aws: AwsResources, tmp_path: Path
) -> None:
    """The kit's listing check at its full size: 1,000 actors, pages of 100, created
    between the pages (``slow``: moto copies the whole table for every transaction, so
    a commit costs it ~0.15 s plus ~0.75 ms per actor already stored, ~10 minutes in
    all on a busy 2-core machine)."""
    lease = LeaseClock()
    target = AwsTarget(aws, create_alarms(lease.now), tmp_path, lease, listed_actors=1000)
    await check_actor_listing_pages(target)
