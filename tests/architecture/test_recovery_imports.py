"""What a recovering process imports: on CPython 3.11 each ``@dataclass`` compiles its
methods at import (about 2.5 M instructions for a slotted record, 4 M if it is frozen),
so modules the path from process start to a recovered task's first phase never runs stay
unloaded until used, and the records it does load are ``core.readonly`` records rather
than frozen ones (docs/performance.md, "Records are read-only dataclasses")."""

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


def test_the_recovery_path_defines_no_frozen_dataclass_of_core_but_the_scan_queries() -> None:
    # ``frozen=True`` costs each class a compiled __setattr__ and __delattr__ at import
    # and every construction an object.__setattr__ per field; the scan queries keep it
    # (a caller holds one across pages), every other record is @readonly.
    probe = (
        "import sys, dataclasses, tests.bench.perdure_side\n"
        "print(sorted(f'{m.__name__}.{v.__name__}' for m in list(sys.modules.values())\n"
        "    if m.__name__.startswith('core') for v in vars(m).values()\n"
        "    if isinstance(v, type) and v.__module__ == m.__name__\n"
        "    and dataclasses.is_dataclass(v) and v.__dataclass_params__.frozen))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True
    )
    queries = ["Conversation", "Document", "Entry", "Submission", "Task"]
    assert out.stdout.strip() == str([f"core.storage.port.{q}Query" for q in queries])
