"""``infra/cloudflare/README.md`` is a guide a user can follow: its offline commands are
the ones ``.ci/run`` runs, every command block says whether it needs an account, every
shell variable it uses is defined earlier in the guide, the secrets are set from such
variables, and it points at nothing outside the repository."""

from __future__ import annotations

import re
from pathlib import Path

from runtimes.cloudflare import names

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "infra/cloudflare/README.md"
CI = (ROOT / ".ci/run").read_text()
_FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```", re.M | re.S)
KINDS = ("sh offline", "sh account", "sh sandbox")


def _blocks(text: str) -> list[tuple[str, list[str]]]:
    return [(info.strip(), body.splitlines()) for info, body in _FENCE.findall(text)]


def _commands(lines: list[str]) -> list[str]:
    """The block's commands: comments and blank lines dropped, continuations joined."""
    out: list[str] = []
    pending = ""
    for line in lines:
        code = line.split(" #", 1)[0].rstrip() if not line.lstrip().startswith("#") else ""
        if not code.strip():
            continue
        pending += code.rstrip("\\").strip() + " " if code.endswith("\\") else code.strip()
        if not code.endswith("\\"):
            out.append(pending)
            pending = ""
    return out


def test_every_command_block_says_whether_it_needs_an_account() -> None:
    blocks = _blocks(GUIDE.read_text())
    assert blocks
    assert {info for info, _ in blocks} <= set(KINDS), [info for info, _ in blocks]
    assert {"sh offline", "sh account"} <= {info for info, _ in blocks}


def test_the_offline_commands_are_what_ci_runs_in_that_order() -> None:
    ci = _commands(CI.splitlines())
    for info, lines in _blocks(GUIDE.read_text()):
        if info != "sh offline":
            continue
        commands = _commands(lines)
        assert commands
        start = ci.index(commands[0])  # .ci/run has the block's first command...
        assert ci[start : start + len(commands)] == commands  # ...and the rest, in order


def test_ci_boots_the_directory_it_built_and_dry_ran() -> None:
    after = CI[CI.index("python dry_run.py") :]
    assert "python tests/pyodide/run.py --worker infra/cloudflare/dist" in after


def test_every_variable_is_defined_before_it_is_used() -> None:
    defined = {"HOME", "PATH", "PWD"}
    for _, lines in _blocks(GUIDE.read_text()):
        for command in _commands(lines):
            # ${NAME:-} tests whether a variable is set: a use that needs no definition.
            plain = re.sub(r"\$\{[A-Za-z_][A-Za-z0-9_]*:-[^}]*\}", "", command)
            used = set(re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", plain))
            missing = used - defined
            assert not missing, f"{command!r} uses {missing} before the guide defines it"
            defined |= set(re.findall(r"(?:^|export |\s)([A-Za-z_][A-Za-z0-9_]*)=", command))


def test_the_secrets_come_from_variables_the_guide_exports() -> None:
    text = GUIDE.read_text()
    commands = [c for _, lines in _blocks(text) for c in _commands(lines)]
    deploy = next(i for i, c in enumerate(commands) if "wrangler deploy --secrets-file" in c)
    for secret in names.SECRETS:
        exported = [i for i, c in enumerate(commands) if c.startswith(f"export {secret}=")]
        assert exported and exported[0] < deploy, secret
        assert f"{secret}=%s" in text  # written into the secrets file from the variable
    assert "wrangler secret put PERDURE_SANDBOX_SECRET\n" not in text  # no bare prompt


def test_the_guide_points_only_inside_the_repository() -> None:
    text = GUIDE.read_text()
    assert "shared/" not in text
    for target in re.findall(r"\]\(([^)#]+)\)", text):
        if "://" not in target:
            assert (GUIDE.parent / target).resolve().is_relative_to(ROOT), target
    for path in re.findall(r"`((?:infra|runtimes|core|remote_env|tests)/[^`\s]*)`", text):
        assert (ROOT / path.split("::")[0]).exists() or "<" in path, path
