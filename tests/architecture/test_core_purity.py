"""Invariant 16 for this issue's core modules: no OS access, only pure stdlib and pydantic."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.remote_env.support import REPO

_MODULES = [
    *(f"core/env/{name}.py" for name in ("__init__", "errors", "port", "values")),
    "core/tools/coding.py",
    "core/testing/env_conformance.py",
]
_ALLOWED_ROOTS = {
    "__future__",
    "asyncio",
    "collections",
    "contextlib",
    "core",
    "dataclasses",
    "math",
    "pydantic",
    "re",
    "typing",
}
_FORBIDDEN_CALLS = {"open", "sleep", "time", "getenv", "system", "run"}


@pytest.mark.parametrize("module", _MODULES)
def test_core_env_modules_import_nothing_that_touches_the_os(module: str) -> None:
    tree = ast.parse((REPO / module).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots = {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            roots = {(node.module or "").split(".")[0]}
        else:
            continue
        assert roots <= _ALLOWED_ROOTS, f"{module} imports {roots - _ALLOWED_ROOTS}"


@pytest.mark.parametrize("module", _MODULES)
def test_core_env_modules_call_no_os_functions(module: str) -> None:
    tree = ast.parse((REPO / module).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = (
                node.func.attr
                if isinstance(node.func, ast.Attribute)
                else getattr(node.func, "id", "")
            )
            assert name not in _FORBIDDEN_CALLS, f"{module} calls {name}()"


def test_conformance_kit_does_not_import_pytest() -> None:
    source = Path(REPO / "core/testing/env_conformance.py").read_text()
    assert "pytest" not in source
