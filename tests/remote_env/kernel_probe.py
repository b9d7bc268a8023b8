"""What a command can reach of the kernel's state (issue 30), as one ``bash`` op.

``python -m tests.remote_env.kernel_probe [SERVER FLAGS]`` starts a sandbox server (a real
process, as the user running this: root for the case at issue) with those flags (none:
the quick start's default), runs :data:`KERNEL_PROBE` in a workspace and prints its
``name=value`` lines. It only uses what older trees have too, so copying it into a
checkout of an earlier commit shows that commit's figures.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from core.env import OpRef
from tests.remote_env.support import run, server_process

__all__ = ["KERNEL_PROBE", "parse"]

# Writing the current swappiness back changes nothing even where it succeeds.
KERNEL_PROBE = (
    'v=$(cat /proc/sys/vm/swappiness); (echo "$v" > /proc/sys/vm/swappiness) 2>/dev/null'
    " && echo swappiness-write=succeeds || echo swappiness-write=fails;"
    " for f in /proc/sys/kernel/core_pattern /proc/sysrq-trigger /proc/irq /proc/bus /sys;"
    ' do [ -w "$f" ] && echo "$f=writable" || echo "$f=not-writable"; done;'
    " echo CapBnd=$(grep CapBnd /proc/self/status | cut -f2);"
    " echo CapEff=$(grep CapEff /proc/self/status | cut -f2);"
    " echo uid=$(id -u);"
    " echo made > made.txt && echo workspace=writable"
)


def parse(output: str) -> dict[str, str]:
    """The probe's ``name=value`` lines as a dict."""
    return dict(line.split("=", 1) for line in output.splitlines() if "=" in line)


def main() -> None:
    with server_process(Path(tempfile.mkdtemp(prefix="kernel-probe-")), *sys.argv[1:]) as server:

        async def probe() -> str:
            async with server.env("ws") as env:
                return (await env.run_command(KERNEL_PROBE, op=OpRef("probe:1"), timeout=30)).output

        print(run(probe()), end="")


if __name__ == "__main__":
    main()
