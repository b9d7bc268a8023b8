"""The host kit's target for the local host: a data directory on this machine."""

from __future__ import annotations

import hashlib
from pathlib import Path

from core import Clock
from runtimes.actor import ActorConfig
from runtimes.actor.testing import KitHost
from runtimes.local.host import ActorHost, HostConfig
from tests.local.support import snapshot


class LocalTarget:
    """Hosts on one data directory. ``kill`` in-process closes the host without parking
    anything (closing writes nothing a crash would not); the real-SIGKILL variant runs
    the first half of a check in a child process instead (``tests.hosts.kit_child``)."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir

    def host(self, config: ActorConfig, clock: Clock) -> ActorHost:
        return ActorHost(
            HostConfig(
                data_dir=self.data_dir,
                actor=config,
                clock=clock,
                idle_evict_s=3600,
                recover_on_start=False,
            )
        )

    async def kill(self, host: KitHost) -> None:
        await host.close()

    def exists(self, actor: str) -> bool:
        return (self.data_dir / f"{actor}.sqlite").exists()

    def digest(self, actor: str) -> str | None:
        rows = snapshot(self.data_dir / f"{actor}.sqlite")
        return None if rows is None else hashlib.sha256(repr(rows).encode()).hexdigest()
