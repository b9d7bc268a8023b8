"""A Lambda container for the approval crash tests: the real entry point on a moto
server, with the tools that ask for approval (``tests.local.support``).

``python -m tests.recovery.aws.approval_child EVENT_JSON...``, configured like
:mod:`tests.recovery.aws.handler_crash_child` (``CRASH_KILL_AFTER_TRANSACTION``,
``CRASH_KILL_BEFORE_TRANSACTION``, ``CRASH_OWNER``), plus ``CRASH_CLOCK_OFFSET_MS``: the
container's clock — the harness's and the lease's — runs that far ahead of the wall
clock (hours passing between two containers)."""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable
from typing import Any

from runtimes.actor import ActorConfig
from runtimes.actor.clock import SystemClock
from runtimes.aws.environment import settings_from_environment
from runtimes.aws.handler import FunctionSettings
from tests.local.support import APPROVAL_AGENT, approval_extension, echo_extension, scripted_model
from tests.recovery.aws.handler_crash_child import killing, main


class _OffsetClock(SystemClock):
    def __init__(self, offset_ms: int) -> None:
        self.offset_ms = offset_ms

    def now(self) -> int:
        return super().now() + self.offset_ms

    def call_at(self, when: int, callback: Callable[[], None]) -> Any:
        return super().call_at(when, callback)


def settings() -> FunctionSettings:
    """The ``PERDURE_FUNCTION`` factory."""
    actor = ActorConfig(
        models=scripted_model(),
        extensions=[echo_extension(), approval_extension(3600)],
        default_agent=dict(APPROVAL_AGENT),
    )
    base = settings_from_environment(actor)
    clock = _OffsetClock(int(os.environ.get("CRASH_CLOCK_OFFSET_MS", "0")))
    dynamodb = killing(base.resources.dynamodb)
    alarms = dataclasses.replace(base.alarms, now=clock.now) if base.alarms else None
    return dataclasses.replace(
        base,
        resources=dataclasses.replace(base.resources, dynamodb=dynamodb),
        clock=clock,
        lease_now=clock.now,
        alarms=alarms,
    )


if __name__ == "__main__":
    main(sys.argv[1:])
