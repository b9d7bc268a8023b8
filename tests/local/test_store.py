"""The local store opens an actor (its lock and its file) in one worker job: a caller
cancelled meanwhile leaves nothing taken behind."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from runtimes.actor import ActorLocked, UnknownActor
from runtimes.local.host import ActorLock, LocalStore, actor_paths


async def test_an_open_cancelled_on_its_way_releases_the_lock_and_the_new_file(
    tmp_path: Path,
) -> None:
    # One worker thread: a job queued after the open's runs once the open has ended.
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(1))
    store = LocalStore(tmp_path)
    opening = asyncio.ensure_future(store.open("alice", create=True))
    await asyncio.sleep(0)  # the worker job is queued
    opening.cancel()
    with pytest.raises(asyncio.CancelledError):
        await opening
    db, lock_path = actor_paths(tmp_path, "alice")
    assert await asyncio.to_thread(db.exists)  # the open went on and created the file
    for _ in range(500):  # then its lease is let go
        if not db.exists():
            break
        await asyncio.sleep(0.01)
    assert not db.exists()  # a new actor nobody committed to is discarded
    ActorLock.acquire(lock_path).release(unlink=True)  # and its lock is free


async def test_an_open_holds_the_lock_until_released(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    with pytest.raises(UnknownActor):
        await store.open("bob", create=False)
    lease = await store.open("bob", create=True)
    assert lease.fresh
    with pytest.raises(ActorLocked):
        await store.open("bob", create=True)
    await lease.storage.close()
    await lease.release(discard=False)
    again = await store.open("bob", create=False)
    assert not again.fresh
    await again.storage.close()
    await again.release(discard=False)
