"""Values the core's JSON gate refuses (lone surrogates, deep nesting) are a 4xx over
HTTP, nothing is stored, and the conversation stays servable afterwards (issue 10,
defects 1 and 2: such values used to be stored, then every view was a 500 for good)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from tests.local.support import host_config, serve_in_thread, snapshot

A = "/v1/actors/alice"
C = f"{A}/conversations/1"


def nested(depth: int) -> str:
    return "[" * depth + "0" + "]" * depth


def write(data: str) -> str:
    # Raw JSON text: escapes such as \ud800 must reach the server as the client typed them.
    return '{"type": "write", "content": {"kind": "note", "data": ' + data + "}}"


def send(client: httpx.Client, method: str, path: str, raw: str) -> httpx.Response:
    return client.request(
        method, path, content=raw.encode(), headers={"content-type": "application/json"}
    )


def assert_refused(r: httpx.Response) -> None:
    assert 400 <= r.status_code < 500, (r.status_code, r.text)
    error = r.json()["error"]
    assert error["code"] and error["message"]


def test_poison_values_are_refused_and_the_conversation_stays_servable(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with serve_in_thread(host_config(data)) as running, running.client() as client:
        r = client.post(f"{A}/submissions", json={"type": "write", "content": {"kind": "note"}})
        assert r.status_code == 202
        before = snapshot(data / "alice.sqlite")
        cases = [
            ("PATCH", f"{C}/agent", '{"instructions": "x\\ud800"}'),
            ("PATCH", f"{C}/agent", '{"model": "\\udc00"}'),
            ("PATCH", f"{C}/agent", '{"cwd": "a\\udfffb"}'),
            ("POST", f"{A}/submissions", write('"x\\udc00"')),
            ("POST", f"{A}/submissions", write('{"\\ud800": 1}')),
            ("POST", f"{A}/submissions", write(nested(255))),
            ("POST", f"{A}/submissions", write(nested(1000))),
        ]
        for method, path, raw in cases:
            assert_refused(send(client, method, path, raw))
            view = client.get(f"{C}/view")
            assert view.status_code == 200, (raw[:80], view.text)
            json.dumps(view.json(), ensure_ascii=False).encode()  # all of it is UTF-8
            assert snapshot(data / "alice.sqlite") == before, f"{method} {path} wrote"
