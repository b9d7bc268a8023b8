"""Print the shell commands of a deployment guide that run offline, for CI to run as written.

``python .ci/guide_steps.py GUIDE.md | bash -euo pipefail``: every fenced ``sh`` block
under a ``##`` heading that does not say ``(account)`` (the steps that need cloud
credentials say so in their heading), in order. A guide whose offline commands fail
fails CI, so a user following it from a clean checkout meets none that errors.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

__all__ = ["offline_commands"]

_BLOCK = re.compile(r"^```sh\n(.*?)^```", re.MULTILINE | re.DOTALL)


def offline_commands(guide: str) -> list[str]:
    """The ``sh`` blocks of the sections whose heading is not marked ``(account)``."""
    found: list[str] = []
    for section in re.split(r"^(?=## )", guide, flags=re.MULTILINE):
        heading = section.splitlines()[0] if section else ""
        if "(account)" in heading:
            continue
        found += [m.group(1) for m in _BLOCK.finditer(section)]
    return found


def main(path: str) -> int:
    blocks = offline_commands(Path(path).read_text())
    if not blocks:
        print(f"echo '{path}: no offline commands found' >&2; exit 1")
        return 1
    for block in blocks:
        print(block, end="" if block.endswith("\n") else "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
