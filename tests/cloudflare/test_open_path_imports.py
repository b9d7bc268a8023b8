"""What an isolate imports before it opens its actor stays small: core and the runtime,
not the HTTP app (FastAPI, the actor API), the front door's modules, the adapters' httpx
or the harness's features an open and a turn do not use (reminders, schedules, forks),
which are imported on the first HTTP request, the front door's first request, the first
model call or the feature's first use. Pyodide compiles every module it imports from source
on a cold start, so each one on this path costs start-up time (``tests/pyodide/run.py``
measures it; its cold start asserts the same there, with the Workers SDK and
``runtimes.cloudflare.worker`` itself)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

from tests.pyodide.inside.workload import FEATURE_MODULES, NOT_ON_THE_OPEN_PATH, RUNTIME_MODULES

ROOT = Path(__file__).resolve().parents[2]
WORKER = ROOT / "runtimes" / "cloudflare" / "worker.py"

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


_TURNS = """
import asyncio, json, sys
from core.storage import MemoryStorage
from tests.pyodide.inside import workload
asyncio.run(workload.tool_rounds(MemoryStorage(), 2))
print(json.dumps(sorted(sys.modules)))
"""


def test_an_open_and_a_turn_with_tool_calls_leave_the_features_unimported() -> None:
    """Opening a harness and running a submission through two tool rounds imports none
    of the harness's features it did not use (the compaction task, reminders, schedules,
    forks, sub-agents)."""
    out = subprocess.run(
        [sys.executable, "-c", _TURNS], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout
    loaded = set(json.loads(out))
    assert "core.harness.tool_task" in loaded  # the turn ran its tools
    assert not loaded & set(FEATURE_MODULES), sorted(loaded & set(FEATURE_MODULES))


def test_the_probe_sees_an_eager_import() -> None:
    """The check can fail: the deployed entry's eager set does import them."""
    loaded = _imported(*RUNTIME_MODULES, "runtimes.actor.api", "runtimes.models.openai_http")
    assert {"fastapi", "httpx", "runtimes.actor.api"} <= loaded
    assert {"core.harness.schedules", "core.harness.reminders"} <= loaded  # the app's routes


def _module_level_imports(source: str) -> list[str]:
    """The modules ``source`` imports when it is imported: its top-level ``import`` and
    ``from`` statements, not those in functions or under ``if TYPE_CHECKING:``."""
    found: list[str] = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
    return found


def test_the_worker_module_leaves_the_front_door_to_the_front_door() -> None:
    """``runtimes.cloudflare.worker`` (which CPython cannot import: it subclasses the
    Workers SDK's types) imports at module level nothing that pulls the front door, the
    HTTP app or httpx onto a Durable Object's open path: every module it imports there,
    but the SDK, imported together leaves them all unimported."""
    imports = [m for m in _module_level_imports(WORKER.read_text()) if m != "workers"]
    assert "runtimes.cloudflare.actor" in imports  # the parse found the real imports
    loaded = _imported(*imports)
    assert not loaded & set(NOT_ON_THE_OPEN_PATH), sorted(loaded & set(NOT_ON_THE_OPEN_PATH))


def test_the_module_level_import_check_sees_an_eager_front_door_import() -> None:
    """The check can fail: a worker module importing the listing at the top, as it did
    before issue 36, pulls the front door in."""
    source = WORKER.read_text() + "\nfrom runtimes.cloudflare.listing import LISTING_PATH\n"
    imports = [m for m in _module_level_imports(source) if m != "workers"]
    leaked = _imported(*imports) & set(NOT_ON_THE_OPEN_PATH)
    assert {"runtimes.cloudflare.listing", "runtimes.cloudflare.front_door"} <= leaked
