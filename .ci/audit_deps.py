"""Dependency audit for CI: ``pip-audit`` over the installed environment.

Fails (exit 1) when a known vulnerability is found. When pip-audit cannot reach a
vulnerability database — no network, or (as on hosts that reach PyPI only through a
package mirror) the PyPI JSON API answers 404 for every package, which pip-audit reports
as "Dependency not found on PyPI" and then prints "No known vulnerabilities found" —
it says so plainly and exits 0: an audit that audited nothing is reported as not done,
never as clean.

The vulnerability services are tried in turn: PyPI's, then OSV's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

SERVICES = ("pypi", "osv")
TIMEOUT_S = 600


def verdict(report: dict[str, Any] | None, returncode: int, stderr: str) -> tuple[int, str]:
    """``(exit code, message)`` for one pip-audit run (``report``: its JSON, if any).

    Exit codes: 0 clean, 1 vulnerable, 2 not audited (no database reachable).
    """
    if report is None:
        last = stderr.strip().splitlines()[-1] if stderr.strip() else f"exit {returncode}"
        return 2, f"could not reach its vulnerability database: {last[:300]}"
    deps = report.get("dependencies", [])
    vulnerable = [d for d in deps if d.get("vulns")]
    if vulnerable:
        lines = [
            f"  {d['name']} {d.get('version', '?')}: "
            + ", ".join(v.get("id", "?") for v in d["vulns"])
            for d in vulnerable
        ]
        return 1, "known vulnerabilities:\n" + "\n".join(lines)
    skipped = [d for d in deps if "skip_reason" in d]
    audited = len(deps) - len(skipped)
    if audited == 0:
        sample = skipped[0]["skip_reason"] if skipped else "no dependencies listed"
        return 2, (
            f"audited none of {len(deps)} dependencies: its database answered for none "
            f"(e.g. {sample!r})"
        )
    return 0, f"{audited} dependencies audited ({len(skipped)} skipped), no known vulnerabilities"


def run(service: str) -> tuple[int, str]:
    argv = [sys.executable, "-m", "pip_audit", "--format", "json", "--progress-spinner", "off"]
    try:
        done = subprocess.run(
            [*argv, "--vulnerability-service", service],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return 2, f"timed out after {TIMEOUT_S} s"
    try:
        report = json.loads(done.stdout) if done.stdout.strip() else None
    except ValueError:
        report = None
    return verdict(report, done.returncode, done.stderr)


def main() -> int:
    reasons = []
    for service in SERVICES:
        code, message = run(service)
        if code != 2:
            print(f"pip-audit ({service}): {message}")
            return code
        reasons.append(f"{service}: {message}")
    print("pip-audit: NOT AUDITED — no vulnerability database is reachable from this host")
    for reason in reasons:
        print(f"  {reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
