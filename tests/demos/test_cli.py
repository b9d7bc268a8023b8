"""The perdure command line: commands are mounted and work end to end."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from remote_env.auth import verify_token
from runtimes.cli.main import app


def test_the_cli_lists_its_commands() -> None:
    result = CliRunner().invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in ("demo", "sandbox", "token"):
        assert command in result.output


def test_perdure_token_mints_a_token_the_sandbox_accepts(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(b"s" * 32)
    result = CliRunner().invoke(
        app, ["token", "--workspace", "actor-7", "--secret-file", str(secret), "--ttl", "60"]
    )
    assert result.exit_code == 0, result.output
    claims = verify_token(b"s" * 32, result.output.strip())
    assert claims.workspace == "actor-7"
