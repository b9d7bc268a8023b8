"""The Worker's index of its actors on CPython: the index objects (on the ``ctx.storage``
stand-in), the front door's ``GET /v1/actors`` answered from them as the app answers it,
and each actor's object adding its actor once its first commit has landed — never for a
refused first request, and again after a failure or a crash, by the alarm."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest

from core.testing import VirtualClock
from runtimes.actor.api import ApiConfig, create_app
from runtimes.actor.api.history import MAX_PAGE as APP_MAX_PAGE
from runtimes.actor.memory import MemoryHost
from runtimes.actor.testing import KIT_AGENT, KIT_TOKEN, kit_config
from runtimes.actor.tokens import SigningKeys
from runtimes.cloudflare.actor import DurableActor
from runtimes.cloudflare.alarm import HEARTBEAT_MS
from runtimes.cloudflare.front_door import FrontDoor, Refusal, RouteTable
from runtimes.cloudflare.index import INDEX_SHARDS, ActorIndex, IndexShard, ShardStub, shard_of
from runtimes.cloudflare.listing import MAX_PAGE, list_at_door
from tests.cloudflare.kit_target import IndexObjects
from tests.cloudflare.standin import DurableObjectHome

AUTH = {"authorization": f"Bearer {KIT_TOKEN}"}
NAMES = ["a", "a-1", "b", "B", "c_2", "zz", "0"]


@pytest.fixture
def objects(tmp_path: Path) -> Iterator[IndexObjects]:
    index = IndexObjects(tmp_path / "index")
    yield index
    index.close()


def test_a_shard_keeps_each_id_once_in_order(tmp_path: Path) -> None:
    home = DurableObjectHome(tmp_path / "shard.sqlite")
    shard = IndexShard(home.open())
    for name in ("b", "a", "c", "a"):
        shard.add(name)
    assert shard.names(None, 10) == ["a", "b", "c"]
    assert shard.names("a", 1) == ["b"]
    again = IndexShard(home.open())  # a new isolate: the table is there, unchanged
    assert again.names("b", 10) == ["c"]
    home.close()


def test_ids_spread_over_every_shard() -> None:
    counts = Counter(shard_of(f"user-{n}") for n in range(1600))
    assert set(counts) == set(range(INDEX_SHARDS))
    assert max(counts.values()) < 2 * 1600 // INDEX_SHARDS, counts  # none takes most
    assert shard_of("user-1") == shard_of("user-1")


async def test_pages_are_merged_across_shards(objects: IndexObjects) -> None:
    index = objects.index()
    names = [f"actor-{n:03d}" for n in range(250)]
    for name in reversed(names):
        await index.add(name)
    pages, after = [], None
    while True:
        page = await index.names(after=after, limit=100)
        pages.append(page)
        if len(page) < 100:
            break
        after = page[-1]
    assert [len(p) for p in pages] == [100, 100, 50]
    assert [n for p in pages for n in p] == names


def test_the_door_pages_as_far_as_the_app() -> None:
    assert MAX_PAGE == APP_MAX_PAGE


def _door() -> FrontDoor:
    return FrontDoor(KIT_TOKEN, RouteTable(), keys=SigningKeys.for_host(KIT_TOKEN))


async def _app_answers(queries: list[str]) -> list[tuple[int, Any]]:
    host = MemoryHost(kit_config(), clock=VirtualClock())
    for name in NAMES:
        async with host.use(name, create=True) as harness:
            await harness.root(agent=dict(KIT_AGENT))
    app = create_app(host, ApiConfig(KIT_TOKEN))
    answers = []
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://app", headers=AUTH
    ) as client:
        for query in queries:
            r = await client.get(f"/v1/actors?{query}")
            answers.append((r.status_code, r.json()))
    await host.close()
    return answers


async def test_the_door_answers_every_query_as_the_app_does(objects: IndexObjects) -> None:
    index = objects.index()
    for name in NAMES:
        await index.add(name)
    queries = [
        "",
        "limit=2",
        "limit=2&after=a-1",
        urlencode({"after": "zz"}),
        "limit=1000",
        "limit=0",
        "limit=1001",
        "limit=x",
        "limit=",
        "limit=5.0",
        "limit=%205",
        "limit=3&limit=1",
        "after=",
        urlencode({"after": "no/id"}),
        urlencode({"after": "x" * 65}),
        "junk=1&limit=2",
    ]
    door = _door()
    ours = []
    for query in queries:
        answer = await list_at_door(door, "GET", query, AUTH, index)
        ours.append(
            (answer.status, answer.body()) if isinstance(answer, Refusal) else (200, answer)
        )
    assert ours == await _app_answers(queries)


async def test_only_the_operator_lists_and_nothing_is_read_for_a_refusal(
    objects: IndexObjects,
) -> None:
    door = _door()
    index = objects.index()
    scoped = SigningKeys.for_host(KIT_TOKEN).mint("a", "admin", 600)
    cases = [
        ("GET", {}, 401, "unauthorized"),
        ("GET", {"authorization": "Bearer not-the-token-0123456789"}, 401, "unauthorized"),
        ("GET", {"authorization": f"Bearer {scoped}"}, 403, "forbidden"),
        ("POST", AUTH, 405, "method_not_allowed"),
    ]
    for method, headers, status, code in cases:
        answer = await list_at_door(door, method, "limit=5", headers, index)
        assert isinstance(answer, Refusal), answer
        assert (answer.status, answer.code) == (status, code), answer
    assert not objects.live  # no index object was even reached


class _FlakyShard:
    """An index object's stub that fails while its index is ``down``."""

    def __init__(self, flaky: _Flaky, shard: ShardStub) -> None:
        self.flaky = flaky
        self.shard = shard

    async def add(self, actor: str) -> None:
        if self.flaky.down:
            raise ConnectionError("the index object is unreachable")
        await self.shard.add(actor)

    async def names(self, after: str | None, limit: int) -> list[str]:
        return await self.shard.names(after, limit)


