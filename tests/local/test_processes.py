"""Host processes: one writer per actor across processes, SIGKILL and SIGTERM."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from runtimes.actor import ActorLocked
from runtimes.local.host import ActorHost
from tests.local.support import (
    TOKEN,
    host_config,
    outcomes,
    start_host_process,
    stop,
    wait_until,
)

HEADERS = {"authorization": f"Bearer {TOKEN}"}


def client(url: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers=HEADERS, timeout=30)


def running_generation(c: httpx.Client, actor: str) -> bool:
    tasks = c.get(f"/v1/actors/{actor}/tasks").json()["tasks"]
    return any(t["kind"] == "perdure.generation" and t["state"] == "running" for t in tasks)


async def test_two_host_processes_cannot_open_the_same_actor(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first, url = start_host_process(data)
    second = None
    try:
        with client(url) as c:
            r = c.post("/v1/actors/shared/submissions", json={"type": "input", "content": "hi"})
            assert r.status_code == 202
        # In this process: the typed error.
        host = ActorHost(host_config(data, recover_on_start=False))
        await host.start()
        try:
            with pytest.raises(ActorLocked):
                async with host.use("shared"):
                    pass
        finally:
            await host.close()
        # Over HTTP from another host process: 423, and it keeps serving other actors.
        second, url2 = start_host_process(data)
        with client(url2) as c2:
            r = c2.post("/v1/actors/shared/submissions", json={"type": "input", "content": "x"})
            assert r.status_code == 423 and r.json()["error"]["code"] == "actor_locked"
            assert c2.get("/v1/actors/shared/tasks").status_code == 423
            r = c2.post("/v1/actors/other/submissions", json={"type": "input", "content": "x"})
            assert r.status_code == 202
            # Once the holder is gone (SIGKILL: the kernel drops its lock) it opens here.
            first.send_signal(signal.SIGKILL)
            first.wait(10)
            r = c2.post("/v1/actors/shared/submissions", json={"type": "input", "content": "y"})
            assert r.status_code == 202, r.text
            r = c2.get(f"/v1/actors/shared/submissions/{r.json()['id']}", params={"wait": 20})
            assert r.json()["answer"]["text"] == "echo: y"
    finally:
        stop(first)
        if second is not None:
            stop(second)


def test_a_killed_host_answers_the_pending_submission_after_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    gate = tmp_path / "gate"
    proc, url = start_host_process(data)
    try:
        with client(url) as c:
            body = {"type": "input", "content": f"gate:{gate}", "request_id": "job-1"}
            accepted = c.post("/v1/actors/a/submissions", json=body).json()
            wait_until(lambda: running_generation(c, "a"))  # the model call is in flight
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(10) == -signal.SIGKILL
    finally:
        stop(proc)

    proc, url = start_host_process(data)
    try:
        with client(url) as c:
            # The same request id finds the same submission after the crash.
            again = c.post("/v1/actors/a/submissions", json=body).json()
            assert again["id"] == accepted["id"]
            path = f"/v1/actors/a/submissions/{accepted['id']}"
            assert c.get(path, params={"wait": 0.3}).json()["status"] == "placed"
            gate.touch()
            state = c.get(path, params={"wait": 20}).json()
            assert state["status"] == "done" and state["answer"]["text"] == "opened"
    finally:
        stop(proc)


def test_new_actors_accepted_just_before_a_sigkill_keep_their_submissions(
    tmp_path: Path,
) -> None:
    # A new actor's file is set up without fsync (runtimes/local/sqlite.py): a 202 must
    # still mean the input survives the process, from the first submission on.
    data = tmp_path / "data"
    proc, url = start_host_process(data)
    accepted: dict[str, int] = {}
    try:
        with client(url) as c:
            for n in range(8):
                body = {"type": "input", "content": f"hi {n}", "request_id": "first"}
                r = c.post(f"/v1/actors/new-{n}/submissions", json=body)
                assert r.status_code == 202, r.text
                accepted[f"new-{n}"] = r.json()["id"]
        proc.send_signal(signal.SIGKILL)  # at once: no close, no checkpoint
        assert proc.wait(10) == -signal.SIGKILL
    finally:
        stop(proc)

    proc, url = start_host_process(data)
    try:
        with client(url) as c:
            for n, (actor, sid) in enumerate(accepted.items()):
                body = {"type": "input", "content": f"hi {n}", "request_id": "first"}
                again = c.post(f"/v1/actors/{actor}/submissions", json=body).json()
                assert again["id"] == sid  # the same submission, not a new one
                state = c.get(f"/v1/actors/{actor}/submissions/{sid}", params={"wait": 20})
                assert state.json()["status"] == "done", state.text
                assert state.json()["answer"]["text"] == f"echo: hi {n}"
    finally:
        stop(proc)


def test_sigterm_ends_long_polls_closes_every_actor_and_writes_nothing(tmp_path: Path) -> None:
    data = tmp_path / "data"
    gate = tmp_path / "gate"
    proc, url = start_host_process(data)
    polled: dict[str, Any] = {}
    try:
        with client(url) as c:
            sid = c.post(
                "/v1/actors/a/submissions", json={"type": "input", "content": f"gate:{gate}"}
            ).json()["id"]
            c.post("/v1/actors/b/submissions", json={"type": "input", "content": "hi"})
            wait_until(lambda: running_generation(c, "a"))

            def long_poll() -> None:
                with client(url) as lp:
                    r = lp.get(f"/v1/actors/a/submissions/{sid}", params={"wait": 60})
                    polled.update(status=r.status_code, body=r.json(), at=time.monotonic())

            poller = threading.Thread(target=long_poll)
            poller.start()
            time.sleep(0.3)
            before = outcomes(data / "a.sqlite")
            signalled = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            poller.join(15)
        assert proc.wait(15) in (0, -signal.SIGTERM)
        # The long poll was answered at once with the status of the moment.
        assert polled["status"] == 200 and polled["body"]["status"] == "placed"
        assert polled["at"] - signalled < 3
        # Every actor was closed: its WAL checkpointed into the database, and the
        # interrupted run left exactly what a crash would (no outcome written).
        for actor in ("a", "b"):
            wal = data / f"{actor}.sqlite-wal"
            assert not wal.exists() or wal.stat().st_size == 0
        assert outcomes(data / "a.sqlite") == before
    finally:
        stop(proc)

    proc, url = start_host_process(data)
    try:
        gate.touch()
        with client(url) as c:
            state = c.get(f"/v1/actors/a/submissions/{sid}", params={"wait": 20}).json()
            assert state["answer"]["text"] == "opened"
    finally:
        stop(proc)
