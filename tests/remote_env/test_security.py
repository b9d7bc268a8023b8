"""Security: every refusal is a clear 4xx, and nothing outside the workspace is touched."""

from __future__ import annotations

import asyncio
import ctypes
import os
import pwd
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.env import CommandTimeout, EnvAuthError, OpRef, PathOutsideWorkspace, RequestTooLarge
from remote_env.auth import mint_token
from remote_env.client import RemoteEnv
from tests.remote_env.support import (
    SECRET,
    asgi_client,
    asgi_env,
    auth,
    host_pids,
    pid_alive,
    run,
    running_app,
    settings,
    wait_until,
)

RESOLVERS = [pytest.param(True, id="openat2"), pytest.param(False, id="walk")]


def _write_body(op_id: str, path: str, content: str = "x") -> dict[str, Any]:
    return {
        "op_id": op_id,
        "kind": "write",
        "args": {"path": path, "content": content},
        "wait_ms": 5000,
    }


def _tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory next to the server root that no request may touch."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret.txt").write_text("top secret")
    return folder


# ------------------------------------------------------------------------------ tokens


@pytest.mark.parametrize(
    "header",
    [
        pytest.param(None, id="missing"),
        pytest.param("Basic abc", id="wrong-scheme"),
        pytest.param("Bearer not-a-token", id="malformed"),
        pytest.param(f"Bearer {mint_token(b'another-secret-0123456789', 'ws', 600)}", id="forged"),
        pytest.param(
            f"Bearer {mint_token(SECRET, 'ws', 10, now=time.time() - 3600)}", id="expired"
        ),
    ],
)
def test_bad_tokens_are_401_and_touch_nothing(tmp_path: Path, header: str | None) -> None:
    async def main() -> None:
        async with running_app(settings(tmp_path / "root")) as app, asgi_client(app) as client:
            headers = {"Authorization": header} if header else {}
            response = await client.post(
                "/v1/ops", json=_write_body("t:1", "created.txt"), headers=headers
            )
            assert response.status_code == 401
            assert response.json()["error"]["code"] == "unauthorized"
            assert response.headers["www-authenticate"] == "Bearer"
            for url in ("/v1/info", "/v1/ops/t:1", "/v1/ops/t:1/events"):
                assert (await client.get(url, headers=headers)).status_code == 401
            assert (await client.get("/v1/health")).status_code == 200

    run(main())
    assert not (tmp_path / "root" / "ws").exists()


def test_tampered_token_is_rejected(tmp_path: Path) -> None:
    good = mint_token(SECRET, "victim", 600)
    prefix, payload, signature = good.split(".")
    forged_payload = mint_token(SECRET, "attacker", 600).split(".")[1]

    async def main() -> None:
        async with running_app(settings(tmp_path / "root")) as app, asgi_client(app) as client:
            for token in (f"{prefix}.{forged_payload}.{signature}", f"{prefix}.{payload}.AAAA"):
                response = await client.get(
                    "/v1/info", headers={"Authorization": f"Bearer {token}"}
                )
                assert response.status_code == 401

    run(main())


