"""The shared lifecycle's poisoned-session rule, on the in-memory host: after an
uncertain storage failure the actor is parked with a wake soon after, and the next
request reopens it from storage."""

from __future__ import annotations

import pytest

from core.testing import CommitFault, FaultyStorage, VirtualClock
from runtimes.actor.lifecycle import POISONED_RETRY_MS
from runtimes.actor.memory import MemoryActorStore, MemoryHost
from runtimes.actor.testing import KIT_AGENT, kit_config


class FaultyStore(MemoryActorStore):
    """Wraps the first storage it opens, so a test can fail one of its commits."""

    faulty: FaultyStorage | None = None

    async def open(self, name: str, *, create: bool):  # type: ignore[no-untyped-def]
        lease = await super().open(name, create=create)
        if self.faulty is None:
            self.faulty = FaultyStorage(lease.storage)
            lease.storage = self.faulty  # type: ignore[assignment]
        return lease


async def test_a_poisoned_actor_is_parked_and_reopened_from_storage() -> None:
    clock = VirtualClock()
    store = FaultyStore()
    host = MemoryHost(kit_config(), clock=clock, store=store)
    await host.start()
    try:
        async with host.use("p", create=True) as harness:
            root = await harness.root(agent=dict(KIT_AGENT))
            first = await (await root.submit("hello")).wait()
            assert first.status == "done"
            await harness.wait_for_idle()
        assert store.faulty is not None
        store.faulty.add(CommitFault("during"))  # uncertain: the session poisons itself
        with pytest.raises(Exception):  # noqa: B017, PT011 - whatever the failure surfaces as
            async with host.use("p") as harness:
                await (await harness.conversation(1)).submit("lost")
        assert "p" not in host.active  # parked at once, not left open and untrusted
        assert host.wakes["p"] == clock.now() + POISONED_RETRY_MS
        async with host.use("p") as harness:  # reopened from storage
            assert harness.session.poisoned is None
            again = await (await harness.conversation(1)).submit("again")
            assert (await again.wait()).status == "done"
            users = [
                e.message["content"]
                for e in (await (await harness.conversation(1)).entries(order="asc")).items
                if e.kind == "user" and isinstance(e.message, dict)
            ]
        assert users == ["hello", "again"]  # the failed commit wrote nothing
    finally:
        await host.close()


async def test_the_memory_host_lists_its_actors_in_order_without_opening_them() -> None:
    host = MemoryHost(kit_config(), clock=VirtualClock())
    await host.start()
    try:
        for name in ("m2", "m1", "m3"):
            async with host.use(name, create=True) as harness:
                await (await (await harness.root(agent=dict(KIT_AGENT))).submit("hi")).wait()
            await host.evict(name, force=True)
        assert await host.actors() == ["m1", "m2", "m3"]
        assert await host.actors(after="m1", limit=1) == ["m2"]
        assert host.active == frozenset()
    finally:
        await host.close()
