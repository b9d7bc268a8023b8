"""Crashes: a SIGKILLed server, a server that is not up yet, a response lost on the way back."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import httpx
import pytest

from core.env import OpLost, OpRef, WriteResult
from remote_env.client import RemoteEnv, RetryPolicy
from remote_env.server.oplog import OpLog, OpRow
from tests.remote_env.support import (
    SECRET,
    ServerProcess,
    asgi_env,
    auth,
    free_port,
    host_pids,
    pid_alive,
    run,
    running_app,
    server_process,
    settings,
    token,
    wait_until,
)

_COMMAND = "(sleep 60.25; true) & sleep 60.5"


def _start_orphan_command(server: ServerProcess, op_id: str) -> tuple[int, int]:
    response = httpx.post(
        f"{server.url}/v1/ops",
        headers=auth("ws"),
        json={"op_id": op_id, "kind": "bash", "args": {"command": _COMMAND}},
        timeout=10,
    )
    assert response.status_code == 202
    # Host pids (the command's own $$ and $! are in its pid namespace).
    # The leader shell and its subshell share a command line; the leader came first.
    assert wait_until(lambda: len(host_pids("60.25")) == 1 and len(host_pids("-c", _COMMAND)) == 2)
    return min(host_pids("-c", _COMMAND)), host_pids("60.25")[0]


@pytest.mark.parametrize("unconfined", [False, True], ids=["bwrap", "unconfined"])
def test_sigkilled_server_reports_lost_and_kills_the_orphans(
    tmp_path: Path, unconfined: bool
) -> None:
    with server_process(tmp_path, *(["--unconfined"] if unconfined else [])) as server:
        leader, child = _start_orphan_command(server, "crash:1")
        server.kill()
        if unconfined:
            # The command's session outlives the server...
            assert pid_alive(leader)
            assert pid_alive(child)
        else:
            # ...unless confined: bwrap runs it --die-with-parent, so it dies with the server.
            assert wait_until(lambda: not pid_alive(leader) and not pid_alive(child), timeout=5)
        server.port = free_port()
        server.start()
        # ...and the restarted server kills its whole group before serving.
        assert wait_until(lambda: not pid_alive(leader) and not pid_alive(child), timeout=5)

        record = httpx.get(f"{server.url}/v1/ops/crash:1?wait=1", headers=auth("ws")).json()
        assert record["status"] == "lost"
        assert record["error"]["code"] == "lost"

        async def check() -> None:
            async with server.env("ws") as env:
                status = await env.op_status("crash:1")
                assert status.state == "lost"
                assert isinstance(status.error, OpLost)
                # Re-sending the op returns the recorded outcome; it does not run again.
                with pytest.raises(OpLost):
                    await env.run_command(_COMMAND, op=OpRef("crash:1", attempt=2))

        run(check())


def test_graceful_shutdown_kills_running_commands_and_records_lost(tmp_path: Path) -> None:
    with server_process(tmp_path) as server:
        leader, child = _start_orphan_command(server, "term:1")
        server.stop()
        assert wait_until(lambda: not pid_alive(leader) and not pid_alive(child), timeout=5)
        server.port = free_port()
        server.start()
        record = httpx.get(f"{server.url}/v1/ops/term:1", headers=auth("ws")).json()
        assert record["status"] == "lost"
        assert "shut down" in record["error"]["message"]


def test_client_retries_until_the_server_listens_and_runs_once(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    secret_file = tmp_path / "secret"
    secret_file.write_bytes(SECRET)
    server = ServerProcess(root=root, port=free_port(), secret_file=secret_file)
    waits: list[float] = []

    async def recording_sleep(delay: float) -> None:
        waits.append(delay)
        await asyncio.sleep(delay)

    async def main() -> None:
        retry = RetryPolicy(attempts=400, initial_delay=0.02, max_delay=0.05, sleep=recording_sleep)
        async with RemoteEnv(server.url, token("ws"), retry=retry) as env:
            call = asyncio.create_task(
                env.run_command("echo once >> count.txt", op=OpRef("late:1"))
            )
            await asyncio.sleep(0.3)
            assert not call.done()  # still retrying: nothing listens yet
            server.start(wait=False)
            result = await call
            assert result.exit_code == 0

    try:
        run(main())
    finally:
        server.stop()
    assert waits, "the client never had to retry"
    assert (root / "ws" / "count.txt").read_text() == "once\n"


class _LoseFirstResponse(httpx.AsyncBaseTransport):
    """Delivers the first op request, then fails as if the connection dropped on the way back."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.lost = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        if request.method == "POST" and request.url.path == "/v1/ops" and not self.lost:
            self.lost += 1
            await response.aclose()
            raise httpx.ReadError("connection reset after the server answered", request=request)
        return response


