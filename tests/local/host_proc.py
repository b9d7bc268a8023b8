"""A local host process for tests: ``python -m tests.local.host_proc --data DIR``.

Serves the actor API on a free loopback port with the scripted model of
``tests.local.support`` and the test token, prints ``{"url": ...}`` as its first line,
and runs until SIGINT/SIGTERM (graceful) or SIGKILL. ``--approvals`` installs the tools
that ask for approval; ``--clock-offset-ms`` runs the host's clock that far ahead of the
wall clock (hours passing between two processes without waiting for them);
``--journal-when-opening N`` sets ``HostConfig.journal_when_opening``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from core.harness import HarnessSettings, RetrySettings
from runtimes.actor.api import ApiConfig
from runtimes.actor.clock import SystemClock
from runtimes.local.host import ActorHost
from runtimes.local.server import bind, make_server
from tests.local.support import (
    APPROVAL_AGENT,
    TOKEN,
    approval_extension,
    echo_extension,
    host_config,
)


class OffsetClock(SystemClock):
    """The wall clock, ``offset_ms`` ahead."""

    def __init__(self, offset_ms: int) -> None:
        self.offset_ms = offset_ms

    def now(self) -> int:
        return super().now() + self.offset_ms

    def call_at(self, when: int, callback: Callable[[], None]) -> Any:
        return super().call_at(when, callback)  # the delay is taken from now(): offset


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--idle", type=float, default=30.0)
    parser.add_argument("--retry-ms", type=int, default=2_000)
    parser.add_argument("--port", type=int, default=0)  # fixed: clients outlive restarts
    parser.add_argument("--approvals", type=float, default=None, help="expiry seconds")
    parser.add_argument("--clock-offset-ms", type=int, default=0)
    parser.add_argument(
        "--journal-when-opening", type=int, default=None, help="default: HostConfig's"
    )
    args = parser.parse_args()
    settings = HarnessSettings(retry=RetrySettings(base_delay_ms=args.retry_ms))
    extra: dict[str, Any] = {}
    if args.approvals is not None:
        extra["extensions"] = [echo_extension(), approval_extension(args.approvals)]
        extra["default_agent"] = dict(APPROVAL_AGENT)
    if args.clock_offset_ms:
        extra["clock"] = OffsetClock(args.clock_offset_ms)
    if args.journal_when_opening is not None:
        extra["journal_when_opening"] = args.journal_when_opening
    host = ActorHost(host_config(args.data, idle_evict_s=args.idle, settings=settings, **extra))
    server = make_server(host, ApiConfig(TOKEN), graceful_s=2)
    sock = bind("127.0.0.1", args.port)
    print(json.dumps({"url": f"http://127.0.0.1:{sock.getsockname()[1]}"}), flush=True)
    server.run(sockets=[sock])


if __name__ == "__main__":
    main()
