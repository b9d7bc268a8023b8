"""``perdure ls`` (``HostClient.actors``) paging the Worker's ``GET /v1/actors`` as its
front door answers it from the index objects. CPython only: the client is synchronous,
so each request runs the Worker's listing on an ``asyncio.run`` loop of its own, which
Pyodide's pytest cannot give (``tests/pyodide/inside/pytest_main.py`` leaves it out)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from runtimes.actor.testing import KIT_TOKEN
from runtimes.actor.tokens import SigningKeys
from runtimes.cli.history import HostClient, HostUnavailable
from runtimes.cloudflare.front_door import FrontDoor, Refusal, RouteTable
from runtimes.cloudflare.index import ActorIndex
from runtimes.cloudflare.listing import list_at_door
from tests.cloudflare.kit_target import IndexObjects


@pytest.fixture
def objects(tmp_path: Path) -> Iterator[IndexObjects]:
    index = IndexObjects(tmp_path / "index")
    yield index
    index.close()


def _door() -> FrontDoor:
    return FrontDoor(KIT_TOKEN, RouteTable(), keys=SigningKeys.for_host(KIT_TOKEN))


class _WorkerListing(httpx.BaseTransport):
    """The Worker's ``GET /v1/actors`` (its front door's listing) as an httpx transport."""

    def __init__(self, index: ActorIndex) -> None:
        self.index = index
        self.paths: list[str] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/actors", request.url
        self.paths.append(str(request.url.raw_path, "ascii"))
        query, headers = request.url.query.decode(), dict(request.headers)
        answer = asyncio.run(list_at_door(_door(), request.method, query, headers, self.index))
        if isinstance(answer, Refusal):
            return httpx.Response(answer.status, json=answer.body())
        return httpx.Response(200, json=answer)


def test_perdure_ls_pages_the_worker_listing(objects: IndexObjects) -> None:
    names = [f"user-{n:02d}" for n in range(23)]

    async def add() -> None:
        for name in reversed(names):
            await objects.index().add(name)

    asyncio.run(add())
    transport = _WorkerListing(objects.index())
    with HostClient("https://worker.example", KIT_TOKEN, transport=transport) as host:
        assert list(host.actors(page_size=10)) == names
    assert transport.paths == [
        "/v1/actors?limit=10",
        "/v1/actors?limit=10&after=user-09",
        "/v1/actors?limit=10&after=user-19",
    ]


def test_perdure_ls_with_a_scoped_token_is_refused(objects: IndexObjects) -> None:
    scoped = SigningKeys.for_host(KIT_TOKEN).mint("user-00", "read", 600)
    transport = _WorkerListing(objects.index())
    with (
        HostClient("https://worker.example", scoped, transport=transport) as host,
        pytest.raises(HostUnavailable, match="403 forbidden"),
    ):
        list(host.actors())
