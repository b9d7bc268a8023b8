"""``perdure ls`` (:class:`~runtimes.client.ActorClient`'s ``actors()``) paging the
Worker's ``GET /v1/actors`` as its front door answers it, from the index objects."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from runtimes.actor.testing import KIT_TOKEN
from runtimes.actor.tokens import SigningKeys
from runtimes.client import ActorClient, RequestRefused
from runtimes.cloudflare.front_door import FrontDoor, Refusal, RouteTable
from runtimes.cloudflare.index import ActorIndex
from runtimes.cloudflare.listing import list_at_door
from tests.cloudflare.kit_target import IndexObjects

URL = "https://worker.example"


@pytest.fixture
def objects(tmp_path: Path) -> Iterator[IndexObjects]:
    index = IndexObjects(tmp_path / "index")
    yield index
    index.close()


class _WorkerListing(httpx.AsyncBaseTransport):
    """The Worker's ``GET /v1/actors`` (its front door's listing) as an httpx transport."""

    def __init__(self, index: ActorIndex) -> None:
        self.index = index
        self.door = FrontDoor(KIT_TOKEN, RouteTable(), keys=SigningKeys.for_host(KIT_TOKEN))
        self.paths: list[str] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/actors", request.url
        self.paths.append(str(request.url.raw_path, "ascii"))
        query, headers = request.url.query.decode(), dict(request.headers)
        answer = await list_at_door(self.door, request.method, query, headers, self.index)
        if isinstance(answer, Refusal):
            return httpx.Response(answer.status, json=answer.body())
        return httpx.Response(200, json=answer)


async def test_perdure_ls_pages_the_worker_listing(objects: IndexObjects) -> None:
    names = [f"user-{n:02d}" for n in range(23)]
    for name in reversed(names):
        await objects.index().add(name)
    transport = _WorkerListing(objects.index())
    async with ActorClient(URL, KIT_TOKEN, transport=transport, page_size=10) as client:
        assert [name async for name in client.actors()] == names
    assert transport.paths == [
        "/v1/actors?limit=10",
        "/v1/actors?limit=10&after=user-09",
        "/v1/actors?limit=10&after=user-19",
    ]


async def test_perdure_ls_with_a_scoped_token_is_refused(objects: IndexObjects) -> None:
    scoped = SigningKeys.for_host(KIT_TOKEN).mint("user-00", "read", 600)
    async with ActorClient(URL, scoped, transport=_WorkerListing(objects.index())) as client:
        with pytest.raises(RequestRefused) as refused:
            [name async for name in client.actors()]
    assert (refused.value.status, refused.value.code) == (403, "forbidden")
