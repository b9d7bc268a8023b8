"""The seed crash job on the AWS host's storage: a Lambda-like process whose actor lives
in DynamoDB and S3 (a moto server) with its working copy in its own /tmp.

``python -m tests.recovery.aws.seed_job_aws ENDPOINT WORKDIR LOG OWNER LEASE_CLOCK_OFFSET_MS``:
the lease clock runs ``LEASE_CLOCK_OFFSET_MS`` ahead of the system clock, so a second
invocation can take over the lease a killed one still holds (as Lambda would, once the
lease expired) without the test sleeping through the lease.
"""

from __future__ import annotations

import sys
from pathlib import Path

import boto3

from core.storage import Storage
from runtimes.actor.clock import SystemClock
from runtimes.aws import AwsResources, open_actor_replica
from tests.aws.conftest import BUCKET, REGION, TABLE
from tests.recovery import seed_job

LEASE_MS = 60_000


def run(endpoint: str, workdir: Path, log: Path, owner: str, offset_ms: int) -> None:
    resources = AwsResources(
        boto3.client("dynamodb", region_name=REGION, endpoint_url=endpoint),
        boto3.client("s3", region_name=REGION, endpoint_url=endpoint),
        TABLE,
        BUCKET,
    )
    clock = SystemClock()

    async def open_storage(_: Path) -> Storage:
        replica = await open_actor_replica(
            resources,
            "seed",
            owner=owner,
            now=lambda: clock.now() + offset_ms,
            workdir=workdir,
            lease_ms=LEASE_MS,
        )
        return replica.storage

    seed_job.main(workdir, log, open_storage)


if __name__ == "__main__":
    endpoint, workdir, log, owner, offset = sys.argv[1:6]
    run(endpoint, Path(workdir), Path(log), owner, int(offset))
