"""A local host process for tests: ``python -m tests.local.host_proc --data DIR``.

Serves the actor API on a free loopback port with the scripted model of
``tests.local.support`` and the test token, prints ``{"url": ...}`` as its first line,
and runs until SIGINT/SIGTERM (graceful) or SIGKILL.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from core.harness import HarnessSettings, RetrySettings
from runtimes.actor.api import ApiConfig
from runtimes.local.host import ActorHost
from runtimes.local.server import bind, make_server
from tests.local.support import TOKEN, host_config


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--idle", type=float, default=30.0)
    parser.add_argument("--retry-ms", type=int, default=2_000)
    parser.add_argument("--port", type=int, default=0)  # fixed: clients outlive restarts
    args = parser.parse_args()
    settings = HarnessSettings(retry=RetrySettings(base_delay_ms=args.retry_ms))
    host = ActorHost(host_config(args.data, idle_evict_s=args.idle, settings=settings))
    server = make_server(host, ApiConfig(TOKEN), graceful_s=2)
    sock = bind("127.0.0.1", args.port)
    print(json.dumps({"url": f"http://127.0.0.1:{sock.getsockname()[1]}"}), flush=True)
    server.run(sockets=[sock])


if __name__ == "__main__":
    main()
