"""Invariant 16 and the layering rules, checked by reading the source.

``core`` performs no OS calls: no files, sockets, subprocesses, threads, environment,
wall clock or real sleeping except through its ports. It imports nothing from
``runtimes`` or ``remote_env``. The check parses every module of ``core`` (the shipped
test kits included) and fails on a forbidden import or call.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CORE_FILES = sorted((ROOT / "core").rglob("*.py"))

FORBIDDEN_MODULES = {
    # the OS, processes, threads
    "os",
    "sys",
    "subprocess",
    "socket",
    "threading",
    "multiprocessing",
    "signal",
    "select",
    "selectors",
    "ssl",
    "io",
    "pathlib",
    "shutil",
    "tempfile",
    "glob",
    "fcntl",
    "resource",
    "mmap",
    "ctypes",
    "concurrent",
    # clocks, entropy and logging (which writes to streams)
    "time",
    "random",
    "secrets",
    "uuid",
    "logging",
    # drivers and network clients: adapters live in runtimes/ and remote_env/
    "sqlite3",
    "aiosqlite",
    "httpx",
    "httpcore",
    "urllib",
    "http",
    "requests",
    "boto3",
    "botocore",
    "litellm",
    "openai",
    "fastapi",
    "starlette",
    "uvicorn",
    "js",
    "pyodide",
    "workers",
    # other layers
    "runtimes",
    "remote_env",
}
FORBIDDEN_CALLS = {"open", "print", "input", "breakpoint"}
FORBIDDEN_ATTRIBUTES = {
    # real time and real sleeping
    "sleep",
    "call_later",
    "time_ns",
    "monotonic",
    "perf_counter",
    "wait_for",
    "timeout",
    "timeout_at",
    "run_in_executor",
    "to_thread",
    # processes and sockets through asyncio
    "create_subprocess_exec",
    "create_subprocess_shell",
    "open_connection",
    "start_server",
    "open_unix_connection",
    "start_unix_server",
    "getaddrinfo",
    "create_connection",
    "create_datagram_endpoint",
    # environment
    "environ",
    "getenv",
}
# Wall-clock reads through datetime (Clock.now() on the injected port is fine).
WALL_CLOCK = {"now", "today", "utcnow"}


def _yields_to_the_loop(call: ast.Call) -> bool:
    """``asyncio.sleep(0)``: gives the event loop a turn and starts no timer, so it
    neither reads time nor waits for it."""
    return (
        isinstance(call.func, ast.Attribute)
        and call.func.attr == "sleep"
        and len(call.args) == 1
        and not call.keywords
        and isinstance(call.args[0], ast.Constant)
        and call.args[0].value == 0
    )


def _violations(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[str] = []
    rel = path.relative_to(ROOT)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in FORBIDDEN_MODULES:
                    found.append(f"{rel}:{node.lineno} imports {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] in FORBIDDEN_MODULES:
                found.append(f"{rel}:{node.lineno} imports from {node.module}")
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in FORBIDDEN_CALLS:
                found.append(f"{rel}:{node.lineno} calls {func.id}()")
            if (
                isinstance(func, ast.Attribute)
                and func.attr in FORBIDDEN_ATTRIBUTES
                and not _yields_to_the_loop(node)
            ):
                found.append(f"{rel}:{node.lineno} calls {_owner_name(func.value)}.{func.attr}()")
            if (
                isinstance(func, ast.Attribute)
                and func.attr in WALL_CLOCK
                and _owner_name(func.value) in ("datetime", "date")
            ):
                found.append(f"{rel}:{node.lineno} reads the wall clock")
            if (
                isinstance(func, ast.Attribute)
                and func.attr == "wait"
                and any(k.arg == "timeout" for k in node.keywords)
            ):
                found.append(f"{rel}:{node.lineno} waits with a real-time timeout")
    return found


def _owner_name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Call):
        return _owner_name(node.func) + "()"
    return type(node).__name__


def test_core_has_modules_to_check() -> None:
    assert len(CORE_FILES) > 20


@pytest.mark.parametrize("path", CORE_FILES, ids=[str(p.relative_to(ROOT)) for p in CORE_FILES])
def test_core_module_makes_no_os_calls(path: Path) -> None:
    assert _violations(path) == []


def test_the_checker_catches_what_it_claims_to(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import os\nfrom subprocess import run\nimport asyncio\nimport time\n"
        "async def f(loop):\n"
        "    await asyncio.sleep(1)\n    open('x')\n    time.time()\n    datetime.now()\n"
        "    loop.call_later(1, print)\n    await asyncio.wait([], timeout=1)\n"
        "    from runtimes.local import cli\n"
    )
    found = _violations_at(bad)
    assert len(found) == 9, found


def _violations_at(path: Path) -> list[str]:
    global ROOT
    saved = ROOT
    ROOT = path.parent
    try:
        return _violations(path)
    finally:
        ROOT = saved


def test_runtimes_do_not_import_remote_env_server_code() -> None:
    for path in sorted((ROOT / "runtimes").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert not node.module.startswith("remote_env.server"), path


# --------------------------------------------------------------------------- the seam

PRODUCTION = sorted([*(ROOT / "runtimes").rglob("*.py"), *(ROOT / "remote_env").rglob("*.py")])
# What code outside core may import from it: the package, its public subpackages, its
# port modules (what adapters implement: the model port and its messages, the SQL facade)
# and its record and wire-format modules. Anything else is core's own business.
PUBLIC_CORE = {
    "core",
    "core.clock",
    "core.docops",
    "core.env",
    "core.errors",
    "core.faux",
    "core.harness",
    "core.harness.events",  # the harness events' format (what hosts log and show)
    "core.harness.messages",
    "core.harness.models",
    "core.harness.tool_sources",  # a port: tool sources (MCP servers) implement it
    "core.jsonvalue",
    "core.records",
    "core.session",
    "core.storage",
    "core.storage.sqlite",
    "core.tasks",
    "core.telemetry",  # a port: hosts implement it
    "core.times",  # how times are written for people (ISO-8601 with the zone)
    "core.tools",
}


def _seam_violations(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    rel = path.relative_to(ROOT)
    found: list[str] = []
    for node in ast.walk(tree):
        modules: list[str] = []
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules = [node.module]
        for module in modules:
            if module == "core.testing" and path.name == "testing.py":
                continue  # a shipped test kit may build on core's (not production code)
            if module.split(".")[0] == "core" and module not in PUBLIC_CORE:
                found.append(f"{rel}:{node.lineno} imports core internals ({module})")
        if (
            isinstance(node, ast.Attribute)
            and node.attr == "storage"
            and isinstance(node.value, ast.Attribute)
            and node.value.attr == "session"
        ):
            found.append(f"{rel}:{node.lineno} reaches into .session.storage")
    return found


@pytest.mark.parametrize("path", PRODUCTION, ids=[str(p.relative_to(ROOT)) for p in PRODUCTION])
def test_hosts_use_only_cores_public_api(path: Path) -> None:
    """Runtimes are thin (docs/design.md § Layers): they call core's public API, never its
    storage behind the session or its internal modules; and no production code imports
    ``core.testing``."""
    assert _seam_violations(path) == []


def test_the_seam_checker_catches_what_it_claims_to(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from core.harness.reminders import x\nimport core.testing\nfrom core import y\n"
        "async def f(h):\n    return await h.session.storage.task(1)\n"
    )
    global ROOT
    saved = ROOT
    ROOT = tmp_path
    try:
        assert len(_seam_violations(bad)) == 3
    finally:
        ROOT = saved


def test_the_aws_host_imports_nothing_from_the_local_host() -> None:
    """Hosts share what they share through ``runtimes/actor`` (the clock, the SQLite
    file facade), not through each other: the Lambda package needs none of the local
    host's server, locks or CLI."""
    found = []
    for path in sorted((ROOT / "runtimes" / "aws").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            modules: list[str] = []
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                modules = [node.module]
            found += [
                f"{path.relative_to(ROOT)}:{node.lineno} imports {m}"
                for m in modules
                if m == "runtimes.local" or m.startswith("runtimes.local.")
            ]
    assert found == []


def _private_internals(path: Path) -> list[str]:
    """Private modules (``_json``), private names of an imported module
    (``dataclasses._FIELD``) and code generation (``exec``, ``eval``, ``compile``)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    modules = set()  # names bound to a module by ``import x`` / ``import x as y``
    found = []

    def private(dotted: str) -> bool:  # ``_json``, ``json._x``; not ``__future__``
        return any(p.startswith("_") and not p.startswith("__") for p in dotted.split("."))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                modules.add(alias.asname or alias.name.split(".")[0])
                if private(alias.name):
                    found.append(f"{node.lineno}: imports {alias.name}")
        elif (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.level == 0
            and node.module.split(".")[0] != "core"  # core's own modules are its business
        ):
            if private(node.module):
                found.append(f"{node.lineno}: imports from {node.module}")
            found += [
                f"{node.lineno}: imports {node.module}.{a.name}"
                for a in node.names
                if private(a.name)
            ]
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in modules
            and private(node.attr)
        ):
            found.append(f"{node.lineno}: uses {node.value.id}.{node.attr}")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("exec", "eval", "compile")
        ):
            found.append(f"{node.lineno}: calls {node.func.id}()")
    return found


@pytest.mark.parametrize("path", CORE_FILES, ids=[str(p.relative_to(ROOT)) for p in CORE_FILES])
def test_core_uses_no_private_internals_or_code_generation(path: Path) -> None:
    """Core runs on CPython 3.11+ and Pyodide's 3.14 on the standard library's public API:
    no private module or name of another package, and no code built from strings."""
    assert _private_internals(path) == []


def test_the_private_internals_checker_catches_what_it_claims_to(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import dataclasses\nfrom _json import make_encoder\nfrom json import _x\n"
        "import json.decoder as d\nf = dataclasses._FIELD\nexec('x = 1')\nd._y\n"
        "from core.harness import _private  # core's own: its business\n"
        "obj._private\n"  # not a module
    )
    assert len(_private_internals(bad)) == 5, _private_internals(bad)
