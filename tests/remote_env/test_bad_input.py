"""Refused sandbox requests (issue 10, defects 4-7): a JSON 4xx before anything is
recorded, and schemas that state what the server enforces. One real server on 127.0.0.1."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from remote_env.server import create_app
from tests.remote_env.support import auth, server_process, settings


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with (
        server_process(tmp_path_factory.mktemp("bad-input")) as server,
        httpx.Client(base_url=server.url, headers=auth("ws"), timeout=20) as http,
    ):
        yield http


def post_raw(client: httpx.Client, raw: str) -> httpx.Response:
    # Raw JSON text, so escapes such as \ud800 reach the server as written.
    return client.post(
        "/v1/ops", content=raw.encode(), headers={"content-type": "application/json"}
    )


def assert_json_error(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    error: dict[str, Any] = response.json()["error"]
    assert error["code"] and error["message"]
    return error


SURROGATES = [
    (
        "write-content",
        '{"op_id": "s:1", "kind": "write", "args": {"path": "a", "content": "x\\ud800"}}',
    ),
    (
        "edit-text",
        '{"op_id": "s:2", "kind": "edit", "args": {"path": "a",'
        ' "edits": [{"old_text": "a", "new_text": "\\udc00"}]}}',
    ),
    (
        "bash-env",
        '{"op_id": "s:3", "kind": "bash", "args": {"command": "true", "env": {"A": "\\udfff"}}}',
    ),
    ("bash-command", '{"op_id": "s:4", "kind": "bash", "args": {"command": "echo \\ud800"}}'),
    ("read-path", '{"kind": "read", "args": {"path": "\\ud800"}}'),
    ("grep-pattern", '{"kind": "grep", "args": {"pattern": "\\ud800"}}'),
]


@pytest.mark.parametrize("raw", [r for _, r in SURROGATES], ids=[i for i, _ in SURROGATES])
def test_lone_surrogates_are_a_422_and_nothing_is_recorded(client: httpx.Client, raw: str) -> None:
    error = assert_json_error(post_raw(client, raw), 422)
    # The gate's message, or pydantic's where a pattern check sees the string first.
    assert "lone surrogate" in error["message"] or "unicode" in error["message"]
    body = json.loads(raw)
    if "op_id" in body:
        assert client.get(f"/v1/ops/{body['op_id']}").status_code == 404
        # Not recorded, so the id is free for a fixed request.
        fixed = raw.replace("\\ud800", "ok").replace("\\udc00", "ok").replace("\\udfff", "ok")
        assert post_raw(client, fixed).status_code in (200, 202)


DUPLICATE_KEYS = [
    # Which kind would run? Another reader of the same bytes may take the other one.
    (
        "kind",
        '{"op_id": "k:1", "kind": "write", "kind": "bash",'
        ' "args": {"command": "touch dup-ran", "path": "dup-a", "content": "x"}}',
    ),
    (
        "command",
        '{"op_id": "k:2", "kind": "bash", "args": {"command": "true", "command": "touch dup-ran"}}',
    ),
    (
        "op_id",
        '{"op_id": "k:3", "op_id": "k:4", "kind": "write",'
        ' "args": {"path": "dup-a", "content": "x"}}',
    ),
    (
        "A",
        '{"op_id": "k:5", "kind": "bash",'
        ' "args": {"command": "true", "env": {"A": "1", "A": "2"}}}',
    ),
    ("path", '{"kind": "read", "args": {"path": "dup-a", "path": "dup-b"}}'),
]


@pytest.mark.parametrize(("key", "raw"), DUPLICATE_KEYS, ids=[k for k, _ in DUPLICATE_KEYS])
def test_a_key_named_twice_is_a_422_naming_it_and_nothing_runs(
    client: httpx.Client, key: str, raw: str
) -> None:
    error = assert_json_error(post_raw(client, raw), 422)
    assert error["code"] == "invalid" and f'"{key}"' in error["message"], error
    for op_id in ("k:1", "k:2", "k:3", "k:4", "k:5"):
        if f'"{op_id}"' in raw:
            assert client.get(f"/v1/ops/{op_id}").status_code == 404  # not recorded
    listed = client.post("/v1/ops", json={"kind": "ls", "args": {"path": "."}})
    assert listed.status_code == 200 and "dup-" not in listed.text, listed.text


def test_a_bad_last_event_id_is_a_json_422_before_the_stream(client: httpx.Client) -> None:
    ran = client.post(
        "/v1/ops",
        json={"op_id": "e:1", "kind": "bash", "args": {"command": "echo hi"}, "wait_ms": 10_000},
    )
    assert ran.status_code == 200
    for bad in [b"abc", "\u00b2".encode(), b"-1", b"1.5", b"", b"9" * 20]:
        response = client.get("/v1/ops/e:1/events", headers={"Last-Event-ID": bad})
        assert_json_error(response, 422)
    good = client.get("/v1/ops/e:1/events", headers={"Last-Event-ID": "0"})
    assert good.status_code == 200 and "hi" in good.text
    assert_json_error(client.get("/v1/ops/e:1/events", params={"offset": -1}), 422)
    assert_json_error(client.get("/v1/ops/nope/events"), 404)


def test_405_says_which_methods_are_allowed(client: httpx.Client) -> None:
    for method, path, allowed in [
        ("DELETE", "/v1/ops", "POST"),
        ("PUT", "/v1/info", "GET"),
        ("POST", "/v1/ops/x/events", "GET"),
    ]:
        response = client.request(method, path)
        assert_json_error(response, 405)
        assert response.headers["allow"] == allowed


STRICT = [
    ("int-false", {"kind": "read", "args": {"path": "a", "offset": False}}),
    ("int-fraction", {"kind": "read", "args": {"path": "a", "offset": 5406.5}}),
    ("int-string", {"kind": "ls", "args": {"limit": "5"}}),
    ("bool-int", {"kind": "grep", "args": {"pattern": "x", "literal": 1}}),
    (
        "attempt-true",
        {"op_id": "t:1", "kind": "bash", "args": {"command": "true"}, "attempt": True},
    ),
    ("wait-false", {"op_id": "t:2", "kind": "bash", "args": {"command": "true"}, "wait_ms": False}),
    (
        "timeout-fraction",
        {"op_id": "t:3", "kind": "bash", "args": {"command": "x", "timeout_ms": 9.5}},
    ),
    (
        "timeout-huge",
        {"op_id": "t:4", "kind": "bash", "args": {"command": "x", "timeout_ms": 2**64}},
    ),
    ("empty-path", {"op_id": "t:5", "kind": "write", "args": {"path": "", "content": ""}}),
    ("empty-cwd", {"op_id": "t:6", "kind": "bash", "args": {"command": "true", "cwd": ""}}),
    ("nul-path", {"kind": "read", "args": {"path": "a\x00b"}}),
    ("env-name", {"op_id": "t:7", "kind": "bash", "args": {"command": "true", "env": {"1A": ""}}}),
    ("no-op-id", {"kind": "write", "args": {"path": "a", "content": ""}}),
    ("read-only-op-id", {"op_id": "t:8", "kind": "read", "args": {"path": "a"}}),
    ("read-only-wait", {"kind": "ls", "args": {}, "wait_ms": 5}),
]


@pytest.mark.parametrize("body", [b for _, b in STRICT], ids=[i for i, _ in STRICT])
def test_requests_are_strict(client: httpx.Client, body: dict[str, Any]) -> None:
    assert_json_error(client.post("/v1/ops", json=body), 422)
    if "op_id" in body:
        assert client.get(f"/v1/ops/{body['op_id']}").status_code == 404


def test_whole_number_floats_are_integers_as_json_schema_says(client: httpx.Client) -> None:
    # JSON Schema calls 5406.0 an integer; refusing it would reject schema-valid requests.
    ran = client.post("/v1/ops", json={"kind": "ls", "args": {"limit": 5406.0}})
    assert ran.status_code == 200 and ran.json()["status"] == "succeeded"


def test_an_unparsable_body_is_a_documented_json_400(client: httpx.Client) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    assert_json_error(post_raw(client, deep), 400)


def test_the_schema_states_what_the_server_enforces(tmp_path: Path) -> None:
    schema = create_app(settings(tmp_path)).openapi()
    events = schema["paths"]["/v1/ops/{op_id}/events"]["get"]
    for status, response in events["responses"].items():
        media = set(response.get("content", {}))
        assert media == ({"text/event-stream"} if status == "200" else {"application/json"})
    header = next(p for p in events["parameters"] if p["name"] == "last-event-id")
    assert "pattern" in json.dumps(header["schema"])
    assert "400" in schema["paths"]["/v1/ops"]["post"]["responses"]
    parts = schema["components"]["schemas"]
    path = parts["WriteArgs"]["properties"]["path"]
    assert path["minLength"] == 1 and path["pattern"]
    assert parts["BashRequest"]["required"] == ["op_id", "kind", "args"]
    assert "op_id" not in parts["ReadRequest"]["properties"]
    env = parts["BashArgs"]["properties"]["env"]["anyOf"][0]
    assert env["propertyNames"]["pattern"] and "patternProperties" not in env


def test_file_names_that_are_not_utf8_are_listed_not_a_500(client: httpx.Client) -> None:
    made = client.post(
        "/v1/ops",
        json={
            "op_id": "n:1",
            "kind": "bash",
            "args": {"command": "mkdir -p n && printf x > n/$'caf\\xe9'"},
            "wait_ms": 10_000,
        },
    )
    assert made.status_code == 200 and made.json()["result"]["exit_code"] == 0
    for body in [
        {"kind": "ls", "args": {"path": "n"}},
        {"kind": "find", "args": {"pattern": "*", "path": "n"}},
        {"kind": "grep", "args": {"pattern": "x", "path": "n"}},
    ]:
        response = client.post("/v1/ops", json=body)
        assert response.status_code == 200, response.text
        assert "caf\ufffd" in json.dumps(response.json(), ensure_ascii=False)