class _Flaky:
    def __init__(self, objects: IndexObjects) -> None:
        self.down = False
        self.index = ActorIndex(lambda n: _FlakyShard(self, objects.shard(n)))


def _object(
    home: DurableObjectHome, index: ActorIndex, reports: list[str], clock: VirtualClock
) -> DurableActor:
    config = replace(kit_config(), report=lambda actor, error: reports.append(str(error)))
    return DurableActor(
        home.open(), config, clock=clock, alarm_report=print, actor="alpha", index=index
    )


async def test_an_actor_is_indexed_by_its_first_commit_never_by_a_refused_request(
    tmp_path: Path, objects: IndexObjects
) -> None:
    home = DurableObjectHome(tmp_path / "alpha.sqlite")
    reports: list[str] = []
    obj = _object(home, objects.index(), reports, VirtualClock())
    with pytest.raises(RuntimeError):
        async with obj.use("alpha", create=True):
            raise RuntimeError("refused before anything was committed")
    assert await objects.index().names() == [] and obj.durable.name is None
    async with obj.use("alpha", create=True) as harness:
        await harness.root(agent=dict(KIT_AGENT))
    # Listed before the request that committed it has returned.
    assert await objects.index().names() == ["alpha"] and obj.durable.indexed
    await obj.close()
    assert reports == []
    home.close()


async def test_an_index_that_fails_is_retried_by_the_heartbeat_alarm(
    tmp_path: Path, objects: IndexObjects
) -> None:
    home = DurableObjectHome(tmp_path / "alpha.sqlite")
    clock = VirtualClock()
    flaky = _Flaky(objects)
    flaky.down = True
    reports: list[str] = []
    obj = _object(home, flaky.index, reports, clock)
    async with obj.use("alpha", create=True) as harness:
        await harness.root(agent=dict(KIT_AGENT))  # the request itself succeeds
    await obj.settle()
    assert reports == ["the index object is unreachable"]
    assert await objects.index().names() == []
    # Idle, nothing to wake for: still armed, at the heartbeat, to add it later.
    assert home.alarm is not None and home.alarm <= clock.now() + HEARTBEAT_MS
    await obj.evict("alpha", force=True)
    assert home.alarm is not None and home.alarm <= clock.now() + HEARTBEAT_MS
    # The isolate goes; the index is back; the alarm comes, on a new isolate.
    flaky.down = False
    again = _object(home, flaky.index, reports, clock)
    clock.advance(HEARTBEAT_MS)
    home.alarm = None
    await again.alarm()
    await again.settle()
    assert await objects.index().names() == ["alpha"] and again.durable.indexed
    await again.evict("alpha", force=True)
    assert home.alarm is None  # indexed and idle: nothing left to wake for
    await again.close()
    home.close()


async def test_listing_many_actors_wakes_none_of_their_objects(
    tmp_path: Path, objects: IndexObjects
) -> None:
    """The Worker's page comes from the index objects alone."""
    created = []
    for n in range(30):
        home = DurableObjectHome(tmp_path / f"a{n}.sqlite")
        obj = DurableActor(
            home.open(),
            kit_config(),
            clock=VirtualClock(),
            alarm_report=print,
            actor=f"a{n:02d}",
            index=objects.index(),
        )
        async with obj.use(f"a{n:02d}", create=True) as harness:
            await harness.root(agent=dict(KIT_AGENT))
        await obj.close()
        home.close()
        created.append(f"a{n:02d}")
    answer = await asyncio.wait_for(
        list_at_door(_door(), "GET", "limit=100", AUTH, objects.index()), 10
    )
    assert answer == {"actors": [{"id": n} for n in created], "next_after": None}
