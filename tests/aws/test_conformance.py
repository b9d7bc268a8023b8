"""The storage conformance kit against the AWS host's fenced, replicated SQLite."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import pytest

from core.storage import Storage
from core.testing.storage_conformance import StorageCase, storage_cases
from core.testing.wrappers import ReopeningStorage
from runtimes.aws import AwsResources
from tests.aws.support import container, open_replica

Provider = Callable[[AwsResources, Path], AbstractAsyncContextManager[Storage]]


@asynccontextmanager
async def one_container(aws: AwsResources, tmp: Path) -> AsyncIterator[Storage]:
    replica = await open_replica(aws, container(tmp))
    try:
        yield replica.storage
    finally:
        await replica.close()


@asynccontextmanager
async def cold_start_after_every_commit(aws: AwsResources, tmp: Path) -> AsyncIterator[Storage]:
    """Every reopen is a new container: the working copy is rebuilt from S3 and the log,
    with a snapshot every 3 commits so both paths (and log collection) are exercised."""

    async def reopen() -> Storage:
        replica = await open_replica(aws, container(tmp), snapshot_every=3)
        assert replica.origin == "rebuilt"
        return replica.storage

    storage = await ReopeningStorage.open(reopen)
    try:
        yield storage
    finally:
        await storage.close()


@asynccontextmanager
async def warm_reopen_after_every_commit(aws: AwsResources, tmp: Path) -> AsyncIterator[Storage]:
    workdir = container(tmp)

    async def reopen() -> Storage:
        return (await open_replica(aws, workdir, snapshot_every=2)).storage

    storage = await ReopeningStorage.open(reopen)
    try:
        yield storage
    finally:
        await storage.close()


PROVIDERS: dict[str, Provider] = {
    "aws": one_container,
    "aws-cold-reopening": cold_start_after_every_commit,
    "aws-warm-reopening": warm_reopen_after_every_commit,
}
CASES = storage_cases()


@pytest.mark.parametrize("adapter", sorted(PROVIDERS))
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_conformance(
    case: StorageCase, adapter: str, aws: AwsResources, tmp_path: Path
) -> None:
    async with PROVIDERS[adapter](aws, tmp_path) as storage:
        await case.run(storage)


@pytest.mark.parametrize("case", CASES[:3], ids=[c.name for c in CASES[:3]])
async def test_conformance_over_http(
    case: StorageCase, aws_http: AwsResources, tmp_path: Path
) -> None:
    async with cold_start_after_every_commit(aws_http, tmp_path) as storage:
        await case.run(storage)
