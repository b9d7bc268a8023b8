"""What a recovering process imports: on CPython 3.11 each ``@dataclass`` compiles its
methods at import (about 4 M instructions for a frozen, slotted record), so modules the
path from process start to a recovered task's first phase never runs stay unloaded
until used (docs/performance.md, "Records are frozen dataclasses")."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_harness_loads_the_execution_env_port_with_the_first_tool_call() -> None:
    probe = "import sys, core.harness; print(sorted(m for m in sys.modules if 'core.env' in m))"
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


def test_the_harness_loads_schedule_tools_and_cadences_when_used() -> None:
    # The schedule task and the reminder task are on the recovery path; the model's
    # schedule tools (a reminders_extension) and the Cadence record (a schedule's
    # occurrences) are not, so they load where they are used.
    probe = (
        "import sys, core.harness; "
        "print(sorted(m for m in ('core.harness.schedule_tools', 'core.harness.cadence') "
        "if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"
