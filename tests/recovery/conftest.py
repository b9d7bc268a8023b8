"""Reports the crash matrix's coverage: the points run per host."""

from __future__ import annotations

import pytest


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    from tests.recovery.test_crash_matrix import COVERAGE

    covered = terminalreporter.config.stash.get(COVERAGE, None)
    if not covered:
        return
    terminalreporter.section("crash matrix: points covered per host")
    for host, points in sorted(covered.items()):
        terminalreporter.write_line(f"{host} ({len(points)}): {', '.join(points)}")
