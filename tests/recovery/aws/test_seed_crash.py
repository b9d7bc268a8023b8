"""The seed crash scenario on the AWS host's storage: killed mid-tools, the next
invocation (a new container, cold /tmp) rebuilds from DynamoDB and S3 and resumes —
search reruns (safe), book is reported interrupted (unsafe), ``job-42`` is deduped."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from runtimes.aws import AwsResources
from tests.aws.support import container, head
from tests.recovery.aws import seed_job_aws
from tests.recovery.test_seed_crash import ROOT, check_seed_crash


def test_the_seed_crash_scenario_passes_on_the_aws_storage(
    aws_http: AwsResources, moto_server: str, tmp_path: Path
) -> None:
    log = tmp_path / "effects.log"

    def start(attempt: int) -> subprocess.Popen[str]:
        offset = 0 if attempt == 1 else seed_job_aws.LEASE_MS + 1_000
        return subprocess.Popen(
            [
                *(sys.executable, "-u", "-m", "tests.recovery.aws.seed_job_aws", moto_server),
                *(str(container(tmp_path)), str(log), f"invocation-{attempt}", str(offset)),
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )

    check_seed_crash(start, log)
    assert head(aws_http, "seed")["epoch"] == "2"  # the second invocation took over
