"""The confined shell (issue 10, defect 8): each command runs under bubblewrap in its own
workspace; other workspaces, the server's state and the network are out of reach, and
limits stop fork bombs and memory hogs."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core.env import CommandTimeout, EnvUnavailable, ExecResult, OpRef
from remote_env.server.confine import find_bwrap
from tests.remote_env.support import asgi_env, host_pids, run, running_app, settings, wait_until

pytestmark = pytest.mark.skipif(find_bwrap() is None, reason="needs bubblewrap (bwrap)")


def sh(root: Path, command: str, workspace: str = "ws", **config: Any) -> ExecResult:
    """Run one command in ``workspace`` on a fresh in-process server over ``root``."""

    async def main() -> ExecResult:
        async with (
            running_app(settings(root, **config)) as app,
            asgi_env(app, workspace) as env,
        ):
            return await env.exec(command, op=OpRef(f"c:{time.monotonic_ns()}"), timeout=20)

    result: ExecResult = run(main())
    return result


def test_a_command_cannot_read_or_list_a_sibling_workspace(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "other").mkdir(parents=True)
    (root / "other" / "secret.txt").write_text("other's secret\n")
    result = sh(root, "ls -a ..; cat ../other/secret.txt; cat $HOME/../other/secret.txt; echo end")
    assert "other's secret" not in result.output
    assert "No such file or directory" in result.output
    listing = result.output.split("\n")
    assert "other" not in listing and "ws" in listing
    # Unconfined (the operator's explicit choice) it could: the test can fail.
    assert "other's secret" in sh(root, "cat ../other/secret.txt", unconfined=True).output


def test_a_command_cannot_write_outside_its_workspace(tmp_path: Path) -> None:
    root = tmp_path / "root"
    result = sh(
        root,
        "echo x > ../x; echo x > ../other/y; echo x > /x; echo x > /etc/x; touch /usr/x;"
        " echo inside > mine.txt; echo done",
    )
    assert result.output.endswith("done\n")
    assert "Read-only file system" in result.output
    assert (root / "ws" / "mine.txt").read_text() == "inside\n"
    assert not (root / "x").exists() and not (root / "other").exists()
    assert not Path("/x").exists() and not Path("/etc/x").exists() and not Path("/usr/x").exists()
    sh(root, "echo x > ../x", unconfined=True)
    assert (root / "x").exists()  # the test can fail


def test_a_command_cannot_see_the_op_log_or_the_secret(tmp_path: Path) -> None:
    root = tmp_path / "root"
    state = root / ".perdure"
    state.mkdir(parents=True)
    (state / "secret").write_bytes(b"s" * 40)
    probe = (
        "ls -a .. ; ls ../.perdure; cat ../.perdure/secret; ls ../.perdure/logs;"
        " find / -name ops.sqlite 2>/dev/null; echo end"
    )
    result = sh(root, probe)
    assert "ops.sqlite" not in result.output and "s" * 40 not in result.output
    assert ".perdure" not in result.output.split("\n")
    assert "ops.sqlite" in sh(root, "ls ../.perdure", unconfined=True).output


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP server on 127.0.0.1 that answers every connection with ``hello``."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.sendall(b"hello\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    server.close()


def test_a_command_cannot_reach_the_network_unless_allowed(tmp_path: Path, listener: int) -> None:
    command = f"exec 3<>/dev/tcp/127.0.0.1/{listener} && head -n 1 <&3 || echo refused"
    assert sh(tmp_path / "root", command).output.strip().endswith("refused")
    assert sh(tmp_path / "root", command, allow_network=True).output == "hello\n"


BOMB = "b(){ b|b& };b"


def test_a_fork_bomb_is_bounded_and_stopped(tmp_path: Path) -> None:
    root = tmp_path / "root"
    # Bounded: at most max_processes at once, the rest of the forks fail.
    many = sh(root, "for i in $(seq 100); do sleep 5.125 & done 2>&1 | tail -n 1", max_processes=32)
    # (bash reports the refused fork as EAGAIN or, from a pids cgroup, as EINTR)
    assert "fork:" in many.output
    # The classic bomb: it cannot take the machine, and its timeout kills all of it.
    started = time.monotonic()

    async def bomb() -> None:
        config = settings(root, max_processes=64)
        async with running_app(config) as app, asgi_env(app, "ws") as env:
            # Its forks soon fail; when the leader exits (or the timeout hits) the pid
            # namespace ends and takes every remaining process with it.
            with contextlib.suppress(CommandTimeout):
                await env.exec(BOMB, op=OpRef("bomb:1"), timeout=3)

    run(bomb())
    assert time.monotonic() - started < 20
    assert wait_until(lambda: not host_pids("-c", BOMB), timeout=10)
    assert wait_until(lambda: not host_pids("5.125"), timeout=10)


def test_a_memory_hog_is_stopped(tmp_path: Path) -> None:
    hog = "x=$(head -c 400000000 /dev/zero | tr '\\0' a); echo kept ${#x}"
    result = sh(tmp_path / "root", hog, max_memory_bytes=256 * 1024 * 1024)
    assert "kept 400000000" not in result.output
    assert result.exit_code != 0


def test_without_bwrap_bash_is_refused_unless_unconfined(tmp_path: Path) -> None:
    async def main() -> None:
        config = settings(tmp_path / "root", bwrap="/nonexistent/bwrap")
        async with running_app(config) as app, asgi_env(app, "ws") as env:
            with pytest.raises(EnvUnavailable, match="bubblewrap"):
                await env.exec("echo hi", op=OpRef("b:1"))
            await env.write("f.txt", "files still work", OpRef("w:1"))
            assert (await env.read("f.txt")).text == "files still work"
            assert (await env.op_status("b:1")).state == "unknown"  # refused: not recorded
        config = settings(tmp_path / "root", bwrap="/nonexistent/bwrap", unconfined=True)
        async with running_app(config) as app, asgi_env(app, "ws") as env:
            assert (await env.exec("echo hi", op=OpRef("b:1"))).output == "hi\n"

    run(main())
