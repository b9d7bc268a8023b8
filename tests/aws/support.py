"""Opening AWS replicas for tests: one workdir per simulated container."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from core.testing.clock import VirtualClock
from runtimes.aws import ActorReplica, AwsResources, open_actor_replica

_containers = itertools.count()


def container(tmp: Path) -> Path:
    """A fresh /tmp of a new Lambda container."""
    path = tmp / f"container-{next(_containers)}"
    path.mkdir()
    return path


async def open_replica(
    aws: AwsResources,
    workdir: Path,
    *,
    actor: str = "a1",
    owner: str = "owner-a",
    clock: VirtualClock | None = None,
    **options: Any,
) -> ActorReplica:
    return await open_actor_replica(
        aws, actor, owner=owner, now=(clock or VirtualClock()).now, workdir=workdir, **options
    )


def items(aws: AwsResources, actor: str = "a1") -> list[dict[str, Any]]:
    """Every item of the actor (all pages: a query page stops at 1 MB)."""
    request: dict[str, Any] = {
        "TableName": aws.table,
        "KeyConditionExpression": "pk = :pk",
        "ExpressionAttributeValues": {":pk": {"S": f"actor#{actor}"}},
        "ConsistentRead": True,
    }
    found: list[dict[str, Any]] = []
    while True:
        out = aws.dynamodb.query(**request)
        found += out["Items"]
        if "LastEvaluatedKey" not in out:
            return found
        request["ExclusiveStartKey"] = out["LastEvaluatedKey"]


def log_seqs(aws: AwsResources, actor: str = "a1") -> list[int]:
    return sorted(
        {int(i["seq"]["N"]) for i in items(aws, actor) if i["sk"]["S"].startswith("log#")}
    )


def head(aws: AwsResources, actor: str = "a1") -> dict[str, Any]:
    (found,) = [i for i in items(aws, actor) if i["sk"]["S"] == "head"]
    return {k: next(iter(v.values())) for k, v in found.items()}


def objects(aws: AwsResources) -> list[str]:
    return sorted(o["Key"] for o in aws.s3.list_objects_v2(Bucket=aws.bucket).get("Contents", []))