def test_client_maps_401_to_env_auth_error(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_app(settings(tmp_path / "root")) as app:
            forged = mint_token(b"wrong-secret-wrong-secret", "ws", 60)
            transport = httpx.ASGITransport(app=app)
            async with RemoteEnv("http://sandbox", forged, transport=transport) as env:
                with pytest.raises(EnvAuthError):
                    await env.read("x")

    run(main())


def test_other_workspace_sees_nothing(tmp_path: Path) -> None:
    async def main() -> None:
        async with (
            running_app(settings(tmp_path / "root")) as app,
            asgi_client(app, "alice") as alice,
            asgi_client(app, "bob") as bob,
        ):
            created = await alice.post("/v1/ops", json=_write_body("shared:1", "mine.txt"))
            assert created.status_code == 200
            home = (await alice.get("/v1/info")).json()["home"]

            # Alice's op id is invisible to Bob: 404 everywhere, never 403.
            assert (await bob.get("/v1/ops/shared:1")).status_code == 404
            assert (await bob.get("/v1/ops/shared:1/events")).status_code == 404
            assert (await bob.post("/v1/ops/shared:1/cancel")).status_code == 404
            # ...and the same id is simply a new op in Bob's workspace, not a conflict.
            own = await bob.post("/v1/ops", json=_write_body("shared:1", "other.txt", "different"))
            assert own.status_code == 200
            assert own.json()["replayed"] is False

            # Bob cannot reach Alice's files by relative or absolute path.
            relative = await bob.post(
                "/v1/ops", json={"kind": "read", "args": {"path": "mine.txt"}}
            )
            assert relative.json()["error"]["code"] == "not_found"
            absolute = await bob.post(
                "/v1/ops", json={"kind": "read", "args": {"path": f"{home}/mine.txt"}}
            )
            assert absolute.status_code == 403
            assert absolute.json()["error"]["code"] == "outside_workspace"

    run(main())


# ------------------------------------------------------------------------------ paths


@pytest.mark.parametrize("use_openat2", RESOLVERS)
@pytest.mark.parametrize(
    "path",
    ["../outside/secret.txt", "a/../../outside/secret.txt", "..", "/etc/passwd", "../ws-evil/x"],
)
def test_traversal_and_absolute_paths_are_403(
    tmp_path: Path, outside: Path, path: str, use_openat2: bool
) -> None:
    before = _tree(tmp_path)

    async def main() -> None:
        config = settings(tmp_path / "root", use_openat2=use_openat2)
        async with running_app(config) as app, asgi_client(app, "ws") as client:
            requests = [
                {"kind": "read", "args": {"path": path}},
                {"kind": "ls", "args": {"path": path}},
                {"kind": "grep", "args": {"pattern": "x", "path": path}},
                {"kind": "find", "args": {"pattern": "*", "path": path}},
                _write_body("w:1", path),
                {
                    "op_id": "e:1",
                    "kind": "edit",
                    "args": {"path": path, "edits": [{"old_text": "a", "new_text": "b"}]},
                    "wait_ms": 5000,
                },
                {"op_id": "b:1", "kind": "bash", "args": {"command": "touch pwned", "cwd": path}},
            ]
            for body in requests:
                response = await client.post("/v1/ops", json=body)
                assert response.status_code == 403, (body, response.text)
                assert response.json()["error"]["code"] == "outside_workspace"
            # Refused requests are not recorded: their op ids stay free.
            for op_id in ("w:1", "e:1", "b:1"):
                assert (await client.get(f"/v1/ops/{op_id}")).status_code == 404

    run(main())
    after = [p for p in _tree(tmp_path) if not p.startswith("root")]
    assert after == [p for p in before if not p.startswith("root")]
    assert (outside / "secret.txt").read_text() == "top secret"


@pytest.mark.parametrize("use_openat2", RESOLVERS)
def test_symlinks_pointing_outside_are_403(
    tmp_path: Path, outside: Path, use_openat2: bool
) -> None:
    ws = tmp_path / "root" / "ws"
    ws.mkdir(parents=True)
    (ws / "dir_link").symlink_to(outside)
    (ws / "rel_link").symlink_to("../../outside")
    (ws / "file_link").symlink_to(outside / "secret.txt")
    (ws / "dangling").symlink_to(outside / "not-yet.txt")
    (ws / "inner.txt").write_text("inside")
    (ws / "inner_link").symlink_to("inner.txt")

    async def main() -> None:
        config = settings(tmp_path / "root", use_openat2=use_openat2)
        async with running_app(config) as app, asgi_client(app, "ws") as client:
            for path in ("dir_link/secret.txt", "rel_link/secret.txt", "file_link"):
                response = await client.post(
                    "/v1/ops", json={"kind": "read", "args": {"path": path}}
                )
                assert response.status_code == 403, (path, response.text)
            for n, path in enumerate(
                ("dir_link/new.txt", "rel_link/new.txt", "file_link", "dangling")
            ):
                response = await client.post("/v1/ops", json=_write_body(f"w:{n}", path, "pwned"))
                assert response.status_code == 403, (path, response.text)
            response = await client.post(
                "/v1/ops",
                json={
                    "op_id": "e:1",
                    "kind": "edit",
                    "args": {"path": "file_link", "edits": [{"old_text": "top", "new_text": "no"}]},
                    "wait_ms": 5000,
                },
            )
            assert response.status_code == 403
            listing = await client.post(
                "/v1/ops", json={"kind": "ls", "args": {"path": "dir_link"}}
            )
            assert listing.status_code == 403
            # A relative symlink that stays inside works, and writes go to its target.
            inner = await client.post(
                "/v1/ops", json={"kind": "read", "args": {"path": "inner_link"}}
            )
            assert inner.json()["result"]["text"] == "inside"
            written = await client.post(
                "/v1/ops", json=_write_body("w:inner", "inner_link", "updated")
            )
            assert written.status_code == 200
            # Directory searches do not follow symlinks out of the workspace.
            found = await client.post(
                "/v1/ops", json={"kind": "grep", "args": {"pattern": "secret"}}
            )
            assert found.json()["result"]["matches"] == []

    run(main())
    assert _tree(outside) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "top secret"
    assert (ws / "inner.txt").read_text() == "updated"
    assert (ws / "inner_link").is_symlink()


def _exchange() -> Any:
    """``renameat2(RENAME_EXCHANGE)``: atomically swap two directory entries."""
    libc = ctypes.CDLL(None, use_errno=True)
    fn = libc.renameat2
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    at_fdcwd, rename_exchange = -100, 2

    def swap(a: Path, b: Path) -> None:
        if fn(at_fdcwd, bytes(a), at_fdcwd, bytes(b), rename_exchange) != 0:
            raise OSError(ctypes.get_errno(), "renameat2")

    return swap


@pytest.mark.parametrize("use_openat2", RESOLVERS)
def test_symlink_swapped_in_during_writes_never_escapes(
    tmp_path: Path, outside: Path, use_openat2: bool
) -> None:
    ws = tmp_path / "root" / "ws"
    (ws / "sub").mkdir(parents=True)
    (ws / "sub" / "secret.txt").write_text("decoy")
    (ws / "swap").symlink_to(outside)  # the entry that keeps trading places with "sub"
    swap = _exchange()
    stop = threading.Event()
    flips = 0

    def flipper() -> None:
        nonlocal flips
        while not stop.is_set():
            swap(ws / "sub", ws / "swap")
            flips += 1

    statuses: dict[int, int] = {}
    leaked_reads = 0

    async def main() -> None:
        nonlocal leaked_reads
        config = settings(tmp_path / "root", use_openat2=use_openat2)
        async with running_app(config) as app, asgi_client(app, "ws") as client:
            thread = threading.Thread(target=flipper, daemon=True)
            thread.start()
            try:
                for i in range(300):
                    response = await client.post(
                        "/v1/ops", json=_write_body(f"race:{i}", f"sub/f{i}.txt", "payload")
                    )
                    statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
                    read = await client.post(
                        "/v1/ops", json={"kind": "read", "args": {"path": "sub/secret.txt"}}
                    )
                    if read.status_code == 200 and "top secret" in read.text:
                        leaked_reads += 1
            finally:
                stop.set()
                thread.join()

    run(main())
    assert _tree(outside) == ["secret.txt"], "a write landed outside the workspace"
    assert leaked_reads == 0, "a read returned a file from outside the workspace"
    assert set(statuses) <= {200, 403}, statuses
    assert statuses.get(200, 0) + statuses.get(403, 0) == 300
    # The race was really exercised: the entry flipped throughout and both outcomes occurred.
    assert flips > 300
    assert statuses.get(200, 0) > 0
    assert statuses.get(403, 0) > 0


# ------------------------------------------------------------------------------ limits


def test_oversized_bodies_are_413(tmp_path: Path) -> None:
    async def main() -> None:
        config = settings(tmp_path / "root", max_body_bytes=2048)
        async with running_app(config) as app:
            async with asgi_client(app, "ws") as client:
                big = _write_body("big:1", "big.txt", "x" * 4096)
                response = await client.post("/v1/ops", json=big)
                assert response.status_code == 413
                assert response.json()["error"]["code"] == "body_too_large"

                async def chunks() -> Any:  # no Content-Length: the limit still applies
                    for _ in range(8):
                        yield b"x" * 512

                streamed = await client.post(
                    "/v1/ops", content=chunks(), headers={"content-type": "application/json"}
                )
                assert streamed.status_code == 413
                assert (await client.get("/v1/ops/big:1")).status_code == 404
            async with asgi_env(app, "ws") as env:
                with pytest.raises(RequestTooLarge):
                    await env.write("big.txt", "y" * 4096, OpRef("big:2"))
                await env.write("small.txt", "fits", OpRef("small:1"))

    run(main())
    assert not (tmp_path / "root" / "ws" / "big.txt").exists()


def test_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    ws = tmp_path / "root" / "ws"
    command = "(sleep 30.125; echo survived > late.txt) & sleep 30"
    grandchildren: list[int] = []

    async def main() -> float:
        async with running_app(settings(tmp_path / "root")) as app, asgi_env(app, "ws") as env:
            started = time.monotonic()

            async def spot() -> None:
                while not grandchildren:
                    grandchildren.extend(host_pids("30.125"))
                    await asyncio.sleep(0.02)

            spotter = asyncio.ensure_future(spot())
            with pytest.raises(CommandTimeout) as caught:
                await env.run_command(command, op=OpRef("slow:1"), timeout=0.5)
            spotter.cancel()
            assert caught.value.result is not None
            assert caught.value.result.timed_out
            assert caught.value.result.exit_code is None
            record = (await env.op_status("slow:1")).error
            assert isinstance(record, CommandTimeout)
            return time.monotonic() - started

    elapsed = run(main())
    assert elapsed < 5
    assert len(grandchildren) == 1
    assert wait_until(lambda: not pid_alive(grandchildren[0]), timeout=5), "grandchild survived"
    assert not (ws / "late.txt").exists()


def test_default_and_maximum_timeouts(tmp_path: Path) -> None:
    async def main() -> None:
        config = settings(tmp_path / "root", default_timeout_s=0.3, max_timeout_s=0.6)
        async with running_app(config) as app, asgi_env(app, "ws") as env:
            started = time.monotonic()
            with pytest.raises(CommandTimeout, match=r"0\.3 seconds"):
                await env.run_command("sleep 20", op=OpRef("default:1"))
            with pytest.raises(CommandTimeout, match=r"0\.6 seconds"):
                await env.run_command("sleep 20", op=OpRef("max:1"), timeout=600)
            assert time.monotonic() - started < 5

    run(main())


def test_commands_do_not_inherit_the_server_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SANDBOX_SERVER_SECRET_FOR_TEST", "leak")

    async def main() -> None:
        async with running_app(settings(tmp_path / "root")) as app, asgi_env(app, "ws") as env:
            result = await env.run_command("env", op=OpRef("env:1"))
            assert "SANDBOX_SERVER_SECRET_FOR_TEST" not in result.output
            assert "HOME=" in result.output

    run(main())


@pytest.mark.skipif(os.geteuid() != 0, reason="dropping to another user needs root")
def test_commands_can_run_as_an_unprivileged_user(tmp_path: Path) -> None:
    # (pytest's temporary directories are root-only: bwrap, still root, mounts the
    # workspace, so the command user need not reach it through them.)
    async def main() -> None:
        config = settings(tmp_path / "root", run_as_user="nobody", run_as_group="nogroup")
        async with running_app(config) as app, asgi_env(app, "ws") as env:
            ident = await env.run_command("id -u; id -G", op=OpRef("id:1"))
            assert ident.output.split() == ["65534", "65534"]
            await env.write("made-by-api.txt", "x", OpRef("w:1"))
            # Files the API writes belong to the command user, so commands can change them.
            changed = await env.run_command(
                "echo more >> made-by-api.txt && echo ok", op=OpRef("id:2")
            )
            assert changed.output == "ok\n"
            denied = await env.run_command("touch /root/nope 2>&1; echo $?", op=OpRef("id:3"))
            assert denied.output.strip().endswith("1")

    run(main())
    assert (tmp_path / "root" / "ws").stat().st_uid == 65534


@pytest.mark.skipif(os.geteuid() != 0, reason="dropping to another user needs root")
def test_unconfined_commands_of_a_root_server_still_run_as_nobody(tmp_path: Path) -> None:
    # --unconfined drops bubblewrap, not the user: only --run-as-root keeps root.
    async def main(op: str, **config: Any) -> list[str]:
        async with (
            running_app(settings(tmp_path / "root", unconfined=True, **config)) as app,
            asgi_env(app, "ws") as env,
        ):
            ran = await env.run_command("id -u; echo x > made.txt && echo ok", op=OpRef(op))
            return ran.output.split()

    assert run(main("u:1")) == [str(pwd.getpwnam("nobody").pw_uid), "ok"]
    assert run(main("u:2", run_as_root=True)) == ["0", "ok"]


@pytest.mark.skipif(os.geteuid() != 0, reason="dropping to another user needs root")
def test_a_workspace_written_by_root_commands_is_handed_to_the_command_user(
    tmp_path: Path,
) -> None:
    # Written while commands ran as root (before issue 30, or under --run-as-root): a
    # server with the default (commands as nobody) gives it to nobody on first use, so
    # commands can go on changing it, and hands over nothing outside it.
    ws = tmp_path / "root" / "ws"
    (ws / "sub").mkdir(parents=True)
    (ws / "old.txt").write_text("old\n")
    (ws / "sub" / "deep.txt").write_text("deep\n")
    outside = tmp_path / "outside.txt"
    outside.write_text("not the workspace's\n")
    (ws / "link").symlink_to(outside)
    os.link(outside, ws / "hard.txt")  # another name of a file outside

    async def main() -> None:
        async with running_app(settings(tmp_path / "root")) as app, asgi_env(app, "ws") as env:
            result = await env.run_command(
                "echo more >> old.txt && echo more >> sub/deep.txt && mkdir sub/new && echo ok",
                op=OpRef("adopt:1"),
            )
            assert result.output == "ok\n"

    run(main())
    nobody = pwd.getpwnam("nobody").pw_uid
    for path in (ws, ws / "sub", ws / "old.txt", ws / "sub" / "deep.txt", ws / "sub" / "new"):
        assert path.lstat().st_uid == nobody, path
    assert (ws / "link").lstat().st_uid == nobody  # the link itself, not what it names
    assert outside.stat().st_uid == 0 and outside.read_text() == "not the workspace's\n"


def test_client_maps_403_to_path_outside_workspace(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_app(settings(tmp_path / "root")) as app, asgi_env(app, "ws") as env:
            with pytest.raises(PathOutsideWorkspace):
                await env.write("../x", "x", OpRef("w:1"))
            assert (await env.op_status("w:1")).state == "unknown"

    run(main())


def test_unauthenticated_requests_over_a_socket_use_json_errors(tmp_path: Path) -> None:
    # A quick end-to-end check of the error envelope through uvicorn itself is in
    # test_server_process; here: unknown routes and methods keep the same envelope.
    async def main() -> None:
        async with (
            running_app(settings(tmp_path / "root")) as app,
            asgi_client(app, "ws") as client,
        ):
            missing = await client.get("/v1/nope")
            assert missing.status_code == 404
            assert missing.json()["error"]["code"] == "no_route"
            wrong = await client.put("/v1/ops")
            assert wrong.status_code == 405
            invalid = await client.post("/v1/ops", json={"kind": "read", "args": {}})
            assert invalid.status_code == 422
            assert invalid.json()["error"]["code"] == "invalid"
            needs_id = await client.post(
                "/v1/ops", json={"kind": "bash", "args": {"command": "true"}}
            )
            assert needs_id.status_code == 422

    run(main())


def test_auth_header_helper_is_used() -> None:
    # Guard the helper the other tests depend on.
    assert auth("ws")["Authorization"].startswith("Bearer pdt1.")
    assert isinstance(httpx.Timeout(1.0), httpx.Timeout)
