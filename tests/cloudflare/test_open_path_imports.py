"""What an isolate imports before it opens its actor stays small: core and the runtime,
not the HTTP app (FastAPI, the actor API) or the adapters' httpx, which the runtime
imports on its first HTTP request or first model call. Pyodide compiles every module it
imports from source on a cold start, so each one on this path costs start-up time
(``tests/pyodide/run.py`` measures it; its cold start asserts the same there, with the
Workers SDK and ``runtimes.cloudflare.worker`` itself)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.pyodide.inside.workload import NOT_ON_THE_OPEN_PATH, RUNTIME_MODULES

ROOT = Path(__file__).resolve().parents[2]

_PROBE = """
import importlib, json, sys
import core.harness
for module in sys.argv[1:]:
    importlib.import_module(module)
print(json.dumps(sorted(sys.modules)))
"""


def _imported(*modules: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, *modules],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return set(json.loads(out))


def test_core_and_the_runtime_leave_the_http_app_and_httpx_unimported() -> None:
    loaded = _imported(*RUNTIME_MODULES)
    assert set(RUNTIME_MODULES) <= loaded
    assert not loaded & set(NOT_ON_THE_OPEN_PATH), sorted(loaded & set(NOT_ON_THE_OPEN_PATH))


def test_the_probe_sees_an_eager_import() -> None:
    """The check can fail: the deployed entry's eager set does import them."""
    loaded = _imported(*RUNTIME_MODULES, "runtimes.actor.api", "runtimes.models.openai_http")
    assert {"fastapi", "httpx", "runtimes.actor.api"} <= loaded
