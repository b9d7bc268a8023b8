"""The wrangler configuration names what the code defines and reads."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

from runtimes.cloudflare import names

ROOT = Path(__file__).resolve().parents[2]
CONFIG = tomllib.loads((ROOT / "infra/cloudflare/wrangler.toml").read_text())
WORKER = ast.parse((ROOT / "runtimes/cloudflare/worker.py").read_text())


def _classes() -> dict[str, list[str]]:
    """Classes defined at the worker module's top level, with their base names."""
    return {
        node.name: [b.id for b in node.bases if isinstance(b, ast.Name)]
        for node in WORKER.body
        if isinstance(node, ast.ClassDef)
    }


def test_the_durable_object_binding_and_migration_name_the_class_the_code_defines() -> None:
    classes = _classes()
    assert classes[names.DURABLE_OBJECT_CLASS] == ["DurableObject"]
    assert classes[names.ENTRY_CLASS] == ["WorkerEntrypoint"]
    (binding,) = CONFIG["durable_objects"]["bindings"]
    assert binding == {
        "name": names.DURABLE_OBJECT_BINDING,
        "class_name": names.DURABLE_OBJECT_CLASS,
    }
    (migration,) = CONFIG["migrations"]
    assert migration["new_sqlite_classes"] == [names.DURABLE_OBJECT_CLASS]  # SQLite-backed


def test_python_3_14_workers_and_the_documented_vars_and_secrets() -> None:
    assert "python_workers" in CONFIG["compatibility_flags"]
    assert CONFIG["compatibility_date"] >= "2026-09-08"  # selects Python 3.14 (Pyodide 314)
    assert set(CONFIG["vars"]) == {names.MAX_BODY_BYTES_VAR}
    assert names.API_TOKEN_SECRET not in CONFIG["vars"]  # a secret, never in the file
    readme = (ROOT / "infra/cloudflare/README.md").read_text()
    for name in (names.API_TOKEN_SECRET, names.MAX_BODY_BYTES_VAR, names.DURABLE_OBJECT_BINDING):
        assert f"`{name}`" in readme
    # The code reads the same names it is configured with.
    source = (ROOT / "runtimes/cloudflare/worker.py").read_text()
    for name in ("API_TOKEN_SECRET", "DURABLE_OBJECT_BINDING", "MAX_BODY_BYTES_VAR"):
        assert name in source
