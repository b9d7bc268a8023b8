"""The deltas long poll on the local host, over real HTTP (uvicorn on loopback)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import httpx

from core.docops import apply_ops
from tests.local.support import host_config, serve_in_thread, wait_until
from tests.local.test_http_api import texts

ACTOR = "poller"
DELTAS = f"/v1/actors/{ACTOR}/conversations/1/deltas"


def _submit(client: httpx.Client, content: str) -> int:
    r = client.post(f"/v1/actors/{ACTOR}/submissions", json={"type": "input", "content": content})
    assert r.status_code == 202, r.text
    sid: int = r.json()["id"]
    return sid


def _settle(client: httpx.Client, sid: int) -> None:
    r = client.get(f"/v1/actors/{ACTOR}/submissions/{sid}", params={"wait": 20})
    assert r.status_code == 200 and r.json()["status"] == "done", r.text


def _poll(client: httpx.Client, after: int | None, wait: float = 0) -> dict[str, Any]:
    params: dict[str, Any] = {"wait": wait}
    if after is not None:
        params["after"] = after
    r = client.get(DELTAS, params=params)
    assert r.status_code == 200, r.text
    page: dict[str, Any] = r.json()
    return page


def _follow(client: httpx.Client, view: Any, cursor: int, until: Any) -> tuple[Any, int, list[int]]:
    """Long-poll from ``cursor``, applying every delta, until ``until(view)``."""
    seqs: list[int] = []
    deadline = time.monotonic() + 30
    while not until(view):
        assert time.monotonic() < deadline, view
        page = _poll(client, cursor, wait=5)
        for frame in page["frames"]:
            assert frame["type"] == "delta" and frame["seq"] > cursor, frame
            view = apply_ops(view, frame["ops"])
            seqs.append(frame["seq"])
        cursor = page["next"]
    return view, cursor, seqs


def test_two_pollers_follow_a_tool_run_to_the_committed_view(tmp_path: Path) -> None:
    with (
        serve_in_thread(host_config(tmp_path / "data")) as running,
        running.client() as client,
        running.client() as other,
    ):
        _settle(client, _submit(client, "hello"))
        first = _poll(client, None)
        [frame] = first["frames"]
        view, cursor = frame["value"], first["next"]
        # A poll at the cursor is held until a commit answers it.
        held: dict[str, Any] = {}
        waiter = threading.Thread(target=lambda: held.update(_poll(other, cursor, wait=10)))
        waiter.start()
        time.sleep(0.2)
        assert waiter.is_alive()
        sid = _submit(client, "tools:3")
        waiter.join(15)
        assert not waiter.is_alive() and held["frames"], held
        assert all(f["type"] == "delta" and f["seq"] > cursor for f in held["frames"])
        _settle(client, sid)

        def done(v: Any) -> bool:
            return "assistant: tools done" in texts(v["entries"])

        ours, end, seqs = _follow(client, view, cursor, done)
        theirs, _, _ = _follow(other, view, cursor, done)
        committed = client.get(f"/v1/actors/{ACTOR}/conversations/1/view").json()
        if ours != committed:  # commits after the answer (usage): poll them too
            ours, end, _ = _follow(client, ours, end, lambda v: v == committed)
        assert ours == committed
        assert theirs["entries"] == committed["entries"]
        assert seqs == sorted(set(seqs)) and len(seqs) >= 3
        # A client at the end is up to date: the wait runs out empty.
        started = time.monotonic()
        assert _poll(client, end, wait=0.3) == {"frames": [], "next": end}
        assert time.monotonic() - started >= 0.3


def test_the_wait_is_capped_and_a_cursor_survives_eviction(tmp_path: Path) -> None:
    config = host_config(tmp_path / "data", idle_evict_s=0.3)
    with serve_in_thread(config, max_wait_s=0.5) as running, running.client() as client:
        _settle(client, _submit(client, "hello"))
        page = _poll(client, None)
        cursor = page["next"]
        started = time.monotonic()
        assert _poll(client, cursor, wait=30) == {"frames": [], "next": cursor}
        assert 0.45 <= time.monotonic() - started < 5  # capped at the host's max_wait_s
        # The actor is evicted (its feed ends with it); the cursor is the stored seq, so
        # a new activation still covers it: no replace, the next commit's deltas.
        wait_until(lambda: ACTOR not in running.host.active, timeout=10)
        assert _poll(client, cursor) == {"frames": [], "next": cursor}
        sid = _submit(client, "again")
        _settle(client, sid)
        page = _poll(client, cursor, wait=5)
        assert page["frames"] and {f["type"] for f in page["frames"]} == {"delta"}, page
