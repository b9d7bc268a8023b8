"""Schemathesis against the actor API served by each host (uvicorn on loopback): the
local host (:class:`~runtimes.local.host.ActorHost`) and the Durable Object host (one
:class:`~runtimes.cloudflare.actor.DurableActor` per actor on the ``ctx.storage``
stand-in, routed by :class:`~tests.cloudflare.kit_target.DurableNamespaceHost`).

All checks, every phase (examples, coverage, fuzzing, stateful), a bounded number of
examples and a fixed seed: no 5xx, no response that breaks the schema, no negative case
accepted. Beside the fuzzer, an audit wrapped around the app proves every refused
request wrote nothing: before each request the named actor is let settle and its SQLite
digested; after a 4xx the digest must be the same (``None``: still no actor). The host
runs on a virtual clock, so no reminder or retry fires between the two digests. What
differs between the hosts (how one is built, where an actor's SQLite lives) is a
:class:`Served` host; the test itself is one, parametrized over both.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import uvicorn
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from core.testing import VirtualClock
from runtimes.actor import Host
from runtimes.actor.api import ApiConfig, create_app
from runtimes.local.host import ActorHost
from runtimes.local.server import bind, make_server
from tests.cloudflare.kit_target import DurableNamespace
from tests.local.support import TOKEN, host_config, snapshot

pytestmark = [pytest.mark.fuzz, pytest.mark.timeout(400)]

SEED = 20261201
MAX_EXAMPLES = 10
_ACTOR_PATH = re.compile(r"^/v1/actors/([A-Za-z0-9_-]{1,64})(?:/|$)")


class RefusalAudit:
    """ASGI wrapper: records every refused request that changed (or created) an actor."""

    def __init__(self, app: ASGIApp, host: Host, digest: Callable[[str], str | None]) -> None:
        self.app = app
        self.host = host
        self._digest = digest
        self.violations: list[str] = []
        self.refused = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        match = _ACTOR_PATH.match(str(scope.get("path", ""))) if scope["type"] == "http" else None
        if match is None:
            await self.app(scope, receive, send)
            return
        actor = match.group(1)
        before = await self._settled_digest(actor)
        status = 0

        async def tap(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        await self.app(scope, receive, tap)
        if 400 <= status < 500:
            self.refused += 1
            after = self._digest(actor)
            if after != before:
                what = "created" if before is None else "changed"
                self.violations.append(f"{scope['method']} {scope['path']} -> {status} {what}")

    async def _settled_digest(self, actor: str) -> str | None:
        if self._digest(actor) is not None:
            try:
                async with self.host.use(actor) as harness:
                    await asyncio.wait_for(harness.wait_for_idle(), 5)
            except Exception:  # locked, shutting down, not settling: digest as it is
                pass
        return self._digest(actor)


def _digest_file(db: Path, *, empty_is_none: bool = False) -> str | None:
    """Every row of an actor's SQLite hashed; ``None`` when there is no file (or, with
    ``empty_is_none``, a file with no row in any table)."""
    rows = snapshot(db)
    if rows is None or (empty_is_none and not any(rows.values())):
        return None
    return hashlib.sha256(repr(rows).encode()).hexdigest()


@dataclass
class Served:
    """One host behind the API: the uvicorn server and how to digest an actor."""

    host: Host
    server: uvicorn.Server
    digest: Callable[[str], str | None]


_API = ApiConfig(TOKEN, max_wait_s=1.0)


def _local(data: Path) -> Served:
    host = ActorHost(host_config(data, clock=VirtualClock(), recover_on_start=False))
    return Served(host, make_server(host, _API), lambda a: _digest_file(data / f"{a}.sqlite"))


def _durable_object(data: Path) -> Served:
    data.mkdir(parents=True)
    namespace = DurableNamespace(data)
    host = namespace.host(host_config(data).actor, VirtualClock())

    async def release_files() -> None:  # on the server's thread, which opened them
        namespace.close()

    app = create_app(host, _API, on_shutdown=[release_files])
    config = uvicorn.Config(
        app, loop="asyncio", ws="none", lifespan="on", log_level="warning", access_log=False
    )
    # workerd makes an object for every name it is asked for, so an addressed object
    # that stored no row is no actor (its storage is opened before the API refuses).
    return Served(
        host,
        uvicorn.Server(config),
        lambda a: _digest_file(data / f"{a}.sqlite", empty_is_none=True),
    )


HOSTS: dict[str, Callable[[Path], Served]] = {"local": _local, "durable-object": _durable_object}


@pytest.fixture(params=sorted(HOSTS))
def served(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, RefusalAudit]]:
    built = HOSTS[request.param](tmp_path / "data")
    server = built.server
    audit = RefusalAudit(server.config.app, built.host, built.digest)
    server.config.app = audit
    sock = bind("127.0.0.1", 0)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "server did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", audit
    finally:
        server.should_exit = True
        thread.join(15)
        sock.close()


def test_schemathesis_finds_nothing_and_refusals_write_nothing(
    served: tuple[str, RefusalAudit], tmp_path: Path
) -> None:
    url, audit = served
    headers = {"authorization": f"Bearer {TOKEN}"}
    # An actor with history, so the examples (actor "demo", conversation 1) hit one.
    with httpx.Client(base_url=url, headers=headers, timeout=30) as client:
        r = client.post("/v1/actors/demo/submissions", json={"type": "input", "content": "hi"})
        assert r.status_code == 202, r.text
    cli = shutil.which("schemathesis") or str(Path(sys.executable).with_name("schemathesis"))
    result = subprocess.run(
        [
            cli,
            "--config-file",
            str(Path(__file__).with_name("schemathesis.toml")),
            "run",
            f"{url}/openapi.json",
            "--checks",
            "all",
            "--mode",
            "all",
            "--max-examples",
            str(MAX_EXAMPLES),
            "--seed",
            str(SEED),
            "--header",
            f"Authorization: Bearer {TOKEN}",
            # The watch streams until the client leaves; its refusals are tested apart.
            "--exclude-path-regex",
            "/watch$",
            "--request-timeout",
            "10",
            "--max-time",
            "150",
            "--no-color",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "SCHEMATHESIS_TELEMETRY": "false"},
    )
    (tmp_path / "schemathesis.txt").write_text(result.stdout + result.stderr)
    report = f"full report: {tmp_path / 'schemathesis.txt'}\n" + result.stdout[-8000:]
    assert result.returncode == 0, report
    assert audit.refused > 0, report
    assert audit.violations == [], audit.violations
