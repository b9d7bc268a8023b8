"""A holder SIGKILLed between its DynamoDB commit and its local apply, or between a local
apply and its next commit, or (deferring) with applied commits not yet durable: a new
invocation rebuilds exactly the committed state."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from core.records import Entry
from core.storage import EntryQuery
from core.testing.clock import VirtualClock
from runtimes.aws import AwsResources
from tests.aws.support import container, head, open_replica
from tests.recovery.aws import crash_child

ROOT = Path(__file__).resolve().parents[3]


def _run_child(endpoint: str, workdir: Path, point: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-m", "tests.recovery.aws.crash_child", endpoint, str(workdir), point],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    return done.stdout.split("\n")


@pytest.mark.parametrize("point", ["after-durable", "after-apply"])
async def test_a_killed_holders_committed_state_is_rebuilt_exactly(
    point: str, aws_http: AwsResources, moto_server: str, tmp_path: Path
) -> None:
    workdir = container(tmp_path)
    lines = _run_child(moto_server, workdir, point)
    committed = [int(line.split()[1]) for line in lines if line.startswith("committed")]
    durable = committed + ([committed[-1] + 1] if point == "after-durable" else [])
    assert len(committed) == (2 if point == "after-durable" else 3)
    assert head(aws_http)["seq"] == "4" and head(aws_http)["owner"] == "doomed"

    # The next invocation comes after the killed holder's lease ran out.
    clock = VirtualClock(crash_child.START + crash_child.LEASE_MS + 1)
    for where, origin in ((container(tmp_path), "rebuilt"), (workdir, None)):
        replica = await open_replica(aws_http, where, owner="next", clock=clock)
        if origin is None:  # the killed container's own /tmp, reused warm or caught up
            origin = "caught_up" if point == "after-durable" else "warm"
        assert replica.origin == origin
        entries = (await replica.storage.scan_entries(EntryQuery(1, order="asc"))).items
        assert [e.id for e in entries] == durable
        assert [e.data for e in entries] == [{"n": n} for n in range(3)]
        assert replica.storage.seq == 4
        await replica.close()


async def test_a_copy_killed_ahead_of_dynamodb_is_rebuilt_after_another_holder_moved_on(
    aws_http: AwsResources, moto_server: str, tmp_path: Path
) -> None:
    workdir = container(tmp_path)
    lines = _run_child(moto_server, workdir, "pending")
    assert len([line for line in lines if line.startswith("committed")]) == 3
    assert head(aws_http)["seq"] == "1"  # only the conversation became durable

    # Another container takes over and commits its own seqs 2..5.
    clock = VirtualClock(crash_child.START + crash_child.LEASE_MS + 1)
    other = await open_replica(aws_http, container(tmp_path), owner="next", clock=clock)
    for n in range(4):
        entry_id = await other.storage.mint_id()
        await other.storage.commit([Entry(entry_id, 1, "custom", data={"other": n})])
    await other.close()

    # The killed container's /tmp holds seqs 2..4 of its own: rebuilt, not caught up.
    again = await open_replica(aws_http, workdir, owner="later", clock=clock)
    assert again.origin == "rebuilt" and again.storage.seq == 5
    entries = (await again.storage.scan_entries(EntryQuery(1, order="asc"))).items
    assert [e.data for e in entries] == [{"other": n} for n in range(4)]
    await again.close()
