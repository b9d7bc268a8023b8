"""What the browser suite drives: real ``perdure dev`` and ``perdure sandbox`` processes on
loopback, a scripted OpenAI-compatible model server, and Debian's Chromium through
Playwright (the Playwright browser download is not used: ``CHROMIUM`` names the binary).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import httpx

from remote_env.auth import write_new_secret
from runtimes.client import ActorClient
from tests.local.support import ROOT

__all__ = [
    "CHROMIUM",
    "SCREENSHOTS",
    "TOKEN",
    "DevProcess",
    "Sandbox",
    "free_port",
    "through_the_api",
    "wait_for",
]

CHROMIUM = os.environ.get("PERDURE_CHROMIUM", "/usr/bin/chromium")
# CI keeps these as artifacts (.ci/run prints where); gitignored.
SCREENSHOTS = Path(os.environ.get("PERDURE_CI_ARTIFACTS", ROOT / ".ci-artifacts")) / "screenshots"
TOKEN = "browser-suite-token-0123456789"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_for(what: str, probe: Callable[[], object], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if probe():
                return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


T = TypeVar("T")


def through_the_api(url: str, job: Callable[[ActorClient], Awaitable[T]]) -> T:
    """Run ``job`` with the typed client (host token) against ``url``, for a test's
    setup. In a thread of its own: Playwright's sync API keeps this thread's event loop."""

    async def run() -> T:
        async with ActorClient(url, TOKEN) as client:
            return await job(client)

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, run()).result()


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "OPENAI_API_KEY": "sk-browser-suite",
        "PERDURE_MODEL": "",
        "PERDURE_TOKEN": "",
    }


@dataclass
class Sandbox:
    """``perdure sandbox`` (confined with bubblewrap, as docs/operations.md runs it)."""

    workdir: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def secret_file(self) -> Path:
        return self.workdir / "sandbox.secret"

    def workspace(self, actor: str) -> Path:
        return self.workdir / "root" / actor

    def start(self) -> None:
        (self.workdir / "root").mkdir(parents=True)
        write_new_secret(self.secret_file)
        log = (self.workdir / "sandbox.log").open("ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "runtimes.cli.main",
                "sandbox",
                "--root",
                str(self.workdir / "root"),
                "--listen",
                f"127.0.0.1:{self.port}",
                "--secret-file",
                str(self.secret_file),
            ],
            cwd=ROOT,
            env=_env(),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        )
        log.close()
        wait_for(
            "the sandbox server",
            lambda: httpx.get(f"{self.url}/v1/health", timeout=1).status_code == 200,
        )

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@dataclass
class DevProcess:
    """``perdure dev`` on a fixed port and token, so a restart after SIGKILL serves the
    same URL to a page that stays open."""

    data: Path
    model_base: str
    sandbox: Sandbox | None = None
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[str] | None = None
    starts: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        args = [
            sys.executable,
            "-u",
            "-m",
            "runtimes.cli.main",
            "dev",
            "--port",
            str(self.port),
            "--data",
            str(self.data),
            "--token",
            TOKEN,
            "--model",
            "openai/fake-model",
            "--api-base",
            self.model_base,
        ]
        if self.sandbox is not None:
            args += [
                "--sandbox",
                self.sandbox.url,
                "--sandbox-secret",
                str(self.sandbox.secret_file),
            ]
        self.starts += 1
        log = (self.data.parent / f"dev-{self.starts}.log").open("a")
        self.proc = subprocess.Popen(
            args, cwd=ROOT, env=_env(), stdin=subprocess.DEVNULL, stdout=log, stderr=log, text=True
        )
        log.close()
        headers = {"Authorization": f"Bearer {TOKEN}"}
        wait_for(
            "perdure dev",
            lambda: (
                self._alive()
                and httpx.get(f"{self.url}/v1/actors", headers=headers, timeout=1).status_code
                == 200
            ),
            timeout=60,
        )

    def _alive(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"perdure dev exited {self.proc.returncode}; see its log")
        return True

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs, as in a crash."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
