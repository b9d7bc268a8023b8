"""Listing and history over the real HTTP API of a local host: actors (paged, opening
none), conversations with forks, submissions (paged, by status) and the whole transcript;
bad cursors refused 400 with nothing written; a host without an actor index says so; the
task graph names a tool task's call."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import BaseModel

from core.faux import FauxModel, faux_message, faux_tool_call
from core.harness import ToolContext, define_extension, define_tool
from core.testing import VirtualClock
from runtimes.actor.api import ApiConfig, create_app
from runtimes.actor.lifecycle import ActorPool
from runtimes.actor.memory import MemoryActorStore
from tests.local.support import (
    MODEL,
    TOKEN,
    Running,
    file_exists,
    host_config,
    serve_in_thread,
    snapshot,
    wait_until,
)


@pytest.fixture
def running(tmp_path: Path) -> Iterator[Running]:
    with serve_in_thread(host_config(tmp_path / "data", idle_evict_s=0.3)) as r:
        yield r


@pytest.fixture
def client(running: Running) -> Iterator[httpx.Client]:
    with running.client() as c:
        yield c


def answered(client: httpx.Client, actor: str, content: str, **fields: Any) -> Any:
    r = client.post(
        f"/v1/actors/{actor}/submissions", json={"type": "input", "content": content, **fields}
    )
    assert r.status_code == 202, r.text
    state = client.get(f"/v1/actors/{actor}/submissions/{r.json()['id']}", params={"wait": 20})
    assert state.json()["status"] == "done", state.text
    return state.json()


def test_actors_are_listed_in_pages_without_being_opened(
    running: Running, client: httpx.Client
) -> None:
    for name in ("carol", "alice", "bob"):
        answered(client, name, "hi")
    assert client.get("/v1/actors").json() == {
        "actors": [{"id": "alice"}, {"id": "bob"}, {"id": "carol"}],
        "next_after": None,
    }
    first = client.get("/v1/actors", params={"limit": 2}).json()
    assert [a["id"] for a in first["actors"]] == ["alice", "bob"]
    assert first["next_after"] == "bob"
    rest = client.get("/v1/actors", params={"limit": 2, "after": "bob"}).json()
    assert rest == {"actors": [{"id": "carol"}], "next_after": None}
    # Evicted actors are still listed, and listing them opens none.
    wait_until(lambda: not running.host.active)
    assert [a["id"] for a in client.get("/v1/actors").json()["actors"]] == [
        "alice",
        "bob",
        "carol",
    ]
    assert running.host.active == frozenset()
    assert client.get("/v1/actors", params={"after": "../x"}).status_code == 422
    assert client.get("/v1/actors", params={"limit": 0}).status_code == 422
    assert httpx.get(f"{running.url}/v1/actors").status_code == 401


def test_conversations_submissions_and_the_whole_transcript(
    running: Running, client: httpx.Client
) -> None:
    first = answered(client, "alice", "hello", request_id="r1")
    answered(client, "alice", "tools:1")
    forked = client.post(
        "/v1/actors/alice/conversations/1/fork", json={"at_entry": first["answer"]["entry"]["id"]}
    )
    assert forked.status_code == 201
    child = forked.json()["conversation_id"]
    conversations = client.get("/v1/actors/alice/conversations").json()
    assert conversations["next"] is None
    assert [c["id"] for c in conversations["conversations"]] == [1, child]
    assert conversations["conversations"][1]["parent"] == {
        "conversation_id": 1,
        "at_entry": first["answer"]["entry"]["id"],
    }

    subs = client.get("/v1/actors/alice/conversations/1/submissions").json()["submissions"]
    assert [(s["type"], s["status"]) for s in subs] == [("input", "done"), ("input", "done")]
    assert subs[0]["request_id"] == "r1" and isinstance(subs[0]["created_at"], int)
    assert subs[0]["answer_entry"] == first["answer"]["entry"]["id"]
    page = client.get(
        "/v1/actors/alice/conversations/1/submissions", params={"limit": 1, "order": "desc"}
    ).json()
    assert [s["id"] for s in page["submissions"]] == [subs[1]["id"]]
    more = client.get(
        "/v1/actors/alice/conversations/1/submissions",
        params={"limit": 1, "order": "desc", "cursor": page["next"]},
    ).json()
    assert [s["id"] for s in more["submissions"]] == [subs[0]["id"]]
    none = client.get(
        "/v1/actors/alice/conversations/1/submissions", params={"status": "queued"}
    ).json()
    assert none == {"submissions": [], "next": None}

    entries = client.get("/v1/actors/alice/conversations/1/entries").json()["entries"]
    kinds = [e["kind"] for e in entries]
    assert kinds == ["user", "assistant", "user", "assistant", "tool_result", "assistant"]
    assert entries[3]["message"]["content"][0]["type"] == "tool_call"
    # A fork sees its parent's history up to the fork point.
    seen = client.get(f"/v1/actors/alice/conversations/{child}/entries").json()["entries"]
    assert [e["kind"] for e in seen] == ["user", "assistant"]


def test_bad_cursors_and_unknown_records_are_refused_and_write_nothing(
    running: Running, client: httpx.Client
) -> None:
    answered(client, "alice", "hello")
    wait_until(lambda: not running.host.active)
    db = running.data_dir / "alice.sqlite"
    before = snapshot(db)
    base = "/v1/actors/alice/conversations"
    garbage = client.get(base, params={"cursor": "bm90LWpzb24"})  # base64 of "not-json"
    assert garbage.status_code == 400 and garbage.json()["error"]["code"] == "invalid_cursor"
    # A well-formed cursor the API did not hand out (unsigned) is refused too; the host
    # kit's check_forged_cursors_are_refused tries every listing on every host.
    made_up = json.dumps({"scan": "submissions", "filters": {}, "order": "asc", "after": 1})
    other = base64.urlsafe_b64encode(made_up.encode()).decode().rstrip("=")
    wrong = client.get(f"{base}/1/submissions", params={"cursor": other})
    assert wrong.status_code == 400 and wrong.json()["error"]["code"] == "invalid_cursor"
    assert client.get(f"{base}/1/submissions", params={"status": "lost"}).status_code == 422
    assert client.get(f"{base}/99/entries").json()["error"]["code"] == "not_found"
    unknown = client.get("/v1/actors/nobody/conversations")
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "unknown_actor"
    assert snapshot(db) == before
    assert not (running.data_dir / "nobody.sqlite").exists()


async def test_a_host_without_an_actor_index_answers_501(tmp_path: Path) -> None:
    class Unlisted:  # an ActorStore without names(): the pool cannot list
        def __init__(self) -> None:
            self.inner = MemoryActorStore()

        async def open(self, name: str, *, create: bool) -> Any:
            return await self.inner.open(name, create=create)

        def exists(self, name: str) -> bool:
            return self.inner.exists(name)

    host = ActorPool(Unlisted(), host_config(tmp_path).actor, clock=VirtualClock())
    app = create_app(host, ApiConfig(TOKEN))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
        r = await c.get("/v1/actors", headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 501 and r.json()["error"]["code"] == "not_supported"


class GateArgs(BaseModel):
    gate: str


async def _hold(args: GateArgs, ctx: ToolContext) -> str:
    while not file_exists(args.gate):  # noqa: ASYNC110 - the test makes the file
        await asyncio.sleep(0.02)
    return "held"


def test_the_task_graph_names_a_running_tool_its_arguments_and_when_it_started(
    tmp_path: Path,
) -> None:
    gate = tmp_path / "gate"
    tool = define_tool("hold", description="Hold.", parameters=GateArgs, execute=_hold)
    model = FauxModel(
        [faux_message(faux_tool_call("hold", {"gate": str(gate)}, id="c1")), faux_message("ok")]
    )
    config = host_config(
        tmp_path / "data",
        models=model,
        extensions=[define_extension("gated", tools=[tool])],
        default_agent={"model": MODEL, "tools": ["hold"]},
    )
    with serve_in_thread(config) as running, running.client() as client:
        r = client.post("/v1/actors/t/submissions", json={"type": "input", "content": "go"})
        assert r.status_code == 202
        tasks: list[Any] = []

        def tool_running() -> bool:
            tasks[:] = client.get("/v1/actors/t/tasks").json()["tasks"]
            # Past its intent commit: reserved, the unsafe call runs its "call" phase first.
            return any(
                t["kind"] == "perdure.tool" and t["state"] == "running" and t["phase"] == "execute"
                for t in tasks
            )

        wait_until(tool_running)
        [call] = [t for t in tasks if t["kind"] == "perdure.tool"]
        [generation] = [t for t in tasks if t["kind"] == "perdure.generation"]
        assert call["tool"] == "hold" and call["arguments"] == {"gate": str(gate)}
        assert call["replay"] == "unsafe" and generation["replay"] is None
        assert call["owner"] == generation["id"] and call["phase"] == "execute"
        assert call["attempt"] == 1 and isinstance(call["started_at"], int)
        assert generation["tool"] is None and generation["phase"] == "tools"
        gate.touch()
        state = client.get(f"/v1/actors/t/submissions/{r.json()['id']}", params={"wait": 20})
        assert state.json()["status"] == "done"
