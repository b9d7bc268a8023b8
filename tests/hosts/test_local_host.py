"""The host scenario kit on the local host: in-process, and with a real SIGKILL."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from runtimes.actor.testing import HOST_CHECKS, KitTarget, resumed_phase
from tests.hosts.local_target import LocalTarget

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("check", HOST_CHECKS, ids=lambda c: c.__name__)
async def test_local_host(check: Callable[[KitTarget], Awaitable[None]], tmp_path: Path) -> None:
    await check(LocalTarget(tmp_path))


async def test_a_host_sigkilled_mid_tools_resumes_in_the_next_one(tmp_path: Path) -> None:
    """The kit's mid-tools check with a real SIGKILL: the first half runs in a child
    process that is killed while both tools run; the second half in this one."""
    child = await asyncio.create_subprocess_exec(
        *(sys.executable, "-u", "-m", "tests.hosts.kit_child"),
        *("--data", str(tmp_path), "--actor", "kit-k"),
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert child.stdout is not None
        line = await asyncio.wait_for(child.stdout.readline(), 30)
        sid = json.loads(line)["submission"]
    finally:
        child.send_signal(signal.SIGKILL)
        await child.wait()
    assert child.returncode == -signal.SIGKILL
    await resumed_phase(LocalTarget(tmp_path), "kit-k", sid)
