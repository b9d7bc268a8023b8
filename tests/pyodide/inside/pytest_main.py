"""Runs pytest inside Pyodide on the Cloudflare runtime's CPython test files.

``tests/cloudflare`` (the storage facade over the ``sqlite3`` stand-in, the alarm logic)
runs unchanged here: Pyodide ships ``sqlite3``. pytest prints its normal summary line.
"""

from __future__ import annotations

from typing import Any

import pytest

__all__ = ["main_sync"]


def main_sync(options: Any) -> dict[str, Any]:
    code = pytest.main(
        [
            "-c",
            "/perdure/tests/pyodide/inside/pytest.ini",
            "--rootdir",
            "/perdure",
            "--noconftest",
            "-p",
            "no:cacheprovider",
            "-p",
            "tests.pyodide.inside.pytest_plugin",
            "-q",
            "-m",
            "not slow",  # as the repository's default run
            # Its local-host comparison needs runtimes.local (aiosqlite: CPython only).
            "--ignore=/perdure/tests/cloudflare/test_front_door.py",
            # Real servers on 127.0.0.1 (a uvicorn thread, a subprocess); the suite runs
            # the same over fetch (durable_object_configured_from_env).
            "--ignore=/perdure/tests/cloudflare/test_settings_servers.py",
            # Probes fresh CPython processes; inside Pyodide the cold start
            # (tests/pyodide/inside/cold_start.py) checks the same, with the SDK.
            "--ignore=/perdure/tests/cloudflare/test_open_path_imports.py",
            # The Worker's build script: a CPython tool (modulefinder, pip).
            "--ignore=/perdure/tests/cloudflare/test_build.py",
            "/perdure/tests/cloudflare",
        ]
    )
    return {"ok": int(code) == 0, "pytest_exit_code": int(code)}
