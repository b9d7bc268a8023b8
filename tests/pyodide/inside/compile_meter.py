"""Time spent compiling Python source to bytecode during imports (CPython or Pyodide).

Neither the repository (``sys.dont_write_bytecode`` in the runner) nor the wheels
Pyodide installs carry ``.pyc`` files, and Pyodide's standard library zip holds
sources, so every module a fresh Pyodide process imports is compiled first. The meter
wraps the two compile steps of the import system — the path finder's
``SourceLoader.source_to_code`` and ``zipimport``'s ``_compile_source`` — so a
benchmark can say how much of an import is compiling, and which files it compiled
(a module loaded from a ``.pyc`` never reaches either step: that is how the cached
cold start proves its cache was read). Install it before the imports.
"""

from __future__ import annotations

import importlib._bootstrap_external as _external
import time
import zipimport
from typing import Any

__all__ = ["compiled", "install", "seconds"]

_total = [0.0]
_compiled: list[str] = []


def _timed(compile_step: Any, path_at: int) -> Any:
    """``compile_step`` timed; its argument ``path_at`` (positional) is the file's path."""

    def timed(*args: Any, **kwargs: Any) -> Any:
        if len(args) > path_at:
            _compiled.append(str(args[path_at]))
        start = time.perf_counter()
        try:
            return compile_step(*args, **kwargs)
        finally:
            _total[0] += time.perf_counter() - start

    timed.__wrapped__ = compile_step  # type: ignore[attr-defined]
    return timed


def install() -> None:
    """Start metering (idempotent)."""
    loader: Any = _external.SourceLoader
    if not hasattr(loader.source_to_code, "__wrapped__"):
        loader.source_to_code = _timed(loader.source_to_code, 2)  # (self, data, path)
    zip_module: Any = zipimport
    compile_source = getattr(zip_module, "_compile_source", None)
    if compile_source is not None and not hasattr(compile_source, "__wrapped__"):
        zip_module._compile_source = _timed(compile_source, 0)  # (pathname, source)


def seconds() -> float:
    """Seconds spent compiling since :func:`install`."""
    return _total[0]


def compiled() -> list[str]:
    """The paths compiled since :func:`install`, in order (a copy)."""
    return list(_compiled)
