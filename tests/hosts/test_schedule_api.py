"""The schedules routes' answers (docs/design.md § The HTTP API), on the in-memory host:
each kind of bad schedule is a 422 naming what is wrong, before the actor is opened; the
listing shows the next occurrences in ISO-8601 with the zone's offset."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest

from core.testing import VirtualClock
from runtimes.actor.api.app import ApiConfig, create_app
from runtimes.actor.memory import MemoryHost
from runtimes.actor.testing import KIT_TOKEN, kit_config

PATH = "/v1/actors/cal/conversations/1/schedules"


@asynccontextmanager
async def serving() -> AsyncIterator[httpx.AsyncClient]:
    # 1 March 2026, 12:00 UTC: Vienna changes to summer time on 29 March.
    host = MemoryHost(kit_config(), clock=VirtualClock(1_772_366_400_000))
    app = create_app(host, ApiConfig(KIT_TOKEN))
    await host.start()
    headers = {"authorization": f"Bearer {KIT_TOKEN}"}
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://m", headers=headers) as c:
        yield c
    await host.close()


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"message": "x", "cron": "0 9 * *"}, "five fields"),
        ({"message": "x", "cron": "0 9 * * mon-xyz"}, "invalid cron expression"),
        ({"message": "x", "cron": "0 9 * * *", "timezone": "Europe/Vienne"}, "unknown time zone"),
        ({"message": "x", "every": 30}, "greater than or equal to 60"),
        ({"message": "x", "every": "30s"}, "at least 60 seconds"),
        ({"message": "x", "cron": "0 9 * * *", "every": 60}, "exactly one of 'cron' and 'every'"),
        ({"message": "x"}, "exactly one of 'cron' and 'every'"),
    ],
)
async def test_a_bad_schedule_is_a_422_saying_what_is_wrong(
    body: dict[str, object], says: str
) -> None:
    async with serving() as client:
        r = await client.post(PATH, json=body)
        assert r.status_code == 422, r.text
        assert says in r.json()["error"]["message"], r.text
        assert (await client.get("/v1/actors")).json()["actors"] == []  # nothing was opened


async def test_the_listing_shows_the_next_occurrences_with_the_zone_s_offset() -> None:
    async with serving() as client:
        await _listing(client)


async def _listing(client: httpx.AsyncClient) -> None:
    r = await client.post("/v1/actors/cal/submissions", json={"type": "input", "content": "hi"})
    assert r.status_code == 202, r.text
    body = {"message": "report", "cron": "0 9 28-31 3 *", "timezone": "Europe/Vienna"}
    made = await client.post(PATH, json=body)
    assert made.status_code == 201, made.text
    (listed,) = (await client.get(PATH)).json()["schedules"]
    assert listed["next"] == [
        "2026-03-28T09:00:00+01:00",
        "2026-03-29T09:00:00+02:00",
        "2026-03-30T09:00:00+02:00",
    ]
    assert listed["id"] == made.json()["id"] and listed["status"] == "active"
    gone = await client.delete(f"{PATH}/{listed['id']}")
    assert gone.status_code == 200 and gone.json()["next"] == [], gone.text
    missing = await client.delete(f"{PATH}/{listed['id']}")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"


async def test_a_method_the_path_lacks_is_405_naming_every_method_it_has() -> None:
    async with serving() as client:
        r = await client.request("OPTIONS", PATH)
        assert r.status_code == 405 and r.json()["error"]["code"] == "method_not_allowed"
        assert r.headers["allow"] == "GET, POST", r.headers
        r = await client.put("/v1/actors/cal/timers")
        assert r.status_code == 405 and r.headers["allow"] == "GET", r.headers
