"""Bad input on every endpoint: a 4xx with a structured error, and nothing written.

One server serves all cases; after each one the existing actor's SQLite rows must be
unchanged and an actor the request named but that did not exist must still have no file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.local.support import host_config, serve_in_thread, snapshot

A = "/v1/actors/alice"
NEW = "/v1/actors/nobody"

# (method, path, body, expected status, expected code or None). A ``str`` body is sent
# raw as JSON; ``None`` sends no body.
CASES: list[tuple[str, str, Any, int, str | None]] = [
    # POST submissions: malformed bodies
    ("POST", f"{A}/submissions", "{not json", 400, "malformed_json"),
    ("POST", f"{NEW}/submissions", '{"type": "input", "content": "x"', 400, "malformed_json"),
    ("POST", f"{A}/submissions", "[1, 2]", 422, "invalid"),
    ("POST", f"{A}/submissions", "null", 422, "invalid"),
    ("POST", f"{A}/submissions", None, 422, "invalid"),
    # ...wrong types and values
    ("POST", f"{A}/submissions", {"content": "x"}, 422, "invalid"),
    ("POST", f"{A}/submissions", {"type": "shout", "content": "x"}, 422, "invalid"),
    ("POST", f"{A}/submissions", {"type": "input", "content": 123}, 422, "invalid"),
    ("POST", f"{A}/submissions", {"type": "input", "content": ""}, 422, "invalid"),
    ("POST", f"{A}/submissions", {"type": "input", "content": "  \n"}, 422, "invalid"),
    ("POST", f"{A}/submissions", {"type": "input", "content": ["x"]}, 422, "invalid"),
    ("POST", f"{NEW}/submissions", {"type": "input", "content": 1}, 422, "invalid"),
    (
        "POST",
        f"{A}/submissions",
        {"type": "input", "content": "x", "when_busy": "later"},
        422,
        None,
    ),
    ("POST", f"{A}/submissions", {"type": "input", "content": "x", "request_id": ""}, 422, None),
    ("POST", f"{A}/submissions", {"type": "input", "content": "x", "request_id": 7}, 422, None),
    (
        "POST",
        f"{A}/submissions",
        {"type": "input", "content": "x", "request_id": "r" * 257},
        422,
        None,
    ),
    (
        "POST",
        f"{A}/submissions",
        {"type": "input", "content": "x", "conversation_id": "1"},
        422,
        None,
    ),
    (
        "POST",
        f"{A}/submissions",
        {"type": "input", "content": "x", "conversation_id": 0},
        422,
        None,
    ),
    (
        "POST",
        f"{A}/submissions",
        {"type": "input", "content": "x", "conversation_id": 2**62},
        422,
        None,
    ),
    ("POST", f"{A}/submissions", {"type": "input", "content": "x", "extra": 1}, 422, "invalid"),
    ("POST", f"{A}/submissions", {"type": "write", "content": "a note"}, 422, "invalid"),
    ("POST", f"{A}/submissions", {"type": "write", "content": {"kind": "assistant"}}, 422, None),
    ("POST", f"{A}/submissions", {"type": "write", "content": {"kind": ""}}, 422, None),
    ("POST", f"{A}/submissions", {"type": "write", "content": {"kind": "n", "when": 1}}, 422, None),
    (
        "POST",
        f"{A}/submissions",
        '{"type": "write", "content": {"kind": "n", "data": NaN}}',
        422,
        None,
    ),
    (
        "POST",
        f"{A}/submissions",
        {"type": "write", "content": {"kind": "n"}, "when_busy": "steer"},
        422,
        None,
    ),
    # ...unknown ids: a conversation that does not exist, on an existing and a new actor
    (
        "POST",
        f"{A}/submissions",
        {"type": "input", "content": "x", "conversation_id": 999},
        404,
        "not_found",
    ),
    (
        "POST",
        f"{NEW}/submissions",
        {"type": "input", "content": "x", "conversation_id": 5},
        404,
        "unknown_actor",
    ),
    # ...bad actor ids
    ("POST", "/v1/actors/a.b/submissions", {"type": "input", "content": "x"}, 400, "invalid_actor"),
    (
        "POST",
        f"/v1/actors/{'x' * 65}/submissions",
        {"type": "input", "content": "x"},
        400,
        "invalid_actor",
    ),
    ("POST", "/v1/actors/%20/submissions", {"type": "input", "content": "x"}, 400, "invalid_actor"),
    (
        "POST",
        "/v1/actors/caf%C3%A9/submissions",
        {"type": "input", "content": "x"},
        400,
        "invalid_actor",
    ),
    ("POST", "/v1/actors/a%2Fb/submissions", {"type": "input", "content": "x"}, 404, None),
    # GET submission
    ("GET", f"{A}/submissions/abc", None, 422, "invalid"),
    ("GET", f"{A}/submissions/0", None, 422, "invalid"),
    ("GET", f"{A}/submissions/99999999999999999999", None, 422, "invalid"),
    ("GET", f"{A}/submissions/999", None, 404, "not_found"),
    ("GET", f"{A}/submissions/1?wait=-1", None, 422, "invalid"),
    ("GET", f"{A}/submissions/1?wait=soon", None, 422, "invalid"),
    ("GET", f"{NEW}/submissions/1", None, 404, "unknown_actor"),
    ("GET", "/v1/actors/a.b/submissions/1", None, 400, "invalid_actor"),
    # PATCH agent
    ("PATCH", f"{A}/conversations/1/agent", "{oops", 400, "malformed_json"),
    ("PATCH", f"{A}/conversations/1/agent", "[]", 422, "invalid"),
    ("PATCH", f"{A}/conversations/1/agent", {"tools": "echo"}, 422, "invalid"),
    ("PATCH", f"{A}/conversations/1/agent", {"tools": ["missing"]}, 422, "unknown_tool"),
    ("PATCH", f"{A}/conversations/1/agent", {"cwd": 3}, 422, "invalid"),
    ("PATCH", f"{A}/conversations/999/agent", {"cwd": "/w"}, 404, "not_found"),
    ("PATCH", f"{A}/conversations/x/agent", {"cwd": "/w"}, 422, "invalid"),
    ("PATCH", f"{NEW}/conversations/2/agent", {"cwd": "/w"}, 404, "unknown_actor"),
    ("PATCH", f"{NEW}/conversations/1/agent", {"tools": ["missing"]}, 422, "unknown_tool"),
    ("PATCH", "/v1/actors/a.b/conversations/1/agent", {"cwd": "/w"}, 400, "invalid_actor"),
    # GET tasks
    ("GET", f"{NEW}/tasks", None, 404, "unknown_actor"),
    ("GET", "/v1/actors/a.b/tasks", None, 400, "invalid_actor"),
    # methods and routes that do not exist
    ("DELETE", f"{A}/tasks", None, 405, "method_not_allowed"),
    ("GET", f"{A}/nothing-here", None, 404, "no_route"),
]


def test_every_refused_request_gets_a_4xx_with_a_message_and_writes_nothing(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    with serve_in_thread(host_config(data)) as running, running.client() as client:
        r = client.post(f"{A}/submissions", json={"type": "input", "content": "hello"})
        assert r.status_code == 202
        sid = r.json()["id"]
        assert client.get(f"{A}/submissions/{sid}", params={"wait": 10}).json()["status"] == "done"
        before = snapshot(data / "alice.sqlite")
        failures = []
        for method, path, body, status, code in CASES:
            kwargs: dict[str, Any] = {}
            if isinstance(body, str):
                kwargs = {"content": body, "headers": {"content-type": "application/json"}}
            elif body is not None:
                kwargs = {"json": body}
            r = client.request(method, path, **kwargs)
            error = (
                r.json().get("error", {})
                if r.headers.get("content-type") == "application/json"
                else {}
            )
            if (
                r.status_code != status
                or (code and error.get("code") != code)
                or not error.get("message")
            ):
                failures.append(f"{method} {path} {body!r}: {r.status_code} {r.text}")
            if snapshot(data / "alice.sqlite") != before:
                failures.append(f"{method} {path} {body!r}: wrote to alice")
        assert failures == []
        stored = sorted(p.name for p in data.iterdir())
        assert stored == ["alice.lock", "alice.sqlite", "alice.sqlite-shm", "alice.sqlite-wal"]
