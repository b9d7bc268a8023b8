"""Start-up checks of ``perdure dev``: each failure is one line saying what to fix.

Checked before anything is served, in the order a user fixes them: the data directory
(writable; not already served by another process: an exclusive ``flock`` on
``DATA/.perdure-dev.lock``, held for the life of the process), the port, the model
(provider known, credentials present — with ``--api-base`` too), the sandbox (its
secret file, reachable, token accepted). A mistake raises :class:`PreflightError`,
which the command line prints as ``error: ...`` and exits 2: no traceback.
"""

from __future__ import annotations

import errno
import importlib
import os
import secrets
import socket
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from runtimes.actor.api import new_api_token
from runtimes.actor.errors import ActorLocked
from runtimes.local.host.lock import ActorLock

__all__ = [
    "PreflightError",
    "bind_port",
    "check_model",
    "check_sandbox",
    "load_sandbox_secret",
    "lock_data_dir",
    "token_from_file",
]

LOCK_NAME = ".perdure-dev.lock"


class PreflightError(Exception):
    """A start-up mistake; ``str()`` is the one line to show."""


def lock_data_dir(data: Path) -> ActorLock:
    """Create ``data`` if needed, check it is writable and take its lock (the actors'
    own lock, on ``DATA/.perdure-dev.lock``: the kernel drops it when the process dies),
    or say why not."""
    shown = data.resolve()
    try:
        data.mkdir(parents=True, exist_ok=True)
        if not data.is_dir():
            raise PreflightError(f"--data {shown} is not a directory: choose a directory")
        lock = ActorLock.acquire(data / LOCK_NAME)
    except ActorLocked:
        raise PreflightError(
            f"data directory {shown} is already served by another perdure dev: stop it, "
            "or pass another --data"
        ) from None
    except OSError as e:
        raise _unwritable(shown, e) from None
    try:  # a lock file that exists already proves nothing: write something new
        probe = data / f".perdure-write-check-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        lock.release()
        raise _unwritable(shown, e) from None
    return lock


def _unwritable(shown: Path, error: OSError) -> PreflightError:
    if error.errno == errno.EROFS:
        return PreflightError(
            f"data directory {shown} is on a read-only file system: pass --data with a "
            "writable directory"
        )
    if isinstance(error, PermissionError):
        return PreflightError(
            f"data directory {shown} is not writable: fix its permissions or pass --data DIR"
        )
    return PreflightError(f"data directory {shown}: {error.strerror or error}")


def bind_port(bind: Callable[[str, int], socket.socket], host: str, port: int) -> socket.socket:
    """``bind(host, port)``, with a bind failure said as what to do."""
    try:
        return bind(host, port)
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            raise PreflightError(
                f"port {port} on {host} is in use (another perdure dev?): pass --port N, "
                "or --port 0 for any free port"
            ) from None
        if e.errno == errno.EACCES:
            raise PreflightError(
                f"port {port} needs privileges: pass --port 1024 or above"
            ) from None
        raise PreflightError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None


def check_model(model: str, api_base: str | None) -> None:
    """The provider of ``model`` is one litellm knows, and its credentials are set."""
    # The adapter module first: it configures litellm before importing it.
    importlib.import_module("runtimes.models.litellm")
    litellm = importlib.import_module("litellm")
    try:
        litellm.get_llm_provider(model, api_base=api_base)
    except Exception:  # litellm raises its BadRequestError, or a ValueError
        raise PreflightError(
            f"--model {model}: unknown provider; use a litellm model string with its "
            "provider, e.g. openai/gpt-4o-mini or anthropic/claude-3-5-haiku-latest"
        ) from None
    report = litellm.validate_environment(model, api_base=api_base)
    missing = [str(k) for k in report.get("missing_keys") or []]
    if missing:
        names = " and ".join(missing)
        raise PreflightError(
            f"--model {model} needs {names}: export {missing[0]}=... (or leave out --model "
            "for the scripted demo model)"
        )


def load_sandbox_secret(path: Path, *, wait_s: float = 0.0) -> bytes:
    """The sandbox's token secret from ``path``; waits up to ``wait_s`` for a sandbox
    server that is just starting to create it."""
    from remote_env.auth import load_secret

    deadline = time.monotonic() + wait_s
    while True:
        try:
            return load_secret(path)
        except FileNotFoundError:
            if time.monotonic() >= deadline:
                raise PreflightError(
                    f"--sandbox-secret {path}: no such file; the sandbox server writes it "
                    f"(perdure sandbox --root DIR --secret-file {path}): start it first"
                ) from None
            time.sleep(0.1)
        except PermissionError:
            raise PreflightError(
                f"--sandbox-secret {path} is not readable: fix its permissions"
            ) from None
        except ValueError as e:
            raise PreflightError(f"--sandbox-secret {path}: {e}") from None
        except OSError as e:
            raise PreflightError(f"--sandbox-secret {path}: {e.strerror or e}") from None


def check_sandbox(url: str, secret: bytes, *, wait_s: float = 0.0) -> None:
    """The sandbox at ``url`` answers (waiting up to ``wait_s`` for it to come up) and
    accepts a token minted from ``secret``."""
    from remote_env.auth import mint_token

    deadline = time.monotonic() + wait_s
    token = mint_token(secret, f"preflight-{secrets.token_hex(4)}", 60)
    while True:
        try:
            response = httpx.get(
                f"{url.rstrip('/')}/v1/info",
                headers={"Authorization": f"Bearer {token}"},
                timeout=5.0,
            )
            break
        except httpx.TransportError as e:
            if time.monotonic() >= deadline:
                raise PreflightError(
                    f"the sandbox at {url} is not reachable ({type(e).__name__}): start it "
                    "(perdure sandbox --root DIR --secret-file FILE) or fix --sandbox"
                ) from None
            time.sleep(0.2)
        except httpx.InvalidURL:
            raise PreflightError(
                f"--sandbox {url} is not a URL: e.g. http://127.0.0.1:8765"
            ) from None
    if response.status_code == 401:
        raise PreflightError(
            f"the sandbox at {url} refused the token: --sandbox-secret must be the "
            "sandbox server's own --secret-file"
        )
    if response.status_code != 200:
        raise PreflightError(
            f"the sandbox at {url} answered {response.status_code}: is --sandbox the "
            "sandbox server's URL?"
        )


def token_from_file(path: Path) -> str:
    """The API token kept in ``path``; a fresh one is written there (mode 0600) when the
    file does not exist yet, so a restart keeps the token clients hold."""
    try:
        token = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        token = new_api_token()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(token + "\n")
        except OSError as e:
            raise PreflightError(f"--token-file {path}: cannot write it: {e.strerror}") from None
        return token
    except OSError as e:
        raise PreflightError(f"--token-file {path}: cannot read it: {e.strerror}") from None
    if len(token) < 16:
        raise PreflightError(
            f"--token-file {path} holds a token shorter than 16 characters: use a longer one"
        )
    return token
