"""The CI dependency audit's verdicts (``.ci/audit_deps.py``): an audit that audited
nothing is "not audited", never "clean"; a vulnerability fails."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[2] / ".ci" / "audit_deps.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("audit_deps", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_verdicts() -> None:
    verdict = _script().verdict
    skipped = {"name": "httpx", "skip_reason": "Dependency not found on PyPI"}
    clean = {"name": "pydantic", "version": "2.0", "vulns": []}
    bad = {"name": "jinja2", "version": "2.0", "vulns": [{"id": "PYSEC-1"}]}
    assert verdict({"dependencies": [skipped, skipped]}, 0, "")[0] == 2  # said "no vulns"
    assert verdict(None, 1, "ConnectionError: cannot resolve api.osv.dev")[0] == 2
    assert verdict({"dependencies": [clean, skipped]}, 0, "")[0] == 0
    code, message = verdict({"dependencies": [clean, bad]}, 1, "")
    assert code == 1 and "jinja2 2.0: PYSEC-1" in message
