"""What one tool round costs on the AWS host (moto in-process), counted on the real
boto3 clients: DynamoDB calls, transactions and write units, S3 and Scheduler calls.

A *tool round* is one Lambda invocation (a Function URL event) submitting one input to
an existing actor whose model calls one tool — ``kit_search`` (``safe``) or ``kit_book``
(``unsafe``) — and then answers: lease, open (warm), commits, settle, park, release.
Every call is counted by operation on botocore's ``before-call`` event; write units
come from the request payloads as DynamoDB bills them: one per started KB of each item
written, doubled for a transactional write. The suite's ``edge`` workload and
``tests/aws/test_edge_costs.py`` (which pins the figures) both run :func:`measure`.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from core.faux import FauxModel, FauxState, faux_message, faux_tool_call
from core.harness import ModelRequest, ToolResultMessage, UserMessage
from core.testing import VirtualClock
from runtimes.actor.config import ActorConfig
from runtimes.actor.testing import KitTools, kit_config
from runtimes.aws.gate import item_bytes
from runtimes.aws.handler import ActorFunction, FunctionSettings

__all__ = [
    "TOOLS",
    "Tool",
    "count_calls",
    "edge_config",
    "measure",
    "scripted_model",
    "write_units",
]

Tool = Literal["safe", "unsafe"]
TOOLS = {"safe": "kit_search", "unsafe": "kit_book"}


def _written(action: dict[str, Any]) -> dict[str, Any]:
    """The attributes a write action sends (an update: its key and new values)."""
    if "Item" in action:
        return dict(action["Item"])
    values = {k.lstrip(":"): v for k, v in action.get("ExpressionAttributeValues", {}).items()}
    return {**action.get("Key", {}), **values}


def write_units(operation: str, params: dict[str, Any]) -> int:
    """DynamoDB write request units of one API call, from its parameters."""

    def units(action: dict[str, Any]) -> int:
        return -(-max(1, item_bytes(_written(action))) // 1024)

    if operation == "TransactWriteItems":
        # A ConditionCheck is billed as a read; Put, Update and Delete as writes.
        writes = [
            a for item in params["TransactItems"] for k, a in item.items() if k != "ConditionCheck"
        ]
        return 2 * sum(units(a) for a in writes)
    if operation in ("PutItem", "UpdateItem", "DeleteItem"):
        return units(params)
    if operation == "BatchWriteItem":
        requests = [r for rs in params["RequestItems"].values() for r in rs]
        return sum(units(next(iter(r.values()))) for r in requests)
    return 0


def count_calls(calls: Counter[str], client: Any, service: str) -> None:
    """Count every call ``client`` makes into ``calls`` as ``service.Operation``, plus
    ``~transactions`` and ``~wru`` for DynamoDB."""

    def hook(model: Any, **_: Any) -> None:
        calls[f"{service}.{model.name}"] += 1

    def payload(params: dict[str, Any], model: Any, **_: Any) -> None:
        calls["~wru"] += write_units(model.name, params)  # the API's own parameters
        if model.name == "TransactWriteItems":
            calls["~transactions"] += 1

    client.meta.events.register("before-call", hook)
    if service == "dynamodb":
        client.meta.events.register("before-parameter-build.dynamodb", payload)


def scripted_model(before_call: Callable[[], None] | None = None) -> FauxModel:
    """``safe`` / ``unsafe``: one call of that tool (``before_call()`` first, if given),
    then ``done``."""

    def step(request: ModelRequest, state: FauxState) -> Any:
        last = request.messages[-1] if request.messages else None
        if isinstance(last, ToolResultMessage):
            return faux_message("done: " + last.content)
        users = [m for m in request.messages if isinstance(m, UserMessage)]
        text = users[-1].content if users else ""
        if text in TOOLS:
            if before_call is not None:
                before_call()
            return faux_message(faux_tool_call(TOOLS[text], {"what": "seat"}, id=f"c_{text}"))
        return faux_message(f"echo: {text}")

    return FauxModel(fallback=step, record_requests=False)


def edge_config() -> ActorConfig:
    """The kit's actor with :func:`_model`: one tool per round."""
    return dataclasses.replace(kit_config(KitTools()), models=scripted_model())


async def measure(tool: Tool, rounds: int = 10, actors: int = 2) -> dict[str, float]:
    """Per-round AWS calls of ``rounds`` rounds on each of ``actors`` warm actors. Run
    it inside ``moto.mock_aws()``."""
    from runtimes.actor.api import ApiConfig
    from runtimes.actor.testing import KIT_TOKEN
    from tests.aws.aws_target import create_alarms
    from tests.aws.conftest import create_resources
    from tests.aws.lambda_support import answer, context, url_event
    from tests.aws.support import container

    clock = VirtualClock()
    aws = create_resources()
    alarms = create_alarms(clock.now)
    calls: Counter[str] = Counter()
    count_calls(calls, aws.dynamodb, "dynamodb")
    count_calls(calls, aws.s3, "s3")
    count_calls(calls, alarms.scheduler, "scheduler")
    body = {"type": "input", "content": tool}
    with tempfile.TemporaryDirectory() as tmp:
        fn = ActorFunction(
            FunctionSettings(
                resources=aws,
                actor=edge_config(),
                api=ApiConfig(KIT_TOKEN),
                workdir=container(Path(tmp)),
                alarms=alarms,
                clock=clock,
            )
        )

        async def one_round(actor: str) -> None:
            event = url_event("POST", f"/v1/actors/{actor}/submissions", body)
            status, out = answer(await fn.invoke(event, context()))
            assert status == 202, out

        for a in range(actors):
            await one_round(f"e{a}")  # creates the actor: a cold start, not counted
        calls.clear()
        for _ in range(rounds):
            for a in range(actors):
                await one_round(f"e{a}")
    n = rounds * actors
    per = {k: v / n for k, v in calls.items()}
    out = {
        "dynamodb_calls": sum(v for k, v in per.items() if k.startswith("dynamodb.")),
        "transactions": per.get("~transactions", 0.0),
        "wru": per.get("~wru", 0.0),
        "s3_calls": sum(v for k, v in per.items() if k.startswith("s3.")),
        "scheduler_calls": sum(v for k, v in per.items() if k.startswith("scheduler.")),
    }
    out |= {k: v for k, v in per.items() if not k.startswith("~")}
    return out
