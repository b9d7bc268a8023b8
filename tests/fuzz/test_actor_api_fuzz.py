"""Schemathesis against the actor API of a real local host (uvicorn on loopback).

All checks, every phase (examples, coverage, fuzzing, stateful), a bounded number of
examples and a fixed seed: no 5xx, no response that breaks the schema, no negative case
accepted. Beside the fuzzer, an audit wrapped around the app proves every refused
request wrote nothing: before each request the named actor is let settle and its SQLite
digested; after a 4xx the digest must be the same (``None``: still no actor). The host
runs on a virtual clock, so no reminder or retry fires between the two digests.
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
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from core.testing import VirtualClock
from runtimes.actor.api import ApiConfig
from runtimes.local.host import ActorHost
from runtimes.local.server import bind, make_server
from tests.local.support import TOKEN, host_config, snapshot

pytestmark = [pytest.mark.fuzz, pytest.mark.timeout(400)]

SEED = 20261201
MAX_EXAMPLES = 10
_ACTOR_PATH = re.compile(r"^/v1/actors/([A-Za-z0-9_-]{1,64})(?:/|$)")


class RefusalAudit:
    """ASGI wrapper: records every refused request that changed (or created) an actor."""

    def __init__(self, app: ASGIApp, host: ActorHost, data_dir: Path) -> None:
        self.app = app
        self.host = host
        self.data_dir = data_dir
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

    def _digest(self, actor: str) -> str | None:
        rows = snapshot(self.data_dir / f"{actor}.sqlite")
        return None if rows is None else hashlib.sha256(repr(rows).encode()).hexdigest()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, RefusalAudit]]:
    data = tmp_path / "data"
    host = ActorHost(host_config(data, clock=VirtualClock(), recover_on_start=False))
    server = make_server(host, ApiConfig(TOKEN, max_wait_s=1.0))
    audit = RefusalAudit(server.config.app, host, data)
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
