"""Tokens, the CLI and the ``python -m remote_env.server`` entry point."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from remote_env.auth import InvalidToken, load_secret, mint_token, verify_token, write_new_secret
from remote_env.cli import app
from tests.remote_env.support import REPO, SECRET, auth, server_process


def test_token_round_trip_and_refusals() -> None:
    now = 1_000_000.0
    token = mint_token(SECRET, "actor-1", 60, now=now)
    claims = verify_token(SECRET, token, now=now + 59)
    assert (claims.workspace, claims.expires_at) == ("actor-1", 1_000_060)
    with pytest.raises(InvalidToken, match="expired"):
        verify_token(SECRET, token, now=now + 60)
    with pytest.raises(InvalidToken, match="bad_signature"):
        verify_token(b"x" * 32, token, now=now)
    for garbage in ("", "pdt1", "pdt1.a.b.c", "v0.a.b", token + "!", "é"):
        with pytest.raises(InvalidToken):
            verify_token(SECRET, garbage, now=now)
    with pytest.raises(ValueError, match="secret"):
        mint_token(b"short", "ws", 60)
    with pytest.raises(ValueError, match="workspace"):
        mint_token(SECRET, "../etc", 60)
    with pytest.raises(ValueError, match="ttl"):
        mint_token(SECRET, "ws", 0)
    assert mint_token(SECRET, "ws", 60) != mint_token(SECRET, "ws", 60)  # distinct jti


def test_a_token_has_one_spelling() -> None:
    # The signature's last base64 character carries two unused bits: before tokens were
    # read strictly, a token with its last character changed could still verify (which
    # made a "forged token is refused" test fail about once in sixteen runs).
    import string

    alphabet = string.ascii_letters + string.digits + "-_"
    for _ in range(20):
        token = mint_token(SECRET, "ws", 600)
        verify_token(SECRET, token)
        head, payload, signature = token.split(".")
        for last in alphabet.replace(signature[-1], ""):
            changed = f"{head}.{payload}.{signature[:-1]}{last}"
            with pytest.raises(InvalidToken):
                verify_token(SECRET, changed)
        for part in (payload[:-1] + ("A" if payload[-1] != "A" else "B"),):
            with pytest.raises(InvalidToken):
                verify_token(SECRET, f"{head}.{part}.{signature}")


def test_secret_files(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    secret = write_new_secret(path)
    assert load_secret(path) == secret
    assert path.stat().st_mode & 0o777 == 0o600
    with pytest.raises(FileExistsError):
        write_new_secret(path)


def test_cli_token_command(tmp_path: Path) -> None:
    secret_file = tmp_path / "secret"
    secret_file.write_bytes(SECRET + b"\n")
    result = CliRunner().invoke(
        app, ["token", "--workspace", "ws", "--ttl", "120", "--secret-file", str(secret_file)]
    )
    assert result.exit_code == 0, result.output
    claims = verify_token(SECRET, result.output.strip())
    assert claims.workspace == "ws"
    assert claims.expires_at - time.time() <= 120
    missing = CliRunner().invoke(app, ["token", "--workspace", "ws"])
    assert missing.exit_code == 2


def test_cli_lists_both_commands() -> None:
    result = CliRunner().invoke(app, ["--help"])
    assert result.exit_code == 0
    assert "sandbox" in result.output
    assert "token" in result.output


def test_module_entry_point_serves_and_rejects_bad_listen(tmp_path: Path) -> None:
    with server_process(tmp_path) as server:
        info = httpx.get(f"{server.url}/v1/info", headers=auth("ws")).json()
        assert info["workspace"] == "ws"
        assert info["home"] == str((server.root / "ws").resolve())
        assert info["limits"]["default_timeout_ms"] == 120_000
        denied = httpx.get(f"{server.url}/v1/info")
        assert denied.status_code == 401
        assert denied.json() == {
            "error": {"code": "unauthorized", "message": "missing bearer token"}
        }
    bad = subprocess.run(
        [sys.executable, "-m", "remote_env.server", "--root", str(tmp_path), "--listen", "nope"],
        cwd=REPO,
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert bad.returncode == 2
    assert b"HOST:PORT" in bad.stderr
