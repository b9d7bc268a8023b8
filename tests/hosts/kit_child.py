"""The first half of the kit's mid-tools check in its own process, to be SIGKILLed:
``python -m tests.hosts.kit_child --data DIR --actor A``. Prints ``{"submission": id}``
once both tools run, then waits (the tools never finish) until killed."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

from core.testing import VirtualClock
from runtimes.actor.testing import KitTools, kit_config, mid_tools_phase
from tests.hosts.local_target import LocalTarget


async def _main(data: Path, actor: str) -> None:
    tools = KitTools(gate=asyncio.Event().wait)
    host = LocalTarget(data).host(kit_config(tools), VirtualClock())
    sid = await mid_tools_phase(host, tools, actor)
    print(json.dumps({"submission": sid}), flush=True)
    await asyncio.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--actor", required=True)
    args = parser.parse_args()
    asyncio.run(_main(args.data, args.actor))


if __name__ == "__main__":
    main()
