"""A Lambda-like holder that SIGKILLs itself at a chosen point of a commit.

``python -m tests.recovery.aws.crash_child <endpoint> <workdir> <point>``, with ``point``:

* ``after-durable`` — the third entry's DynamoDB transaction lands, then the process is
  killed before the local apply;
* ``after-apply`` — the third entry is committed and applied, then the process is killed
  before its next commit;
* ``pending`` — deferring (as under the Lambda handler): the conversation is flushed,
  the three entries are committed and applied but never flushed, then the process is
  killed — its working copy is ahead of DynamoDB.

Prints ``committed <entry id>`` for every entry whose commit returned, and
``durable <entry id>`` just before the kill in ``after-durable``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Any

from core.records import ConversationRecord, Entry
from core.testing.clock import VirtualClock
from runtimes.aws import AwsResources, open_actor_replica
from tests.aws.conftest import BUCKET, REGION, TABLE

START = 1_700_000_000_000
LEASE_MS = 60_000


class _KillAfterTransaction:
    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.armed = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def transact_write_items(self, **kwargs: Any) -> Any:
        out = self.inner.transact_write_items(**kwargs)
        if self.armed:
            print("durable", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        return out


async def main(endpoint: str, workdir: Path, point: str) -> None:
    import boto3

    dynamodb = _KillAfterTransaction(
        boto3.client("dynamodb", region_name=REGION, endpoint_url=endpoint)
    )
    s3 = boto3.client("s3", region_name=REGION, endpoint_url=endpoint)
    resources = AwsResources(dynamodb, s3, TABLE, BUCKET)
    replica = await open_actor_replica(
        resources,
        "a1",
        owner="doomed",
        now=VirtualClock(START).now,
        workdir=workdir,
        lease_ms=LEASE_MS,
        defer=point == "pending",
    )
    await replica.storage.commit([ConversationRecord(1)])
    await replica.storage.flush()  # a no-op unless deferring
    for n in range(3):
        entry_id = await replica.storage.mint_id()
        if n == 2 and point == "after-durable":
            dynamodb.armed = True
        await replica.storage.commit([Entry(entry_id, 1, "custom", data={"n": n})])
        print("committed", entry_id, flush=True)
    if point in ("after-apply", "pending"):
        os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], Path(sys.argv[2]), sys.argv[3]))
