"""A seconds-long run of the AWS benchmark (tests/bench/bench_aws_handler.py), so it
cannot rot: the Lambda rounds, the local host's rounds and the cold start all run and
report their figures. The numbers are not judged here (a loaded machine would fail
them); only that each is there and sane."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_aws_benchmark_runs_at_a_tiny_size() -> None:
    done = subprocess.run(
        [sys.executable, "tests/bench/bench_aws_handler.py", "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    per_round = re.search(
        r"per round: ([\d.]+) DynamoDB transactions, ([\d.]+) WRU .*, ([\d.]+) S3 calls", out
    )
    assert per_round is not None, out
    transactions, wru, _s3 = (float(g) for g in per_round.groups())
    assert transactions >= 1 and wru >= 2 * transactions, out  # transactional: 2 per KB
    ratio = re.search(r"local host, same rounds: ([\d.]+) ms/round; .* = ([\d.]+)x", out)
    assert ratio is not None and float(ratio.group(1)) > 0, out
    cold = re.search(r"cold start, 1000 entries .*: ([\d.]+) s total, .* ([\d.]+) s ours", out)
    assert cold is not None, out
