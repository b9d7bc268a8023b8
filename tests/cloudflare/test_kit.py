"""The host scenario kit on the Durable Object host (one object per actor, on the
``ctx.storage`` stand-in), and the stand-in namespace itself."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from core.testing import VirtualClock
from runtimes.actor.testing import HOST_CHECKS, KitTarget, check_actor_listing_pages, kit_config
from tests.cloudflare.kit_target import DurableNamespace


@pytest.fixture
def namespace(tmp_path: Path) -> Iterator[DurableNamespace]:
    target = DurableNamespace(tmp_path)
    yield target
    target.close()


@pytest.mark.parametrize("check", HOST_CHECKS, ids=lambda c: c.__name__)
async def test_durable_object_host(
    check: Callable[[KitTarget], Awaitable[None]], namespace: DurableNamespace
) -> None:
    await check(namespace)


@pytest.mark.slow
@pytest.mark.timeout(900)
async def test_a_thousand_actors_are_listed_in_pages_of_a_hundred(tmp_path: Path) -> None:
    """The kit's listing check at its full size: 1,000 actors, pages of 100, some
    created during each page read, listed from the index objects (``slow``)."""
    namespace = DurableNamespace(tmp_path, listed_actors=1000)
    try:
        await check_actor_listing_pages(namespace)
    finally:
        namespace.close()


async def test_each_actor_is_its_own_object_bound_to_its_name(namespace: DurableNamespace) -> None:
    host = namespace.host(kit_config(), VirtualClock())
    async with host.use("alpha", create=True) as harness:
        await harness.root(agent={"model": "faux/faux-1"})
    async with host.use("beta", create=True) as harness:
        await harness.root(agent={"model": "faux/faux-1"})
    assert namespace.exists("alpha") and namespace.exists("beta")
    assert namespace.digest("alpha") != namespace.digest("beta")
    await host.close()
    # The object of "alpha" holds alpha only: asked for another actor it has none.
    from runtimes.actor import UnknownActor
    from runtimes.cloudflare.actor import DurableActor

    obj = DurableActor(
        namespace.home("alpha").open(), kit_config(), clock=VirtualClock(), alarm_report=print
    )
    assert obj.actor_name == "alpha"
    with pytest.raises(UnknownActor):
        async with obj.use("beta", create=True):
            pass
    await obj.close()
