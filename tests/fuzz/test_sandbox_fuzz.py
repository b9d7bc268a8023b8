"""Schemathesis against the real sandbox server: every check, every phase (stateful
included), a fixed seed and a bounded number of examples per operation.

Fails on any 5xx, any response that breaks its documented schema, status or content type,
any schema-valid request refused or schema-invalid request accepted, a missing ``Allow`` on
a 405, a route that ignores missing auth, and on any traceback in the server's log.
Run with ``pytest -m fuzz`` (``.ci/run`` does); the default run leaves it out.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.remote_env.support import server_process, token

pytestmark = pytest.mark.fuzz

SEED = 20261201
EXAMPLES = 300


def schemathesis() -> str:
    executable = Path(sys.executable).parent / "schemathesis"
    if not executable.exists():
        pytest.fail("schemathesis is not installed (it is in the test extra)")
    return str(executable)


@pytest.mark.timeout(300)
def test_the_sandbox_server_survives_schemathesis(tmp_path: Path) -> None:
    # Short command timeouts: fuzzed commands (``yes``, ``cat``) must not hold the run.
    with server_process(tmp_path, "--default-timeout", "2", "--max-timeout", "2") as server:
        command = [
            schemathesis(),
            "--config-file",
            str(Path(__file__).with_name("sandbox_schemathesis.toml")),
            "run",
            f"{server.url}/openapi.json",
            "--checks",
            "all",
            "--phases",
            "examples,coverage,fuzzing,stateful",
            "--max-examples",
            str(EXAMPLES),
            "--seed",
            str(SEED),
            "--workers",
            "1",
            "--generation-database",
            "none",
            "--request-timeout",
            "60",
            "--header",
            f"Authorization: Bearer {token('ws')}",
            "--report",
            "junit",
            "--report-dir",
            str(tmp_path / "report"),
            "--output-truncate",
            "true",
            "--no-color",
        ]
        run = subprocess.run(
            command, capture_output=True, text=True, timeout=280, check=False, cwd=tmp_path
        )
        log = server.log()
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert "No issues found" in run.stdout
    assert "Traceback" not in log, log
    # Only the token's workspace (and the server's own state) exist afterwards.
    assert {p.name for p in server.root.iterdir()} <= {"ws", ".perdure"}
