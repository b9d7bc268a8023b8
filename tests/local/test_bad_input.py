"""Bad input on every endpoint: a 4xx with a structured error, and nothing written.

One server serves all cases; after each one the existing actor's SQLite rows must be
unchanged and an actor the request named but that did not exist must still have no file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.local.support import files, host_config, serve_in_thread, snapshot

A = "/v1/actors/alice"
NEW = "/v1/actors/nobody"
C = f"{A}/conversations/1"
# Filled in once the actor exists: a visible entry, and a task that is not a reminder.
ENTRY = "{entry}"
TASK = "{task}"

# (method, path, body, expected status, expected code or None). A ``str`` body is sent
# raw as JSON; ``None`` sends no body.
CASES: list[tuple[str, str, Any, int, str | None]] = [
    # Refused writes to an actor that does not exist yet create no actor (issue 10, 3)
    (
        "POST",
        f"{NEW}/submissions",
        {"type": "write", "content": {"kind": "note", "message": {}}},
        422,
        "invalid",
    ),
    ("POST", f"{NEW}/submissions", {"type": "write", "content": {"kind": "system"}}, 422, None),
    ("POST", f"{A}/submissions", {"type": "write", "content": {"kind": "reset"}}, 422, None),
    ("PATCH", f"{NEW}/conversations/1/agent", {"extensions": ["nope"]}, 422, "invalid"),
    ("PATCH", f"{NEW}/conversations/1/agent", {"tools": ["nope"]}, 422, "unknown_tool"),
    ("PATCH", f"{C}/agent", {"extensions": ["nope"]}, 422, "invalid"),
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
    # GET view and watch
    ("GET", f"{A}/conversations/999/view", None, 404, "not_found"),
    ("GET", f"{A}/conversations/0/view", None, 422, "invalid"),
    ("GET", f"{A}/conversations/x/view", None, 422, "invalid"),
    ("GET", f"{NEW}/conversations/1/view", None, 404, "unknown_actor"),
    ("GET", "/v1/actors/a.b/conversations/1/view", None, 400, "invalid_actor"),
    ("GET", f"{A}/conversations/999/watch", None, 404, "not_found"),
    ("GET", f"{A}/conversations/abc/watch", None, 422, "invalid"),
    ("GET", f"{A}/conversations/{2**63}/watch", None, 422, "invalid"),
    ("GET", f"{NEW}/conversations/1/watch", None, 404, "unknown_actor"),
    ("GET", "/v1/actors/a.b/conversations/1/watch", None, 400, "invalid_actor"),
    ("POST", f"{C}/watch", None, 405, "method_not_allowed"),
    # POST abort
    ("POST", f"{C}/abort", "{oops", 400, "malformed_json"),
    ("POST", f"{C}/abort", "[]", 422, "invalid"),
    ("POST", f"{C}/abort", {"background": "yes"}, 422, "invalid"),
    ("POST", f"{C}/abort", {"background": 1}, 422, "invalid"),
    ("POST", f"{C}/abort", {"everything": True}, 422, "invalid"),
    ("POST", f"{A}/conversations/999/abort", {}, 404, "not_found"),
    ("POST", f"{NEW}/conversations/1/abort", {}, 404, "unknown_actor"),
    # POST fork
    ("POST", f"{C}/fork", "{", 400, "malformed_json"),
    ("POST", f"{C}/fork", None, 422, "invalid"),
    ("POST", f"{C}/fork", {}, 422, "invalid"),
    ("POST", f"{C}/fork", {"at_entry": "2"}, 422, "invalid"),
    ("POST", f"{C}/fork", {"at_entry": 2.5}, 422, "invalid"),
    ("POST", f"{C}/fork", {"at_entry": 0}, 422, "invalid"),
    ("POST", f"{C}/fork", {"at_entry": 2**63}, 422, "invalid"),
    ("POST", f"{C}/fork", {"at_entry": 9999}, 404, "invalid_entry"),
    ("POST", f"{C}/fork", {"at_entry": 1}, 404, "invalid_entry"),  # a conversation id
    ("POST", f"{C}/fork", {"at_entry": ENTRY, "extra": 1}, 422, "invalid"),
    ("POST", f"{C}/fork", {"at_entry": ENTRY, "agent": "be brief"}, 422, "invalid"),
    ("POST", f"{C}/fork", {"at_entry": ENTRY, "agent": {"colour": "blue"}}, 422, "invalid"),
    ("POST", f"{C}/fork", {"at_entry": ENTRY, "agent": {"thinking": "max"}}, 422, "invalid"),
    ("POST", f"{C}/fork", {"at_entry": ENTRY, "agent": {"tools": ["x"]}}, 422, "unknown_tool"),
    ("POST", f"{A}/conversations/999/fork", {"at_entry": ENTRY}, 404, "not_found"),
    ("POST", f"{NEW}/conversations/1/fork", {"at_entry": 2}, 404, "unknown_actor"),
    # POST compact
    ("POST", f"{C}/compact", "{oops", 400, "malformed_json"),
    ("POST", f"{C}/compact", {"instructions": 5}, 422, "invalid"),
    ("POST", f"{C}/compact", {"instructions": ""}, 422, "invalid"),
    ("POST", f"{C}/compact", {"focus": "x"}, 422, "invalid"),
    ("POST", f"{A}/conversations/999/compact", {}, 404, "not_found"),
    ("POST", f"{NEW}/conversations/1/compact", {}, 404, "unknown_actor"),
    # POST reset
    ("POST", f"{C}/reset", "{oops", 400, "malformed_json"),
    ("POST", f"{C}/reset", {"handoff": 3}, 422, "invalid"),
    ("POST", f"{C}/reset", {"handoff": ""}, 422, "invalid"),
    ("POST", f"{C}/reset", {"request_id": ""}, 422, "invalid"),
    ("POST", f"{C}/reset", {"reason": "x"}, 422, "invalid"),
    ("POST", f"{A}/conversations/999/reset", {}, 404, "not_found"),
    ("POST", f"{NEW}/conversations/1/reset", {}, 404, "unknown_actor"),
    # POST reminders: bad times, bad messages
    ("POST", f"{C}/reminders", "{oops", 400, "malformed_json"),
    ("POST", f"{C}/reminders", None, 422, "invalid"),
    ("POST", f"{C}/reminders", {"message": "x"}, 422, "invalid"),
    ("POST", f"{C}/reminders", {"message": "x", "at": 1, "after": 1}, 422, "invalid"),
    ("POST", f"{C}/reminders", {"message": "x", "after": 0}, 422, "invalid"),
    ("POST", f"{C}/reminders", {"message": "x", "after": -5}, 422, "invalid"),
    ("POST", f"{C}/reminders", {"message": "x", "after": 10**9}, 422, "invalid"),
    ("POST", f"{C}/reminders", {"message": "x", "after": "5"}, 422, "invalid"),
    ("POST", f"{C}/reminders", {"message": "x", "after": True}, 422, "invalid"),
    ("POST", f"{C}/reminders", '{"message": "x", "after": NaN}', 422, "invalid"),
    ("POST", f"{C}/reminders", '{"message": "x", "after": Infinity}', 422, "invalid"),
    ("POST", f"{C}/reminders", {"message": "x", "at": -1}, 422, "invalid"),
    ("POST", f"{C}/reminders", {"message": "x", "at": 1.5}, 422, "invalid"),
    ("POST", f"{C}/reminders", {"message": "x", "at": "tomorrow"}, 422, "invalid"),
    ("POST", f"{C}/reminders", {"message": "x", "at": 10**15}, 422, "invalid"),
    ("POST", f"{C}/reminders", {"message": "x", "at": 2**70}, 422, "invalid"),
    ("POST", f"{C}/reminders", {"message": "", "after": 1}, 422, "invalid"),
    ("POST", f"{C}/reminders", {"message": " \n", "after": 1}, 422, "invalid"),
    ("POST", f"{C}/reminders", {"message": "x" * 10_001, "after": 1}, 422, "invalid"),
    ("POST", f"{C}/reminders", {"message": ["x"], "after": 1}, 422, "invalid"),
    ("POST", f"{C}/reminders", {"after": 1}, 422, "invalid"),
    ("POST", f"{C}/reminders", {"message": "x", "after": 1, "repeat": True}, 422, "invalid"),
    ("POST", f"{A}/conversations/999/reminders", {"message": "x", "after": 1}, 404, "not_found"),
    ("POST", f"{NEW}/conversations/1/reminders", {"message": "x", "after": 1}, 404, None),
    # GET and DELETE timers
    ("GET", f"{NEW}/timers", None, 404, "unknown_actor"),
    ("GET", "/v1/actors/a.b/timers", None, 400, "invalid_actor"),
    ("DELETE", f"{A}/timers/999", None, 404, "not_found"),
    ("DELETE", f"{A}/timers/1", None, 404, "not_found"),  # a conversation id
    ("DELETE", f"{A}/timers/{TASK}", None, 404, "not_found"),  # a (finished) generation
    ("DELETE", f"{A}/timers/abc", None, 422, "invalid"),
    ("DELETE", f"{A}/timers/0", None, 422, "invalid"),
    ("DELETE", f"{NEW}/timers/5", None, 404, "unknown_actor"),
    ("POST", f"{A}/timers", None, 405, "method_not_allowed"),
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
        view = client.get(f"{C}/view").json()
        user, answer = view["entries"]
        fill = {ENTRY: user["id"], TASK: answer["by_task_id"]}
        before = snapshot(data / "alice.sqlite")
        failures = []
        for method, template, raw, status, code in CASES:
            path = template.format(entry=fill[ENTRY], task=fill[TASK])
            body = raw
            if isinstance(raw, dict):
                body = {k: fill[v] if v in (ENTRY, TASK) else v for k, v in raw.items()}
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
        assert files(data) == ["alice.lock", "alice.sqlite", "alice.sqlite-shm", "alice.sqlite-wal"]


def test_a_405_says_which_methods_are_allowed(tmp_path: Path) -> None:
    with serve_in_thread(host_config(tmp_path / "data")) as running, running.client() as client:
        r = client.post(f"{C}/view")
        assert r.status_code == 405 and r.json()["error"]["code"] == "method_not_allowed"
        assert r.headers["allow"] == "GET"
        r = client.get(f"{A}/submissions")
        assert r.status_code == 405 and r.headers["allow"] == "POST"


# (raw body, Content-Type or None, the message a person reads). pydantic's own words
# ("Unable to extract tag using discriminator", "Input should be a valid dictionary or
# object to extract fields from", a union's tag shown as a field) must not reach them.
MESSAGES: list[tuple[bytes, str | None, str]] = [
    (
        b'{"type": "input", "content": "x"}',
        None,
        "send it as JSON with the header "
        "Content-Type: application/json (the request had no Content-Type)",
    ),
    (
        b'{"type": "input", "content": "x"}',
        "text/plain",
        "send it as JSON with the header "
        "Content-Type: application/json (the request had Content-Type 'text/plain')",
    ),
    (b'{"content": "x"}', "application/json", "body: the field 'type' is required"),
    (
        b'{"type": "shout", "content": "x"}',
        "application/json",
        "body.type: 'shout' is not one of 'input', 'write'",
    ),
    (b"[1, 2]", "application/json", "body: expected a JSON object, got an array"),
    (b"", "application/json", "body: a JSON body is required"),
    (
        b'{"type": "input", "content": 5}',
        "application/json",
        "body.content: should be a valid string",
    ),
    (
        b'{"type": "input", "content": "x", "extra": 1}',
        "application/json",
        "body.extra: not a field here",
    ),
    (
        b'{"type": "write", "content": {"kind": "note", "message": {}}}',
        "application/json",
        "body.content.message: the field 'role' is required",
    ),
]


def test_validation_errors_read_as_words_not_pydantic_internals(tmp_path: Path) -> None:
    with serve_in_thread(host_config(tmp_path / "data")) as running, running.client() as client:
        for raw, content_type, expected in MESSAGES:
            headers = {} if content_type is None else {"content-type": content_type}
            r = client.post(f"{A}/submissions", content=raw, headers=headers)
            assert r.status_code == 422 and r.json()["error"]["code"] == "invalid", r.text
            message = r.json()["error"]["message"]
            assert message.startswith("invalid request: ") and expected in message, (raw, message)
            for internal in ("discriminator", "Input should", "dictionary", "body.input."):
                assert internal not in message, (raw, message)
        assert not (tmp_path / "data" / "alice.sqlite").exists()
