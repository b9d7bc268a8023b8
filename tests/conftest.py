"""Test-suite plumbing shared by every test package.

Async tests are plain ``async def`` functions: the hook below runs each one in a fresh
event loop with ``asyncio.run``, so no plugin is needed and no loop leaks between tests.
"""

from __future__ import annotations

import asyncio
import inspect

import pytest

pytest.register_assert_rewrite("core.testing")


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    names = pyfuncitem._fixtureinfo.argnames
    kwargs = {name: pyfuncitem.funcargs[name] for name in names}
    asyncio.run(pyfuncitem.obj(**kwargs))
    return True
