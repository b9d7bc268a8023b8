"""The wrangler configuration, the entry module and the Worker's pyproject name what the
code defines and reads."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

from runtimes.cloudflare import names
from tests.pyodide.run import WHEELS

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra/cloudflare"
CONFIG = tomllib.loads((INFRA / "wrangler.toml").read_text())
WRANGLER_TEXT = (INFRA / "wrangler.toml").read_text()
README = (INFRA / "README.md").read_text()
WORKER = ast.parse((ROOT / "runtimes/cloudflare/worker.py").read_text())


def _classes() -> dict[str, list[str]]:
    """Classes defined at the worker module's top level, with their base names."""
    return {
        node.name: [b.id for b in node.bases if isinstance(b, ast.Name)]
        for node in WORKER.body
        if isinstance(node, ast.ClassDef)
    }


def test_the_durable_object_bindings_and_migrations_name_the_classes_the_code_defines() -> None:
    classes = _classes()
    assert classes[names.DURABLE_OBJECT_CLASS] == ["DurableObject"]
    assert classes[names.INDEX_CLASS] == ["DurableObject"]
    assert classes[names.ENTRY_CLASS] == ["WorkerEntrypoint"]
    actors, index = CONFIG["durable_objects"]["bindings"]
    assert actors == {
        "name": names.DURABLE_OBJECT_BINDING,
        "class_name": names.DURABLE_OBJECT_CLASS,
    }
    assert index == {"name": names.INDEX_BINDING, "class_name": names.INDEX_CLASS}
    # Both SQLite-backed; the index's in a migration of its own, after the actors' (a
    # deployed migration is never edited: a new class gets a new tag).
    first, second = CONFIG["migrations"]
    assert first == {"tag": "v1", "new_sqlite_classes": [names.DURABLE_OBJECT_CLASS]}
    assert second == {"tag": "v2", "new_sqlite_classes": [names.INDEX_CLASS]}


def test_the_entry_module_exports_the_classes_wrangler_binds() -> None:
    main = INFRA / CONFIG["main"]
    tree = ast.parse(main.read_text())
    imported = {
        alias.name
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.module == "runtimes.cloudflare.worker"
        for alias in node.names
    }
    assert {names.ENTRY_CLASS, names.DURABLE_OBJECT_CLASS, names.INDEX_CLASS} <= imported


def test_python_3_14_workers_and_the_documented_vars_and_secrets() -> None:
    assert "python_workers" in CONFIG["compatibility_flags"]
    assert CONFIG["compatibility_date"] >= "2026-09-08"  # selects Python 3.14 (Pyodide 314)
    assert set(CONFIG["vars"]) <= set(names.VARS)  # nothing the code does not read
    for secret in names.SECRETS:
        assert secret not in CONFIG["vars"]  # a secret, never in the file
    for name in (*names.VARS, *names.SECRETS):
        assert name in WRANGLER_TEXT  # set or documented there
        assert f"`{name}`" in README  # in the README's table
    assert f"`{names.DURABLE_OBJECT_BINDING}`" in README
    assert f"`{names.INDEX_BINDING}`" in README
    # The code reads exactly these names.
    settings = (ROOT / "runtimes/cloudflare/settings.py").read_text()
    read = set(re.findall(r"names\.([A-Z_]+)", settings))
    constants = {n for n in dir(names) if n.endswith(("_VAR", "_SECRET")) and n != "SECRETS"}
    assert read == constants
    assert {getattr(names, n) for n in constants} == set(names.VARS) | set(names.SECRETS)


def test_the_worker_pins_the_wheels_the_pyodide_suite_runs_on() -> None:
    project = tomllib.loads((INFRA / "pyproject.toml").read_text())["project"]
    pins = dict(d.split("==") for d in project["dependencies"])
    for name, version in pins.items():
        assert WHEELS[name][0] == version, name
    assert {"workers-runtime-sdk", "pydantic-core", "fastapi", "httpx"} <= set(pins)
