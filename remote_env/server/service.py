"""The server's long-lived state: settings, workspaces, op log and running ops."""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path

from remote_env.server.confine import open_jail
from remote_env.server.oplog import OpLog
from remote_env.server.ops import OpManager
from remote_env.server.settings import ServerSettings
from remote_env.server.workspaces import Workspaces

__all__ = ["SandboxService"]


class SandboxService:
    """Started once per server process (by the app's lifespan), closed on shutdown."""

    def __init__(
        self, settings: ServerSettings, workspaces: Workspaces, oplog: OpLog, ops: OpManager
    ) -> None:
        self.settings = settings
        self.workspaces = workspaces
        self.oplog = oplog
        self.ops = ops
        self._sweeper: asyncio.Task[None] | None = None

    @classmethod
    async def start(cls, settings: ServerSettings) -> SandboxService:
        """Open the op log, settle ops a previous process left running, start retention."""
        state = settings.state_path
        state.mkdir(parents=True, exist_ok=True)
        # The state folder holds other workspaces' outputs: owner-only.
        os.chmod(state, 0o700)
        workspaces = Workspaces(settings)
        jail, refusal = await open_jail(settings, Path(workspaces.root))
        oplog = await OpLog.open(state / "ops.sqlite")
        try:
            ops = OpManager(settings, workspaces, oplog, jail=jail, bash_refusal=refusal)
            await ops.recover()
            await ops.sweep()
        except BaseException:
            await oplog.close()
            raise
        service = cls(settings, workspaces, oplog, ops)
        service._sweeper = asyncio.create_task(service._sweep_forever())
        return service

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(self.settings.sweep_interval_s)
            with contextlib.suppress(Exception):  # retention is best effort; retry next time
                await self.ops.sweep()

    async def close(self) -> None:
        """Stop retention, kill running commands (settled ``lost``), close the op log."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        try:
            await self.ops.shutdown()
        finally:
            await self.oplog.close()
