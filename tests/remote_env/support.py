"""Shared helpers for the remote_env tests: servers (in-process and subprocess), tokens."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI

from core.env import ExecutionEnv
from remote_env.auth import mint_token
from remote_env.client import RemoteEnv, RetryPolicy
from remote_env.server import ServerSettings, create_app

REPO = Path(__file__).resolve().parents[2]
SECRET = b"remote-env-tests-secret-0123456789abcdef"
FAST_RETRY = RetryPolicy(attempts=4, initial_delay=0.01, max_delay=0.05)


def token(workspace: str, ttl: float = 600.0) -> str:
    """A valid token for ``workspace`` under the tests' secret."""
    return mint_token(SECRET, workspace, ttl)


def auth(workspace: str) -> dict[str, str]:
    """Authorization header for ``workspace``."""
    return {"Authorization": f"Bearer {token(workspace)}"}


def settings(root: Path, **overrides: Any) -> ServerSettings:
    """Server settings for a test root."""
    return ServerSettings(root=root, secret=SECRET, **overrides)


@asynccontextmanager
async def running_app(config: ServerSettings) -> AsyncIterator[FastAPI]:
    """The app with its lifespan entered (ASGITransport sends no lifespan events)."""
    app = create_app(config)
    async with app.router.lifespan_context(app):
        yield app


@asynccontextmanager
async def asgi_client(
    app: FastAPI, workspace: str | None = None
) -> AsyncIterator[httpx.AsyncClient]:
    """A raw httpx client driving ``app`` in-process."""
    headers = auth(workspace) if workspace else {}
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://sandbox", headers=headers
    ) as client:
        yield client


def asgi_env(app: FastAPI, workspace: str, **kwargs: Any) -> RemoteEnv:
    """A RemoteEnv driving ``app`` in-process."""
    kwargs.setdefault("retry", FAST_RETRY)
    return RemoteEnv(
        "http://sandbox", token(workspace), transport=httpx.ASGITransport(app=app), **kwargs
    )


def env_factory(make: Callable[[], RemoteEnv]) -> Callable[[], Any]:
    """Adapt a RemoteEnv constructor to the conformance kit's factory shape."""

    @asynccontextmanager
    async def factory() -> AsyncIterator[ExecutionEnv]:
        async with make() as env:
            yield env

    return factory


def free_port() -> int:
    """A port that was free a moment ago on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class ServerProcess:
    """A sandbox server running as ``python -m remote_env.server`` in a subprocess."""

    root: Path
    port: int
    secret_file: Path
    extra: list[str] = field(default_factory=list)
    host: str = "127.0.0.1"
    # Prepended to the server's command line (``ip netns exec NS`` puts it on another host).
    launcher: list[str] = field(default_factory=list)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, *, wait: bool = True) -> ServerProcess:
        log = open(self.root.parent / f"server-{self.port}.log", "ab")  # noqa: SIM115
        try:
            self.process = subprocess.Popen(
                [
                    *self.launcher,
                    sys.executable,
                    "-m",
                    "remote_env.server",
                    "--root",
                    str(self.root),
                    "--listen",
                    f"{self.host}:{self.port}",
                    "--secret-file",
                    str(self.secret_file),
                    *self.extra,
                ],
                cwd=REPO,
                env={**os.environ, "PYTHONPATH": str(REPO)},
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
            )
        finally:
            log.close()
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited with {self.process.returncode}: {self.log()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/v1/health", timeout=1.0).status_code == 200:
                    return
            time.sleep(0.05)
        raise TimeoutError(f"server did not start: {self.log()}")

    def log(self) -> str:
        path = self.root.parent / f"server-{self.port}.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def kill(self) -> None:
        """SIGKILL: no shutdown handlers run (a crash)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def stop(self) -> None:
        """SIGTERM and wait (graceful shutdown)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()

    def env(self, workspace: str, **kwargs: Any) -> RemoteEnv:
        kwargs.setdefault("retry", FAST_RETRY)
        return RemoteEnv(self.url, token(workspace), **kwargs)


@contextlib.contextmanager
def server_process(tmp: Path, *extra: str) -> Iterator[ServerProcess]:
    """Start a server subprocess under ``tmp`` and stop it afterwards."""
    root = tmp / "root"
    root.mkdir(exist_ok=True)
    secret_file = tmp / "secret"
    secret_file.write_bytes(SECRET)
    server = ServerProcess(root=root, port=free_port(), secret_file=secret_file, extra=list(extra))
    server.start()
    try:
        yield server
    finally:
        server.stop()


def pid_alive(pid: int) -> bool:
    """True when ``pid`` exists and is not a zombie (zombies may linger unreaped in containers)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2 :].split()[0] != "Z"


def host_pids(*args: str) -> list[int]:
    """Live processes whose arguments after ``argv[0]`` are exactly ``args``.

    Confined commands run in their own pid namespace, so ``$$`` and ``$!`` inside are not
    host pids: tests find their processes by command line instead.
    """
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            raw = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        argv = raw.split(b"\0")[:-1]
        if [a.decode(errors="replace") for a in argv[1:]] == list(args) and pid_alive(int(entry)):
            found.append(int(entry))
    return found


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
    """Poll ``predicate`` until true or ``timeout``; return its last value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def run(coro: Any) -> Any:
    """Run a coroutine in a fresh event loop (no pytest-asyncio)."""
    return asyncio.run(coro)
