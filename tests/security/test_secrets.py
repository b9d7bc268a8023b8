"""Secrets are never logged nor echoed in errors.

Each test runs a real server with a known secret and known tokens, provokes every kind of
refusal and failure it can (bad, forged and expired tokens, invalid bodies, unknown ops,
path escapes, oversized bodies, failing commands, an actor whose storage cannot be opened,
an unreachable sandbox), and then searches everything that came out — the server's log at
debug level, every response body and header, the client's exception messages and reprs —
for the secret and the tokens.
"""

from __future__ import annotations

import asyncio
import io
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from core.env import EnvAuthError, EnvUnavailable, OpRef
from remote_env.auth import mint_token
from remote_env.client import RemoteEnv, RetryPolicy
from remote_env.server import ServerSettings
from tests.local.support import TOKEN, host_config, serve_in_thread
from tests.remote_env.support import REPO, SECRET, free_port, server_process

FAST = RetryPolicy(attempts=2, initial_delay=0.01, max_delay=0.01)


def _forged(token: str) -> str:
    """The same token with its signature's last character changed."""
    return token[:-1] + ("A" if token[-1] != "A" else "B")


def _assert_clean(text: str, *secrets: str) -> None:
    for secret in secrets:
        assert secret not in text, f"a secret leaked: ...{secret[-12:]!r} in {text[:2000]!r}"


@contextmanager
def _captured_logs() -> Iterator[io.StringIO]:
    """Everything the servers in this process log, at DEBUG, while the block runs."""
    sink = io.StringIO()
    handler = logging.StreamHandler(sink)
    # The test's own HTTP client logs the URLs it requests (one carries a token on purpose).
    handler.addFilter(lambda record: not record.name.startswith(("httpx", "httpcore")))
    handler.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
    names = ["", "uvicorn", "uvicorn.error", "uvicorn.access", "perdure.api", "perdure.host"]
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
    try:
        yield sink
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.removeHandler(handler)
            logger.setLevel(level)


def _response_text(response: httpx.Response) -> str:
    return f"{response.status_code} {dict(response.headers)} {response.text}"


def test_the_sandbox_never_logs_or_echoes_its_secret_or_tokens(tmp_path: Path) -> None:
    valid = mint_token(SECRET, "ws", 600)
    expired = mint_token(SECRET, "ws", 1, now=time.time() - 3600)
    forged = _forged(valid)
    secrets = (SECRET.decode(), valid, expired, forged)
    seen: list[str] = []
    with server_process(tmp_path, "--log-level", "debug") as server:
        with httpx.Client(base_url=server.url, timeout=30) as http:

            def call(method: str, path: str, token: str | None, **kw: object) -> None:
                headers = {"Authorization": f"Bearer {token}"} if token else {}
                seen.append(_response_text(http.request(method, path, headers=headers, **kw)))  # type: ignore[arg-type]

            for bad in (forged, expired, "pdt1.garbage", valid + "x"):
                call("GET", "/v1/info", bad)
                call("POST", "/v1/ops", bad, json={"kind": "read", "args": {"path": "a"}})
            call("GET", f"/v1/info?token={valid}", None)  # a token in the wrong place
            call("POST", "/v1/ops", valid, content=b"{not json")
            call("POST", "/v1/ops", valid, json={"kind": "nope", "args": {}})
            call("POST", "/v1/ops", valid, json={"kind": "read", "args": {"path": "../../x"}})
            call("POST", "/v1/ops", valid, json={"kind": "read", "args": {"path": "missing"}})
            call("GET", "/v1/ops/never-sent", valid)
            call("POST", "/v1/ops", valid, content=b"x" * (17 * 1024 * 1024))
            body = {"op_id": "o:1", "attempt": 1, "kind": "bash", "args": {"command": "exit 3"}}
            call("POST", "/v1/ops", valid, json={**body, "wait_ms": 10000})
            call("POST", "/v1/ops", valid, json={**body, "args": {"command": "exit 4"}})  # 422

        async def client_errors() -> list[str]:
            texts = []
            for bad in (forged, expired):
                async with RemoteEnv(server.url, bad, retry=FAST) as env:
                    with pytest.raises(EnvAuthError) as caught:
                        await env.run_command("true", op=OpRef("c:1"))
                    texts += [str(caught.value), repr(caught.value), repr(env)]
            async with RemoteEnv(f"http://127.0.0.1:{free_port()}", valid, retry=FAST) as env:
                with pytest.raises(EnvUnavailable) as down:
                    await env.write("f", "x", OpRef("w:1"))
                texts += [str(down.value), repr(down.value)]
            return texts

        seen += asyncio.run(client_errors())
        settings = ServerSettings(root=tmp_path / "root", secret=SECRET)
        seen.append(repr(settings))
    log = server.log()
    assert "401" in log or "GET /v1/info" in log, "the debug log recorded nothing"
    if os.geteuid() == 0:  # started as root without --run-as-user: commands run as nobody
        assert "commands run as nobody" in log
    _assert_clean(log, *secrets)
    for text in seen:
        _assert_clean(text, *secrets)


