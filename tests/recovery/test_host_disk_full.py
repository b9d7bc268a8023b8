"""The local host on a file system that really fills up (a 2 MiB tmpfs as its data
directory): the answer's commit fails, the waiting request is told (503-worthy
``SessionPoisoned``) instead of hanging, the host evicts the poisoned actor and arms a
wake for it; once space is freed (the tmpfs is grown, as an operator would), the actor
reopens from its last commit and the conversation goes on."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.errors import SessionPoisoned
from core.faux import FauxModel, faux_message
from runtimes.actor import ActorConfig
from runtimes.local.host import ActorHost, HostConfig
from tests.local.support import AGENT, echo_extension


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root; test_storage_faults covers disk full too")
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _grow(mount: Path) -> None:
    subprocess.run(["mount", "-o", "remount,size=64m", str(mount)], check=True)


async def _eventually(check: object, timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():  # type: ignore[operator]
        assert loop.time() < deadline, "condition never held"
        await asyncio.sleep(0.02)


async def test_the_host_survives_a_full_disk(small_disk: Path) -> None:
    model = FauxModel(
        # The second cannot fit: 3.6 MB in blocks each below the JSON gate's string limit.
        [faux_message("fine"), faux_message(*["z" * 900_000] * 4)],
        fallback=faux_message("still here"),
        token_size=100_000,
    )
    events: list[tuple[str, str]] = []
    reports: list[BaseException] = []
    host = ActorHost(
        HostConfig(
            data_dir=small_disk,
            actor=ActorConfig(
                models=model,
                extensions=[echo_extension()],
                default_agent=AGENT,
                report=lambda actor, error: reports.append(error),
                observe=lambda actor, event, wake: events.append((actor, event)),
            ),
            idle_evict_s=60,
        )
    )
    await host.start()
    try:
        async with host.use("a", create=True) as h:
            root = await h.root(agent=AGENT)
            first = await (await root.submit("hello")).wait(timeout=10)
            assert first.status == "done"
            big = await root.submit("now say a lot")
            with pytest.raises(SessionPoisoned):
                await asyncio.wait_for(big.wait(), 10)  # told, not left hanging
        await _eventually(lambda: ("a", "evicted") in events)
        assert any(isinstance(e, SessionPoisoned) for e in reports)  # and it was reported
        # The operator frees space; the host's wake (or the next request) reopens it.
        _grow(small_disk)
        async with host.use("a") as h:
            assert h is not None and h.session.poisoned is None
            record = await (await h.submission(big.id)).wait(timeout=10)  # type: ignore[union-attr]
            assert record.status == "done"  # answered once, after the reopen
            root = await h.conversation(1)
            after = await (await root.submit("and now?")).wait(timeout=10)
            assert after.status == "done"
    finally:
        await host.close()
