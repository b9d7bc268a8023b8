"""Credentials are compared in constant time, everywhere.

An audit by syntax tree: in every module of ``remote_env`` and ``runtimes``, no ``==``,
``!=``, ``in`` or ``startswith`` touches a value whose name says it is a credential (a
token, secret, signature, MAC, key or password), and every module that checks a credential calls
``hmac.compare_digest``. A plain comparison returns as soon as a byte differs, so its
timing tells an attacker how much of a guess was right.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("remote_env", "runtimes")
# Names of credentials (not token *counts*: max_tokens, total_tokens, token limits...).
# (Not ``digest``: the op log compares request fingerprints, which are no secret.)
SECRET = re.compile(r"(^|_)(token|secret|signature|mac|api_key|password)$", re.I)
NOT_SECRET = re.compile(r"tokens|count|limit|prefix|secret_file|_id$|^token_id", re.I)
# The modules that decide whether a request's credential is right.
CHECKERS = {
    "remote_env/auth.py",  # workspace tokens (HMAC signature)
    "runtimes/actor/api/middleware.py",  # the actor API's bearer token (every host)
    "runtimes/actor/tokens.py",  # scoped API tokens (HMAC signature)
    "runtimes/cloudflare/front_door.py",  # the Worker's bearer token
    "runtimes/cloudflare/minting.py",  # the Worker's bearer token on POST /v1/tokens
}


def _name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Call):
        return _name(node.func)
    return None


def _is_secret(node: ast.AST) -> bool:
    name = _name(node)
    return name is not None and bool(SECRET.search(name)) and not NOT_SECRET.search(name)


def _plain_comparisons(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            risky = any(isinstance(op, ast.Eq | ast.NotEq | ast.In | ast.NotIn) for op in node.ops)
            # ``x is None`` and comparisons with literals (a prefix, a length) are fine.
            if (
                risky
                and any(_is_secret(s) for s in sides)
                and not any(isinstance(s, ast.Constant) for s in sides)
            ):
                found.append((node.lineno, ast.unparse(node)))
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("startswith", "endswith")
            and any(_is_secret(n) for n in (node.func.value, *node.args))
            and not all(isinstance(a, ast.Constant) for a in node.args)
        ):
            found.append((node.lineno, ast.unparse(node)))
    return found


def _modules() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def test_no_credential_is_compared_with_a_plain_operator() -> None:
    offenders = []
    for path in _modules():
        tree = ast.parse(path.read_text(), filename=str(path))
        for line, text in _plain_comparisons(tree):
            offenders.append(f"{path.relative_to(ROOT)}:{line}: {text}")
    assert offenders == []


def test_every_credential_check_uses_compare_digest() -> None:
    for relative in sorted(CHECKERS):
        source = (ROOT / relative).read_text()
        assert "hmac.compare_digest(" in source, relative


def test_the_audit_catches_a_plain_comparison() -> None:
    # The detector itself: each of these would be flagged.
    for code in (
        "ok = token == expected",
        "ok = self._token != header",
        "ok = signature == sign(secret, body)",
        "ok = api_key in keys",
        "ok = header.startswith(self.token)",
    ):
        assert _plain_comparisons(ast.parse(code)), code
    for code in ("ok = token is None", "ok = token == ''", "n = max_tokens == 3"):
        assert not _plain_comparisons(ast.parse(code)), code
