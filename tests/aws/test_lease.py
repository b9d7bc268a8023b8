"""The fenced lease on the head item: acquire, renew at commit points, release."""

from __future__ import annotations

import pytest

from core.testing.clock import VirtualClock
from runtimes.aws import AwsResources, Lease, LeaseHeld, LeaseLost
from runtimes.aws.keys import ActorKeys

MINUTE = 60_000


def _head(aws: AwsResources, actor: str = "a1") -> dict[str, object]:
    item = aws.dynamodb.get_item(
        TableName=aws.table, Key=ActorKeys(actor).head(), ConsistentRead=True
    )["Item"]
    return {k: next(iter(v.values())) for k, v in item.items()}


async def test_acquire_bumps_the_epoch_and_refuses_a_second_owner_until_expiry(
    aws: AwsResources,
) -> None:
    clock = VirtualClock()
    a = Lease(aws, "a1", "owner-a", clock.now, duration_ms=MINUTE)
    b = Lease(aws, "a1", "owner-b", clock.now, duration_ms=MINUTE)
    grant = await a.acquire()
    assert (grant.epoch, grant.seq, grant.owner) == (1, 0, "owner-a")
    assert grant.expires_at == clock.now() + MINUTE
    with pytest.raises(LeaseHeld) as held:
        await b.acquire()
    assert held.value.owner == "owner-a" and held.value.expires_at == grant.expires_at
    # Already ours: granted again, with a new epoch that fences our own older session.
    assert (await a.acquire()).epoch == 2
    clock.advance(MINUTE - 1)
    with pytest.raises(LeaseHeld):
        await b.acquire()
    clock.advance(2)
    assert (await b.acquire()).epoch == 3
    assert _head(aws)["owner"] == "owner-b" and _head(aws)["epoch"] == "3"
    with pytest.raises(LeaseLost):
        await a.renew()  # its epoch is gone
    with pytest.raises(LeaseLost):
        await a.renew()  # and it stays gone: no grant left to renew


async def test_renewal_moves_expiry_and_release_frees_the_lease_at_once(aws: AwsResources) -> None:
    clock = VirtualClock()
    a = Lease(aws, "a1", "owner-a", clock.now, duration_ms=MINUTE)
    b = Lease(aws, "a1", "owner-b", clock.now, duration_ms=MINUTE)
    await a.acquire()
    clock.advance(MINUTE - 1)
    await a.renew()  # a commit point with nothing to commit
    assert a.grant.expires_at == clock.now() + MINUTE
    clock.advance(MINUTE - 1)
    with pytest.raises(LeaseHeld):
        await b.acquire()  # the renewal kept it
    assert await a.release() is True
    assert await a.release() is False  # nothing left to release
    grant = await b.acquire()  # no wait for expiry
    assert grant.epoch == 2  # the head survives release: the epoch keeps counting
    assert "owner" in _head(aws)


async def test_a_former_holder_cannot_release_the_new_holders_lease(aws: AwsResources) -> None:
    clock = VirtualClock()
    a = Lease(aws, "a1", "owner-a", clock.now, duration_ms=MINUTE)
    b = Lease(aws, "a1", "owner-b", clock.now, duration_ms=MINUTE)
    await a.acquire()
    clock.advance(MINUTE + 1)
    await b.acquire()
    assert await a.release() is False
    assert _head(aws)["owner"] == "owner-b"
    # Leases are per actor: another actor's head is independent.
    assert (await Lease(aws, "a2", "owner-a", clock.now).acquire()).epoch == 1
