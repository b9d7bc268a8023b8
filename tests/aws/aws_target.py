"""The host kit's target for the AWS host: DynamoDB, S3 and the Scheduler in moto.

Each host is a new container (a fresh ``/tmp``: every open is a cold start) with its own
lease owner. ``kill`` stops the host as SIGKILL would — no lease released, no schedule
armed — and then lets the lease clock run past the dead holder's lease, as the next
invocation would find it. ``front_door`` reaches the app as production does: each request
a Function URL event to a new invocation of the Lambda handler, with its own lease owner
(the kit checks what the handler adds there: the mailbox)."""

from __future__ import annotations

import base64
import hashlib
import itertools
from pathlib import Path
from typing import Any

import boto3
import httpx

from core import Clock
from runtimes.actor import ActorConfig
from runtimes.actor.api import ApiConfig
from runtimes.actor.testing import KIT_TOKEN, KitHost
from runtimes.aws import AwsResources
from runtimes.aws.alarms import WakeSchedule
from runtimes.aws.handler import ActorFunction, FunctionSettings
from runtimes.aws.host import AwsActorStore, AwsHost
from runtimes.aws.lease import DEFAULT_LEASE_MS
from tests.aws.conftest import REGION
from tests.aws.lambda_support import context
from tests.aws.support import container, items

GROUP = "perdure-actors"
FUNCTION_ARN = f"arn:aws:lambda:{REGION}:123456789012:function:perdure-actor"
ROLE_ARN = "arn:aws:iam::123456789012:role/perdure-scheduler"


def create_alarms(now: Any, endpoint_url: str | None = None) -> WakeSchedule:
    scheduler = boto3.client("scheduler", region_name=REGION, endpoint_url=endpoint_url)
    scheduler.create_schedule_group(Name=GROUP)
    return WakeSchedule(scheduler, GROUP, FUNCTION_ARN, ROLE_ARN, now)


class LeaseClock:
    """The lease clock every host of a target shares (epoch ms, moved by hand)."""

    def __init__(self) -> None:
        self.ms = 1_700_000_000_000

    def now(self) -> int:
        return self.ms


def digest(aws: AwsResources, actor: str) -> str | None:
    """Everything committed for ``actor``: the head's seq and snapshot pointer, its log
    items and its S3 objects — not the lease fields, which every open rewrites."""
    found = items(aws, actor)
    heads = [i for i in found if i["sk"]["S"] == "head"]
    if not heads or int(heads[0].get("seq", {"N": "0"})["N"]) == 0:
        return None
    head = heads[0]
    state: list[Any] = [
        head["seq"]["N"],
        head.get("snapshot_key", {}).get("S"),
        sorted(
            (i["sk"]["S"], repr(i.get("data")), repr(i.get("object")))
            for i in found
            if i is not head
        ),
    ]
    listing = aws.s3.list_objects_v2(Bucket=aws.bucket, Prefix=f"{aws.prefix}/{actor}/")
    for obj in sorted(o["Key"] for o in listing.get("Contents", [])):
        body = aws.s3.get_object(Bucket=aws.bucket, Key=obj)["Body"].read()
        state.append((obj, hashlib.sha256(body).hexdigest()))
    return hashlib.sha256(repr(state).encode()).hexdigest()


class AwsTarget:
    one_call_at_a_time = True  # moto's backends are not safe across threads (the kit)

    def __init__(
        self,
        aws: AwsResources,
        alarms: WakeSchedule,
        tmp: Path,
        lease: LeaseClock,
        *,
        listed_actors: int = 100,  # the kit's listing: ~0.2 s an actor on moto
    ) -> None:
        self.listed_actors = listed_actors
        self.aws = aws
        self.alarms = alarms
        self.tmp = tmp
        self.lease = lease
        self._owners = itertools.count()

    def host(self, config: ActorConfig, clock: Clock) -> AwsHost:
        store = AwsActorStore(
            self.aws,
            owner=f"invocation-{next(self._owners)}",
            workdir=container(self.tmp),
            lease_now=self.lease.now,
        )
        return AwsHost(config, store=store, clock=clock, alarms=self.alarms)

    async def kill(self, host: KitHost) -> None:
        assert isinstance(host, AwsHost)
        await host.crash()
        self.lease.ms += DEFAULT_LEASE_MS + 1

    def exists(self, actor: str) -> bool:
        return digest(self.aws, actor) is not None

    def front_door(self, config: ActorConfig, clock: Clock) -> httpx.AsyncBaseTransport:
        settings = FunctionSettings(
            resources=self.aws,
            actor=config,
            api=ApiConfig(KIT_TOKEN),
            workdir=container(self.tmp),
            alarms=self.alarms,
            clock=clock,
            lease_now=self.lease.now,
        )
        return LambdaTransport(ActorFunction(settings))

    def digest(self, actor: str) -> str | None:
        return digest(self.aws, actor)


class LambdaTransport(httpx.AsyncBaseTransport):
    """httpx requests as Function URL (payload 2.0) events, one invocation each."""

    def __init__(self, function: ActorFunction) -> None:
        self.function = function

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        raw = await request.aread()
        event = {
            "version": "2.0",
            "routeKey": "$default",
            "rawPath": request.url.path,
            "rawQueryString": request.url.query.decode(),
            "headers": dict(request.headers),
            "requestContext": {
                "http": {
                    "method": request.method,
                    "path": request.url.path,
                    "sourceIp": "127.0.0.1",
                },
                "requestId": "url-request",
            },
            "body": base64.b64encode(raw).decode(),
            "isBase64Encoded": True,
        }
        out = await self.function.invoke(event, context())
        body = out.get("body", "")
        content = base64.b64decode(body) if out.get("isBase64Encoded") else body.encode()
        return httpx.Response(out["statusCode"], headers=out.get("headers"), content=content)
