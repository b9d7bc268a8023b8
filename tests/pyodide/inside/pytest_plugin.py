"""pytest inside Pyodide: async tests on a private event loop.

Pyodide's own loop (WebLoop) cannot block, and pytest calls tests synchronously, so
``async def`` tests run on :class:`InlineLoop`: the standard asyncio loop with no
selector (there are no file descriptors to wait on; a timer due later is waited for by
sleeping). Loaded with ``-p tests.pyodide.inside.pytest_plugin`` and ``--noconftest``
(the repository's conftest runs tests with ``asyncio.run``, which needs a selector).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from typing import Any

import pytest

__all__ = ["InlineLoop"]


class _NoSelector:
    def select(self, timeout: float | None) -> list[Any]:
        if timeout:
            time.sleep(min(timeout, 0.05))
        return []

    def close(self) -> None:
        pass


class InlineLoop(asyncio.BaseEventLoop):
    def __init__(self) -> None:
        super().__init__()
        self._selector = _NoSelector()

    def _process_events(self, event_list: list[Any]) -> None:
        pass

    def _write_to_self(self) -> None:
        pass


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    kwargs = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    # Pyodide marks its WebLoop as always running; step aside for the test's own loop.
    outer = asyncio.events._get_running_loop()
    asyncio.events._set_running_loop(None)
    loop = InlineLoop()
    try:
        loop.run_until_complete(pyfuncitem.obj(**kwargs))
    finally:
        loop.close()
        asyncio.events._set_running_loop(outer)
    return True
