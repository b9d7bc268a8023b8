"""The actor and the sandbox on two network hosts, with faults injected between them.

The sandbox server runs in a network namespace of its own (see :mod:`tests.sandbox_host.netns`);
a real harness process (``tests.recovery.sandbox_job``) on this host runs one ``bash`` call
on it: ``echo started >> trace.txt; sleep 3; echo line >> out.txt; echo output-text; exit 7``.
``trace.txt`` tells the test the command is running; ``out.txt`` counts its effect. While it
runs, the link is cut, degraded or reset, the sandbox restarted, or the actor SIGKILLed.

Each test checks the effect's count against the replay policy — a ``recoverable`` call's
effect exactly once, an ``unsafe`` one's at most once — and that what the model is told
matches what happened on the sandbox: the real result (with a flaky link, or *recovered*
from the op log after the actor was killed), or *interrupted* (the sandbox lost the op, or
could not be reached while the effect's fate was unknown).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.remote_env.support import token
from tests.sandbox_host.netns import SandboxHost, separate_host

pytestmark = [pytest.mark.netns, pytest.mark.timeout(180)]

ROOT = Path(__file__).resolve().parents[2]
WORKSPACE = "actor-sandbox"
INTERRUPTED = "Tool bash was interrupted and may have partially run"


def _job(db: Path, url: str, **options: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-u",
            "-m",
            "tests.recovery.sandbox_job",
            str(db),
            url,
            token(WORKSPACE),
            json.dumps(options),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def _wait_for(path: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def _told(proc: subprocess.Popen[str]) -> dict[str, Any]:
    """What the model was told of the bash call (the job must have finished its run)."""
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    said = [json.loads(line) for line in out.splitlines()]
    assert said[-1] == {"status": "done"}, said
    (saw,) = [s["model_saw"] for s in said if "model_saw" in s]
    (result,) = saw
    return dict(result)


def _kill(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(10) == -signal.SIGKILL
    for stream in (proc.stdout, proc.stderr):
        assert stream is not None
        stream.close()


def _effects(host: SandboxHost) -> tuple[str, str]:
    workspace = host.server.root / WORKSPACE
    read = lambda name: (workspace / name).read_text() if (workspace / name).exists() else ""  # noqa: E731
    return read("trace.txt"), read("out.txt")


def _assert_real_result(result: dict[str, Any]) -> None:
    assert "output-text" in result["content"], result
    assert "Command exited with code 7" in result["content"], result
    assert "interrupted" not in result["content"], result


def test_the_sandbox_is_on_another_host_reachable_only_over_the_link(tmp_path: Path) -> None:
    with separate_host(tmp_path) as host:
        # Its own address, on a link of its own; no default route out of its namespace.
        assert host.sandbox_address != host.actor_address
        assert "default" not in host.routes()
        assert f"dev {host.sandbox_dev}" in host.routes()
        assert httpx.get(f"{host.url}/v1/health", timeout=5).status_code == 200
        # Nothing listens on this host's loopback at the sandbox's port: the actor really
        # reaches the other host.
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://127.0.0.1:{host.server.port}/v1/health", timeout=2)
        host.partition()
        with pytest.raises(httpx.TransportError):
            httpx.get(f"{host.url}/v1/health", timeout=1)
        host.heal()
        assert httpx.get(f"{host.url}/v1/health", timeout=5).status_code == 200


def test_a_partition_mid_command_delays_the_result_but_runs_it_once(tmp_path: Path) -> None:
    with separate_host(tmp_path) as host:
        job = _job(tmp_path / "actor.sqlite", host.url, long_poll_s=1)
        _wait_for(host.server.root / WORKSPACE / "trace.txt")
        host.partition()  # the command is running on the sandbox; its answer cannot come back
        time.sleep(4)  # ...past the command's end
        host.heal()
        result = _told(job)
        _assert_real_result(result)
        assert _effects(host) == ("started\n", "line\n")


def test_a_partition_longer_than_the_clients_patience_is_reported_interrupted(
    tmp_path: Path,
) -> None:
    # The client gives up while the link is down: the command did run (the sandbox has
    # its effect), so the model must not be told it failed; it is told the truth —
    # interrupted, maybe run, the sandbox unreachable.
    with separate_host(tmp_path) as host:
        job = _job(tmp_path / "actor.sqlite", host.url, long_poll_s=1, attempts=3)
        _wait_for(host.server.root / WORKSPACE / "trace.txt")
        host.partition()
        result = _told(job)
        host.heal()
        assert result["error"]
        assert INTERRUPTED in result["content"], result
        assert "could not be reached" in result["content"], result
        time.sleep(3.5)
        assert _effects(host) == ("started\n", "line\n")  # it ran, once


def test_a_lossy_slow_link_still_runs_the_command_once(tmp_path: Path) -> None:
    with separate_host(tmp_path) as host:
        host.degrade(loss_percent=20, delay_ms=150)
        job = _job(tmp_path / "actor.sqlite", host.url, long_poll_s=1)
        result = _told(job)
        _assert_real_result(result)
        assert _effects(host) == ("started\n", "line\n")
        assert host.dropped_packets() > 0, "the loss rules never dropped anything"


def test_connection_resets_mid_command_are_absorbed_by_the_op_id(tmp_path: Path) -> None:
    with separate_host(tmp_path) as host:
        job = _job(tmp_path / "actor.sqlite", host.url, long_poll_s=0.5)
        _wait_for(host.server.root / WORKSPACE / "trace.txt")
        time.sleep(0.3)
        killed = host.reset_connections()  # the long-poll in flight dies, new ones are refused
        time.sleep(1.5)
        killed += host.reset_connections(refuse=False)
        host.heal()
        result = _told(job)
        assert killed >= 1, "no connection was open to reset"
        _assert_real_result(result)
        assert _effects(host) == ("started\n", "line\n")


def test_the_sandbox_killed_mid_command_reports_lost_and_never_reruns(tmp_path: Path) -> None:
    with separate_host(tmp_path) as host:
        job = _job(tmp_path / "actor.sqlite", host.url)
        _wait_for(host.server.root / WORKSPACE / "trace.txt")
        started = time.monotonic()
        host.server.kill()
        host.server.start()
        result = _told(job)
        assert result["error"]
        assert INTERRUPTED in result["content"], result
        assert "lost the operation" in result["content"], result
        # The restarted sandbox killed the orphan: the effect never happened, nor twice.
        time.sleep(max(0.0, 3.5 - (time.monotonic() - started)))
        assert _effects(host) == ("started\n", "")


def test_the_sandbox_restarted_gracefully_mid_command_tells_what_happened(
    tmp_path: Path,
) -> None:
    # SIGTERM: uvicorn lets open requests finish (up to its grace period) before the
    # service kills what still runs and records it lost. Either way the model's account
    # must match the sandbox's: the real result and one effect, or interrupted and none.
    with separate_host(tmp_path) as host:
        job = _job(tmp_path / "actor.sqlite", host.url, long_poll_s=1)
        _wait_for(host.server.root / WORKSPACE / "trace.txt")
        started = time.monotonic()
        host.server.stop()
        host.server.start()
        result = _told(job)
        time.sleep(max(0.0, 3.5 - (time.monotonic() - started)))
        trace, out = _effects(host)
        assert trace == "started\n"
        if out:
            assert out == "line\n"
            _assert_real_result(result)
        else:
            assert INTERRUPTED in result["content"] and "lost the operation" in result["content"]


def test_an_actor_killed_during_a_partition_recovers_the_result_once(tmp_path: Path) -> None:
    with separate_host(tmp_path) as host:
        db = tmp_path / "actor.sqlite"
        first = _job(db, host.url, long_poll_s=1)
        _wait_for(host.server.root / WORKSPACE / "trace.txt")
        host.partition()
        _kill(first)
        time.sleep(3.5)  # the command finishes on the sandbox, unseen
        host.heal()
        result = _told(_job(db, host.url, long_poll_s=1))
        _assert_real_result(result)  # recovered from the op log, not rerun
        assert _effects(host) == ("started\n", "line\n")


def test_an_unsafe_call_cut_off_by_an_actor_crash_is_interrupted_not_rerun(
    tmp_path: Path,
) -> None:
    with separate_host(tmp_path) as host:
        db = tmp_path / "actor.sqlite"
        first = _job(db, host.url, replay="unsafe", long_poll_s=1)
        _wait_for(host.server.root / WORKSPACE / "trace.txt")
        host.partition()
        _kill(first)
        host.heal()
        result = _told(_job(db, host.url, replay="unsafe", long_poll_s=1))
        assert result["error"]
        assert INTERRUPTED in result["content"], result
        time.sleep(3.5)
        trace, out = _effects(host)
        assert trace == "started\n" and out in ("", "line\n")  # at most once
        assert out == "line\n"  # (here: it did run, on the sandbox, once)