def test_retry_after_a_lost_response_does_not_execute_twice(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_app(settings(tmp_path / "root")) as app:
            flaky = _LoseFirstResponse(httpx.ASGITransport(app=app))
            retry = RetryPolicy(attempts=3, initial_delay=0.01)
            async with RemoteEnv(
                "http://sandbox", token("ws"), transport=flaky, retry=retry
            ) as env:
                result = await env.run_command(
                    "echo ran >> count.txt; cat count.txt", op=OpRef("x:1")
                )
                assert result.output == "ran\n"
                written = await env.write("w.txt", "once", OpRef("x:2"))
                assert written.bytes_written == 4
            assert flaky.lost == 1

    run(main())
    assert (tmp_path / "root" / "ws" / "count.txt").read_text() == "ran\n"


def test_recovery_settles_interrupted_file_mutations_by_hash(tmp_path: Path) -> None:
    """A crash between recording the hashes and the rename is resolved from the file."""
    root = tmp_path / "root"
    (root / "ws").mkdir(parents=True)
    (root / "ws" / "applied.txt").write_text("new")
    (root / "ws" / "unknown.txt").write_text("something else")
    new_sha = hashlib.sha256(b"new").hexdigest()
    pending = {"kind": "write", "path": "applied.txt", "bytes_written": 3, "sha256": new_sha}

    async def crash_state() -> None:
        state = root / ".perdure"
        state.mkdir()
        log = await OpLog.open(state / "ops.sqlite")
        try:
            for op_id, target in (("f:applied", "applied.txt"), ("f:unknown", "unknown.txt")):
                row = OpRow("ws", op_id, "write", "0" * 64, 1, "running", 0.0, target=target)
                await log.insert(row)
                await log.set_hashes("ws", op_id, pre=None, post=new_sha, pending_result=pending)
        finally:
            await log.close()

    async def main() -> None:
        async with running_app(settings(root)) as app, asgi_env(app, "ws") as env:
            applied = await env.op_status("f:applied")
            assert applied.state == "done"
            assert isinstance(applied.result, WriteResult)
            assert applied.result.sha256 == new_sha
            assert (await env.op_status("f:unknown")).state == "lost"

    run(crash_state())
    run(main())


def test_a_command_whose_process_was_never_recorded_never_runs(tmp_path: Path) -> None:
    """The server dies between spawning a command and recording its process group in the
    op log: the gate it holds closes with it, so the command does nothing (a restarted
    server could not have found and killed it). Released, the same command runs."""
    from remote_env.bwrap import locate_bwrap
    from remote_env.server.confine import Jail
    from remote_env.server.executor import CommandRun

    bwrap = locate_bwrap()
    assert bwrap is not None, "the sandbox host needs bubblewrap"
    jail = Jail(bwrap, allow_network=False, max_processes=64, max_memory_bytes=0)

    async def attempt(released: bool) -> tuple[int | None, bool]:
        effect = tmp_path / "effect.txt"
        effect.unlink(missing_ok=True)
        command = CommandRun(
            log_path=tmp_path / f"op-{released}.log",
            max_output_bytes=1024,
            on_output=lambda _: None,
            jail=jail,
            key=f"gate-{released}",
        )
        await command.start(
            f"echo ran > {effect}",
            cwd=str(tmp_path),
            env=None,
            home=str(tmp_path),
            user=None,
        )
        if released:
            command.release()
        else:
            command._close_gate()  # the server's end of the gate goes away (as when it dies)
        outcome = await command.wait(10)
        return outcome.output.exit_code, effect.exists()

    assert run(attempt(released=False)) == (125, False)
    assert run(attempt(released=True)) == (0, True)
