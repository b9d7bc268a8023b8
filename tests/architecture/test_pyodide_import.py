"""Item 2 of the seam: core and the host-neutral actor layer run where a Durable Object
runs (Pyodide): without fcntl, aiosqlite, uvicorn, litellm or boto3, and without threads.

A fresh interpreter imports asyncio first (on CPython it pulls in fcntl itself), then
forgets fcntl and refuses the five modules with an import hook, imports ``core`` and
``runtimes.actor`` (the API app and the kit included) and runs every host scenario on an
in-memory host. The AST check beside it proves no module of either imports a thread,
process or socket module directly.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from runtimes.actor.testing import HOST_CHECKS

ROOT = Path(__file__).resolve().parents[2]
ACTOR_FILES = sorted((ROOT / "runtimes" / "actor").rglob("*.py"))
BLOCKED = ("fcntl", "aiosqlite", "uvicorn", "litellm", "boto3")

_SCRIPT = """
import asyncio, sys, threading

BLOCKED = {blocked!r}
sys.modules.pop("fcntl", None)


class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{{name}} does not exist under Pyodide")
        return None


sys.meta_path.insert(0, Refuse())

import core
import runtimes.actor
import runtimes.actor.api
import runtimes.actor.memory
from runtimes.actor.testing import HOST_CHECKS, MemoryTarget


async def main():
    for check in HOST_CHECKS:
        await check(MemoryTarget())
        print("passed", check.__name__, flush=True)


asyncio.run(main())
loaded = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
assert not loaded, loaded
assert threading.active_count() == 1, threading.enumerate()
print("ok", len(HOST_CHECKS))
"""


def test_core_and_the_actor_layer_run_without_the_modules_pyodide_lacks() -> None:
    result = subprocess.run(
        [sys.executable, "-c", _SCRIPT.format(blocked=BLOCKED)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().endswith(f"ok {len(HOST_CHECKS)}"), result.stdout


def test_the_hook_does_refuse_what_it_names() -> None:
    script = _SCRIPT.format(blocked=BLOCKED).replace("import core\n", "import aiosqlite\n", 1)
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode != 0 and "does not exist under Pyodide" in result.stderr


NO_THREADS = {
    "subprocess",
    "socket",
    "threading",
    "fcntl",
    "multiprocessing",
    "concurrent",
    *BLOCKED,
}
NO_THREAD_CALLS = {"to_thread", "run_in_executor", "create_subprocess_exec", "Thread"}


@pytest.mark.parametrize("path", ACTOR_FILES, ids=[str(p.relative_to(ROOT)) for p in ACTOR_FILES])
def test_the_actor_layer_imports_no_thread_process_or_socket_module(path: Path) -> None:
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] in NO_THREADS]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] in NO_THREADS:
                found.append(node.module)
        elif isinstance(node, ast.Attribute) and node.attr in NO_THREAD_CALLS:
            found.append(node.attr)
    assert found == []