def test_the_sandbox_cli_does_not_print_a_rejected_secret(tmp_path: Path) -> None:
    weak = tmp_path / "weak"
    weak.write_text("short-Secret-9")  # below the minimum length
    for argv in (
        ["sandbox", "--root", str(tmp_path / "r"), "--secret-file", str(weak)],
        ["token", "--workspace", "ws", "--secret-file", str(weak)],
    ):
        done = subprocess.run(
            [sys.executable, "-c", "from remote_env.cli import app; app()", *argv],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2, done.stderr
        _assert_clean(done.stdout + done.stderr, "short-Secret-9")


def test_the_actor_api_never_logs_or_echoes_its_token(tmp_path: Path) -> None:
    forged = _forged(TOKEN)
    data = tmp_path / "data"
    data.mkdir()
    (data / "broken.sqlite").write_bytes(b"not a database" * 100)  # opening it fails
    seen: list[str] = []
    with (
        _captured_logs() as logs,
        serve_in_thread(host_config(data)) as running,
        httpx.Client(base_url=running.url, timeout=30) as http,
    ):

        def call(method: str, path: str, token: str | None, **kw: object) -> None:
            # A fresh connection each time: the server drops one that carried a 500.
            headers = {"connection": "close"}
            if token:
                headers["authorization"] = f"Bearer {token}"
            seen.append(_response_text(http.request(method, path, headers=headers, **kw)))  # type: ignore[arg-type]

        submit = {"type": "input", "content": "hi"}
        for bad in (forged, TOKEN + "x", TOKEN[:-1], f"{TOKEN} {TOKEN}"):
            call("POST", "/v1/actors/alice/submissions", bad, json=submit)
        call("GET", f"/v1/actors?token={TOKEN}", None)
        call("POST", "/v1/actors/alice/submissions", TOKEN, content=b"{bad")
        call("POST", "/v1/actors/alice/submissions", TOKEN, json={"type": "nope"})
        call("POST", "/v1/actors/bad%20id/submissions", TOKEN, json=submit)
        call("POST", "/v1/actors/alice/submissions", TOKEN, content=b"x" * 200_000)
        call("GET", "/v1/actors/alice/submissions/999", TOKEN)
        call("POST", "/v1/actors/broken/submissions", TOKEN, json=submit)
        call("GET", "/v1/actors/broken/tasks", TOKEN)
    text = logs.getvalue()
    assert "broken" in text, "the failing actor was not logged at all"
    _assert_clean(text, TOKEN, forged)
    for response in seen:
        _assert_clean(response, TOKEN, forged)


def test_the_front_door_refusals_and_configuration_reprs_do_not_show_the_token() -> None:
    from runtimes.actor.api import ApiConfig
    from runtimes.cli.chat import ChatOptions
    from runtimes.cli.dev import DevOptions
    from runtimes.cloudflare.front_door import Forward, FrontDoor, Refusal
    from tests.cloudflare.test_front_door import ROUTES

    token = "front-door-token-0123456789"
    door = FrontDoor(token, ROUTES)
    path = "/v1/actors/a/submissions"
    for header in (f"Bearer {_forged(token)}", f"Bearer {token}x", "Basic abc", ""):
        refusal = door.admit("POST", path, {"authorization": header})
        assert isinstance(refusal, Refusal) and refusal.status == 401
        _assert_clean(repr(refusal), token)
    assert isinstance(door.admit("POST", path, {"authorization": f"Bearer {token}"}), Forward)
    # The configuration objects that hold a token keep it out of their repr (tracebacks
    # and debug logs print reprs).
    _assert_clean(repr(door), token)
    _assert_clean(repr(ApiConfig(token)), token)
    _assert_clean(repr(ChatOptions(url="http://h", token=token)), token)
    _assert_clean(repr(DevOptions(data_dir=Path("d"), token=token)), token)
