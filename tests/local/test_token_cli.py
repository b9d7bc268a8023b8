"""``perdure token`` (scoped API tokens, offline) against ``perdure dev`` with signing
keys and a CORS allow-list from its settings."""

from __future__ import annotations

import signal
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from runtimes.actor.tokens import SigningKeys
from runtimes.cli.main import app
from tests.local.test_cli import start_dev

KEYS = "newest-key-0123456789abcdef,older-key-0123456789abcdef"
APP = "http://localhost:5173"


def _mint(*args: str, env: dict[str, str] | None = None) -> str:
    result = CliRunner().invoke(app, ["token", *args], env=env)
    assert result.exit_code == 0, result.output
    return result.stdout.strip()


def test_tokens_minted_offline_work_against_perdure_dev(tmp_path: Path) -> None:
    env = {"PERDURE_MODEL": "", "PERDURE_TOKEN": "", "PERDURE_TOKEN_KEYS": KEYS}
    proc, url, _token, _lines = start_dev(tmp_path / "data", "--cors-origin", APP, env=env)
    try:
        keys = {"PERDURE_TOKEN_KEYS": KEYS}
        submit = _mint("--actor", "demo", "--rights", "submit", "--ttl", "10m", env=keys)
        read = _mint("--actor", "demo", "--rights", "read", "--ttl", "10m", env=keys)
        with httpx.Client(base_url=url, timeout=30) as c:
            body = {"type": "input", "content": "hello"}
            path = "/v1/actors/demo/submissions"
            sent = c.post(path, json=body, headers={"authorization": f"Bearer {submit}"})
            assert sent.status_code == 202, sent.text
            refused = c.post(path, json=body, headers={"authorization": f"Bearer {read}"})
            assert refused.status_code == 403, refused.text
            preflight = c.options(
                path, headers={"origin": APP, "access-control-request-method": "POST"}
            )
            assert preflight.headers.get("access-control-allow-origin") == APP
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=20)


def test_the_token_is_signed_with_the_newest_key_or_derived_from_the_host_token(
    tmp_path: Path,
) -> None:
    minted = _mint("--actor", "a1", "--rights", "admin", env={"PERDURE_TOKEN_KEYS": KEYS})
    newest = SigningKeys([KEYS.split(",")[0]])
    assert newest.verify(minted).rights == "admin"
    host = "host-token-0123456789abcdef"
    token_file = tmp_path / "token"
    token_file.write_text(host + "\n")
    plain = {"PERDURE_TOKEN_KEYS": "", "PERDURE_TOKEN": ""}
    derived = _mint(
        "--actor", "a1", "--rights", "read", "--conversation", "3", "--ttl", "2h",
        "--token-file", str(token_file), env=plain,
    )  # fmt: skip
    scope = SigningKeys.for_host(host).verify(derived)
    assert (scope.actor, scope.rights, scope.conversation) == ("a1", "read", 3)
    assert scope.expires_at - scope.issued_at == 7200


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--actor", "a1"], "--actor needs --rights"),
        (["--actor", "a1", "--rights", "owner"], "rights must be one of read, submit, admin"),
        (["--actor", "a.1", "--rights", "read"], "actor ids match"),
        (["--actor", "a1", "--rights", "read", "--ttl", "soon"], "is not a duration"),
        (["--actor", "a1", "--rights", "read", "--ttl", "400d"], "at most"),
        (["--actor", "a1", "--workspace", "w"], "one of them"),
        ([], "one of them"),
        (["--actor", "a1", "--rights", "read", "--token", ""], "the host's key is needed"),
    ],
)
def test_bad_arguments_get_one_line_saying_what_to_fix(args: list[str], says: str) -> None:
    plain = {"PERDURE_TOKEN_KEYS": "", "PERDURE_TOKEN": "host-token-0123456789abcdef"}
    result = CliRunner().invoke(app, ["token", *args], env=plain)
    assert result.exit_code == 2, result.output
    assert says in result.output
