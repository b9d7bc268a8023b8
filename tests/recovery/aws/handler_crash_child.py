"""A Lambda container for the crash tests: the real entry point
(:func:`runtimes.aws.handler.lambda_handler`, configured from the environment as a
deployment is) on a moto server over HTTP, running the seed job's tools and model.

``python -m tests.recovery.aws.handler_crash_child EVENT_JSON...`` invokes the handler with each
event in turn (each its own request id, ``$CRASH_OWNER-<n>``) and prints every response
as a JSON line ``{"response": ...}`` (the model prints ``{"model_saw": ...}`` lines).

Environment besides the deployment's (``PERDURE_*``, ``AWS_ENDPOINT_URL``):
``CRASH_LOG`` (the tools' effects log), ``CRASH_LEASE_OFFSET_MS`` (the lease clock runs
this far ahead, so a second container can take over a killed one's lease without the
test waiting it out) and, optionally, ``CRASH_KILL_AFTER_TRANSACTION=n``: SIGKILL the
process right after its ``n``-th DynamoDB transaction returned (printing
``{"durable": n}`` first), or ``CRASH_KILL_BEFORE_TRANSACTION=n``: right before it is
sent (printing ``{"not_durable": n}``). The handler defers commits to a few flushes, so
its working copy is ahead of DynamoDB before a transaction and level with it after.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from core.faux import FauxModel
from runtimes.actor import ActorConfig
from runtimes.aws.environment import settings_from_environment
from runtimes.aws.handler import FunctionSettings, lambda_handler
from tests.recovery.seed_job import say, seed_travel


class _KillAfterTransaction:
    def __init__(self, inner: Any, kill_after: int | None, kill_before: int | None = None) -> None:
        self.inner = inner
        self.kill_after = kill_after
        self.kill_before = kill_before
        self.transactions = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def transact_write_items(self, **kwargs: Any) -> Any:
        if self.transactions + 1 == self.kill_before:
            say(not_durable=self.transactions + 1)
            os.kill(os.getpid(), signal.SIGKILL)
        out = self.inner.transact_write_items(**kwargs)
        self.transactions += 1
        if self.transactions == self.kill_after:
            say(durable=self.transactions)
            os.kill(os.getpid(), signal.SIGKILL)
        return out


def killing(dynamodb: Any) -> _KillAfterTransaction:
    """``dynamodb`` killing the process where the environment says."""

    def point(name: str) -> int | None:
        value = os.environ.get(name)
        return int(value) if value else None

    return _KillAfterTransaction(
        dynamodb,
        point("CRASH_KILL_AFTER_TRANSACTION"),
        point("CRASH_KILL_BEFORE_TRANSACTION"),
    )


def settings() -> FunctionSettings:
    """The ``PERDURE_FUNCTION`` factory."""
    travel, model = seed_travel(Path(os.environ["CRASH_LOG"]))
    actor = ActorConfig(
        models=FauxModel([model, model]),
        extensions=[travel],
        default_agent={"model": "faux/faux-1", "tools": ["search", "book"]},
    )
    base = settings_from_environment(actor)
    offset = int(os.environ.get("CRASH_LEASE_OFFSET_MS", "0"))
    dynamodb = killing(base.resources.dynamodb)
    return dataclasses.replace(
        base,
        resources=dataclasses.replace(base.resources, dynamodb=dynamodb),
        lease_now=lambda: base.clock.now() + offset,
    )


@dataclasses.dataclass
class _Context:
    aws_request_id: str

    def get_remaining_time_in_millis(self) -> int:
        return 600_000


def main(events: list[str]) -> None:
    owner = os.environ.get("CRASH_OWNER", "container")
    for n, raw in enumerate(events):
        response = lambda_handler(json.loads(raw), _Context(f"{owner}-{n}"))
        print(json.dumps({"response": response}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
