"""Run the server with uvicorn (one process, one worker: ops live in this process)."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path

import uvicorn

from remote_env.auth import load_secret, write_new_secret
from remote_env.server.app import create_app
from remote_env.server.settings import ServerSettings

__all__ = ["parse_listen", "resolve_secret", "serve"]


def parse_listen(listen: str) -> tuple[str, int]:
    """Split ``HOST:PORT`` (``[::1]:PORT`` for IPv6).

    Raises:
        ValueError: no port, or a port outside 0-65535.
    """
    host, sep, port_text = listen.rpartition(":")
    if not sep or not host or not port_text.isdigit():
        raise ValueError(f"expected HOST:PORT, got {listen!r}")
    port = int(port_text)
    if not 0 <= port <= 65535:
        raise ValueError(f"port out of range: {port}")
    return host.strip("[]"), port


def resolve_secret(
    root: Path, secret_file: Path | None, say: Callable[[str], None] | None = None
) -> bytes:
    """The secret from ``secret_file`` (default ``<root>/.perdure/secret``); a file that
    does not exist yet is created (mode 0600) with a fresh secret, and ``say`` is told
    where, so the actor host can be pointed at it."""
    if secret_file is None:
        state = root / ".perdure"
        state.mkdir(parents=True, exist_ok=True, mode=0o700)
        secret_file = state / "secret"
    try:
        return load_secret(secret_file)
    except FileNotFoundError:
        secret_file.parent.mkdir(parents=True, exist_ok=True)
        secret = write_new_secret(secret_file)
        if say is not None:
            say(
                f"perdure sandbox: wrote a new token secret to {secret_file} "
                f"(perdure dev --sandbox-secret {secret_file})"
            )
        return secret


class _Server(uvicorn.Server):
    """uvicorn's server, saying when it is ready to take requests."""

    def __init__(self, config: uvicorn.Config, ready: Callable[[], None] | None) -> None:
        super().__init__(config)
        self._ready = ready

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started and self._ready is not None:
            self._ready()


def serve(
    settings: ServerSettings,
    host: str,
    port: int,
    *,
    log_level: str = "warning",
    say: Callable[[str], None] | None = None,
) -> None:
    """Serve until interrupted (SIGINT/SIGTERM shut down gracefully); ``say`` hears a
    line once the server listens."""
    config = uvicorn.Config(
        create_app(settings),
        host=host,
        port=port,
        log_level=log_level,
        lifespan="on",
        proxy_headers=False,
        server_header=False,
        timeout_graceful_shutdown=10,
    )
    shown = f"[{host}]" if ":" in host else host

    def ready() -> None:
        if say is not None:
            say(f"perdure sandbox: ready at http://{shown}:{port} (workspaces in {settings.root})")

    _Server(config, ready).run()
