"""``perdure dev`` start-up mistakes: each one is a single ``error:`` line naming the fix,
exit status 2, no traceback — checked on real processes (the CLI, a sandbox server)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from runtimes.cli.preflight import PreflightError, check_model
from tests.local.support import ROOT
from tests.local.test_cli import start_dev
from tests.remote_env.support import free_port, server_process

# A clean environment: no model, no token, no OTEL_* from the caller.
_ENV = {
    k: v
    for k, v in os.environ.items()
    if not k.startswith(("OTEL_", "PERDURE_", "OPENAI_", "ANTHROPIC_"))
}


def perdure(
    *args: str, env: dict[str, str] | None = None, prefix: tuple[str, ...] = (), timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*prefix, sys.executable, "-m", "runtimes.cli.main", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**_ENV, "PYTHONPATH": str(ROOT), **(env or {})},
        check=False,
    )


def refused(result: subprocess.CompletedProcess[str], *fix: str) -> str:
    """The one ``error:`` line of a refused start, which must name ``fix``."""
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr + result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for part in fix:
        assert part in lines[0], (part, lines[0])
    return lines[0]


def test_a_port_in_use(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = str(taken.getsockname()[1])
        result = perdure("dev", "--data", str(tmp_path / "d"), "--port", port)
    refused(result, f"port {port}", "is in use", "--port 0")


def test_a_data_directory_already_served_by_another_process(tmp_path: Path) -> None:
    data = tmp_path / "data"
    proc, url, token, _ = start_dev(data, env={"PERDURE_MODEL": "", "PERDURE_TOKEN": ""})
    try:
        result = perdure("dev", "--data", str(data), "--port", "0")
        refused(result, "already served by another perdure dev", "another --data")
        # Meanwhile the first host serves on: an unknown model is refused 422, nothing written.
        headers = {"authorization": f"Bearer {token}"}
        r = httpx.patch(
            f"{url}/v1/actors/fresh/conversations/1/agent",
            json={"model": "nosuch/model"},
            headers=headers,
            timeout=10,
        )
        assert r.status_code == 422, r.text
        assert r.json()["error"]["code"] == "invalid" and "nosuch/model" in r.text
        assert not (data / "fresh.sqlite").exists()
        listed = httpx.get(f"{url}/v1/actors/fresh/tasks", headers=headers, timeout=10)
        assert listed.status_code == 404
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=20)


def test_a_read_only_data_directory(tmp_path: Path) -> None:
    data = tmp_path / "readonly"
    data.mkdir()
    prefix: tuple[str, ...] = ()
    if os.geteuid() == 0:
        # root writes anywhere: run the CLI as nobody, for whom the directory is read-only.
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv: cannot drop privileges")
        prefix = (setpriv, "--reuid=65534", "--regid=65534", "--clear-groups")
        tmp_path.chmod(0o755)
    data.chmod(0o555)
    result = perdure("dev", "--data", str(data), "--port", "0", prefix=prefix)
    refused(result, str(data.resolve()), "not writable", "--data")


def test_a_missing_sandbox_secret_file(tmp_path: Path) -> None:
    missing = tmp_path / "sandbox.secret"
    result = perdure(
        "dev",
        *("--data", str(tmp_path / "d"), "--port", "0"),
        *("--sandbox", "http://127.0.0.1:9", "--sandbox-secret", str(missing)),
        *("--sandbox-wait", "0"),
    )
    refused(result, str(missing), "no such file", "perdure sandbox", "--secret-file")


def test_a_sandbox_that_is_not_running_or_refuses_the_token(tmp_path: Path) -> None:
    wrong = tmp_path / "wrong.secret"
    wrong.write_text("another-secret-that-is-long-enough-0123456789\n")
    dead = f"http://127.0.0.1:{free_port()}"
    args = ("--data", str(tmp_path / "d"), "--port", "0", "--sandbox-wait", "0")
    result = perdure("dev", *args, "--sandbox", dead, "--sandbox-secret", str(wrong))
    refused(result, f"the sandbox at {dead} is not reachable", "perdure sandbox")
    with server_process(tmp_path) as sandbox:
        result = perdure("dev", *args, "--sandbox", sandbox.url, "--sandbox-secret", str(wrong))
    refused(result, "refused the token", "--secret-file")


def test_a_model_without_credentials_or_an_unknown_provider(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = ("dev", "--data", str(tmp_path / "d"), "--port", "0")
    refused(perdure(*args, "--model", "openai/gpt-4o-mini"), "needs OPENAI_API_KEY", "export")
    refused(perdure(*args, "--model", "nosuchprovider/x"), "unknown provider", "openai/gpt-4o")
    # With --api-base too (the same check, in-process: each CLI run imports litellm anew).
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(PreflightError, match="needs OPENAI_API_KEY"):
        check_model("openai/x", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    check_model("openai/x", "http://127.0.0.1:9/v1")


def test_an_existing_demo_workdir(tmp_path: Path) -> None:
    existing = tmp_path / "demo"
    existing.mkdir()
    refused(perdure("demo", "--workdir", str(existing)), f"--workdir {existing} exists")


def test_the_quick_start_sandbox_writes_its_secret_and_dev_keeps_its_token(
    tmp_path: Path,
) -> None:
    """The sequence docs/operations.md gives: ``perdure sandbox ... --secret-file F &`` then at once
    ``perdure dev --sandbox URL --sandbox-secret F``; dev waits for the sandbox's secret
    and for it to listen. ``--token-file`` keeps the API token across a restart."""
    port = free_port()
    sandbox_root = tmp_path / "sandbox"
    secret = tmp_path / "sandbox.secret"
    sandbox = subprocess.Popen(
        [
            sys.executable,
            *("-m", "runtimes.cli.main", "sandbox", "--root", str(sandbox_root)),
            *("--listen", f"127.0.0.1:{port}", "--secret-file", str(secret)),
        ],
        cwd=ROOT,
        env={**_ENV, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    token_file = tmp_path / "api.token"
    args = (
        "--sandbox",
        f"http://127.0.0.1:{port}",
        "--sandbox-secret",
        str(secret),
        "--token-file",
        str(token_file),
    )
    try:
        proc, _, token, lines = start_dev(tmp_path / "data", *args, env={"PERDURE_TOKEN": ""})
        try:
            assert any("coding tools on the sandbox" in line for line in lines), lines
            assert token_file.read_text().strip() == token
            assert token_file.stat().st_mode & 0o077 == 0
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=20)
        again, url2, token2, _ = start_dev(tmp_path / "data", *args, env={"PERDURE_TOKEN": ""})
        try:
            assert token2 == token
            r = httpx.get(
                f"{url2}/v1/actors", headers={"authorization": f"Bearer {token}"}, timeout=10
            )
            assert r.status_code != 401
        finally:
            again.send_signal(signal.SIGTERM)
            again.communicate(timeout=20)
    finally:
        sandbox.send_signal(signal.SIGTERM)
        out, _ = sandbox.communicate(timeout=20)
    assert f"wrote a new token secret to {secret}" in out, out
    assert f"ready at http://127.0.0.1:{port}" in out, out
