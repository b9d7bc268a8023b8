"""The demo's worker process: a local actor host serving the HTTP API on loopback, with the
travel scenario's model and tools, and the tools' shell on the sandbox server.

``python -m runtimes.cli.demo.worker --data DIR --port P --token T --sandbox URL
--sandbox-secret FILE [--trace FILE] [--idle-evict S]``

It prints one JSON object per line on stdout: ``{"event": "ready", "url": ...}`` once it
listens, then ``activated`` / ``evicted`` (with ``wake_at``) as actors come and go, each
with ``at`` (epoch ms) — the demo narrates from these. SIGKILL is how the demo crashes
it; SIGTERM stops it cleanly.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path

from core.faux import FAUX_MODEL
from core.harness import reminders_extension
from remote_env.auth import load_secret
from runtimes.actor import ActorConfig
from runtimes.actor.api import ApiConfig
from runtimes.cli.demo.scenario import scenario_model, travel_tools
from runtimes.cli.dev import sandbox_env
from runtimes.local.host import ActorHost, HostConfig
from runtimes.local.server import bind, make_server
from runtimes.observe import HostTelemetry, configure_logging

__all__ = ["main"]


def _say(**event: object) -> None:
    print(json.dumps({**event, "at": int(time.time() * 1000)}), flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--token", required=True)
    parser.add_argument("--sandbox", required=True)
    parser.add_argument("--sandbox-secret", type=Path, required=True)
    parser.add_argument("--trace", type=Path, default=None)
    parser.add_argument("--idle-evict", type=float, default=1.0)
    args = parser.parse_args(argv)

    tools = travel_tools(trace=args.trace)
    reminders = reminders_extension()
    host = ActorHost(
        HostConfig(
            data_dir=args.data,
            actor=ActorConfig(
                models=scenario_model(),
                extensions=[tools, reminders],
                env=sandbox_env(args.sandbox, load_secret(args.sandbox_secret)),
                default_agent={
                    "model": FAUX_MODEL.id,
                    "tools": [t.name for t in (*tools.tools, *reminders.tools)],
                },
                observe=lambda actor, event, wake: _say(event=event, actor=actor, wake_at=wake),
                telemetry=HostTelemetry,  # recovery, tool and event lines in its log
            ),
            idle_evict_s=args.idle_evict,
        )
    )
    configure_logging("text")  # stderr: the demo keeps it in the worker's log file
    server = make_server(host, ApiConfig(args.token), log_requests=True)
    sock = bind("127.0.0.1", args.port)
    _say(event="ready", url=f"http://127.0.0.1:{sock.getsockname()[1]}")
    with contextlib.suppress(KeyboardInterrupt):  # uvicorn re-raises SIGINT after its shutdown
        server.run(sockets=[sock])
    sys.exit(0)


if __name__ == "__main__":
    main()
