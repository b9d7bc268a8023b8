"""Driving the Lambda handler in tests: Function URL and API Gateway events, a context
object, and functions on moto-backed resources (each with its own container /tmp)."""

from __future__ import annotations

import base64
import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.testing import VirtualClock
from runtimes.actor.api import ApiConfig
from runtimes.actor.testing import KIT_TOKEN, KitTools, kit_config
from runtimes.aws import AwsResources
from runtimes.aws.alarms import WakeSchedule
from runtimes.aws.handler import ActorFunction, FunctionSettings
from tests.aws.support import container

_requests = itertools.count()


@dataclass
class Context:
    """Lambda's context object: the request id (the lease owner) and the time left."""

    aws_request_id: str
    remaining_ms: int = 60_000

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


def context() -> Context:
    return Context(f"req-{next(_requests)}")


def url_event(
    method: str, path: str, body: Any = None, *, query: str = "", token: str = KIT_TOKEN
) -> dict[str, Any]:
    """A Function URL (payload format 2.0) event."""
    raw = "" if body is None else json.dumps(body)
    return {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": path,
        "rawQueryString": query,
        "headers": {
            "authorization": f"Bearer {token}",
            "content-type": "application/json",
            "host": "abc.lambda-url.us-east-1.on.aws",
        },
        "requestContext": {
            "http": {"method": method, "path": path, "sourceIp": "127.0.0.1"},
            "requestId": "url-request",
        },
        "body": base64.b64encode(raw.encode()).decode(),
        "isBase64Encoded": True,
    }


def rest_event(method: str, path: str, body: Any = None) -> dict[str, Any]:
    """An API Gateway REST (payload format 1.0) event."""
    return {
        "resource": "/{proxy+}",
        "path": path,
        "httpMethod": method,
        "headers": {"Authorization": f"Bearer {KIT_TOKEN}", "Content-Type": "application/json"},
        "multiValueHeaders": {},
        "queryStringParameters": None,
        "requestContext": {"identity": {"sourceIp": "127.0.0.1"}, "stage": "prod"},
        "body": None if body is None else json.dumps(body),
        "isBase64Encoded": False,
    }


def answer(response: dict[str, Any]) -> tuple[int, Any]:
    """Status and JSON body of an HTTP integration response."""
    body = response["body"]
    if response.get("isBase64Encoded"):
        body = base64.b64decode(body).decode()
    return response["statusCode"], json.loads(body) if body else None


def function(
    aws: AwsResources,
    alarms: WakeSchedule,
    tmp: Path,
    clock: VirtualClock,
    *,
    tools: KitTools | None = None,
    max_body_bytes: int = 1024 * 1024,
) -> ActorFunction:
    """A function on a new container (a fresh /tmp) with the kit's agent."""
    return ActorFunction(
        FunctionSettings(
            resources=aws,
            actor=kit_config(tools),
            api=ApiConfig(KIT_TOKEN, max_body_bytes=max_body_bytes),
            workdir=container(tmp),
            alarms=alarms,
            clock=clock,
        )
    )


def alb_event(method: str, path: str, body: Any = None) -> dict[str, Any]:
    """An Application Load Balancer target event."""
    return {
        "requestContext": {"elb": {"targetGroupArn": "arn:aws:elasticloadbalancing:tg/perdure"}},
        "httpMethod": method,
        "path": path,
        "queryStringParameters": {},
        "headers": {"authorization": f"Bearer {KIT_TOKEN}", "content-type": "application/json"},
        "body": "" if body is None else json.dumps(body),
        "isBase64Encoded": False,
    }
