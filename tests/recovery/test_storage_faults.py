"""Storage faults: disk full, I/O errors, an uncertain (landed but unacknowledged) commit,
a torn WAL write and a locked database.

Each test: the session is poisoned (every later call fails until the storage is
reopened), nothing half-applied is visible, reopening recovers the last committed state
and the conversation goes on — an input submitted after the reopen is answered, and
inputs accepted before are settled exactly once. The full consistency check (with
``PRAGMA integrity_check`` for SQLite) runs at the end of each.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.errors import SessionPoisoned, StorageRejected
from core.faux import faux_message
from core.harness import Harness
from core.records import SubmissionRecord
from core.storage import EntryQuery, SubmissionQuery
from core.storage.sqlite import SqliteStorage
from core.testing.consistency import SettlementLog, check_consistency
from core.testing.wrappers import CommitFault
from runtimes.actor.sqlite import Sqlite3Database
from tests.recovery.support import MODEL, World


async def _wait(sub: object, timeout: float = 5.0) -> SubmissionRecord:
    return await asyncio.wait_for(sub.wait(), timeout)  # type: ignore[attr-defined]


async def _until_poisoned(h: Harness, timeout: float = 5.0) -> BaseException:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while h.session.poisoned is None:
        assert loop.time() < deadline, "the session was never poisoned"
        await asyncio.sleep(0.001)
    return h.session.poisoned


async def _poisoned_everywhere(h: Harness, sub_id: int) -> None:
    """Every later call fails, and a waiter is told instead of hanging (a submission the
    storage already shows settled is simply returned: reads see committed state)."""
    root = await h.conversation(1)
    with pytest.raises(SessionPoisoned):
        await root.submit("after the failure")
    with pytest.raises(SessionPoisoned):
        await root.compact()
    if not h.engine.scheduler.idle():  # work was in flight: it will never finish here
        with pytest.raises(SessionPoisoned):
            await asyncio.wait_for(h.wait_for_idle(), 5)
    sub = await h.submission(sub_id)
    assert sub is not None
    if (await sub.status()).status in ("done", "unanswered"):
        assert (await _wait(sub)).status in ("done", "unanswered")
    else:
        with pytest.raises(SessionPoisoned):
            await _wait(sub)


async def _goes_on(world: World, before: list[int]) -> None:
    """Reopen: the conversation continues, earlier inputs settle exactly once."""
    h = await world.open()
    h.resume()
    root = await h.conversation(1)
    after = await _wait(await root.submit("are you still there?"))
    assert after.status == "done"
    await world.settle()
    for sub_id in before:
        record = await h.session.storage.submission(sub_id)
        assert record is not None and record.status in ("done", "unanswered"), record
    problems = await world.problems(settled=True)
    assert not problems, problems
    await world.close()


# --------------------------------------------------------------------------- disk full


async def _limited_storage(path: Path, extra_pages: int) -> SqliteStorage:
    """The real file, on a connection that may grow it by ``extra_pages`` pages only."""
    db = Sqlite3Database.open(path)
    await db.execute("PRAGMA busy_timeout = 100")
    pages = int((await db.fetch("PRAGMA page_count"))[0][0])
    await db.execute(f"PRAGMA max_page_count = {pages + extra_pages}")
    return await SqliteStorage.open(db)


async def test_disk_full_mid_run_poisons_and_reopening_recovers(tmp_path: Path) -> None:
    world = World(tmp_path, "sqlite")
    h = await world.open()
    root = await h.root(agent={"model": MODEL})
    first = await _wait(await root.submit("a small question"))
    assert first.status == "done"
    await world.close()

    # The next answer is far bigger than the room left: its commit hits SQLITE_FULL.
    world.faux.token_size = 100_000  # stream it in a few deltas
    world.say(faux_message("x" * 400_000))
    h = await world.open_on(await _limited_storage(world.path, extra_pages=4))
    root = await h.conversation(1)
    sub = await root.submit("a question with a huge answer")
    error = await _until_poisoned(h)
    assert "full" in str(error).lower(), error
    await _poisoned_everywhere(h, sub.id)
    await world.crash()

    # Nothing half-applied: the input is placed, no answer entry, no settled run.
    storage = await world.storage()
    record = await storage.submission(sub.id)
    assert record is not None and record.status == "placed"
    entries = (await storage.scan_entries(EntryQuery(1, order="asc", limit=100))).items
    assert not any("x" * 1000 in str(e.message) for e in entries)
    assert not await check_consistency(storage)
    await storage.close()

    await _goes_on(world, [first.id, sub.id])
    storage = await world.storage()
    record = await storage.submission(sub.id)
    assert record is not None and record.status == "done"  # answered once, after reopen
    await storage.close()


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs, so the file system itself runs out of space (needs root)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root; the max_page_count test covers disk full")
    mount = tmp_path / "small"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


async def test_a_full_file_system_poisons_and_the_file_recovers_elsewhere(
    small_tmpfs: Path, tmp_path: Path
) -> None:
    world = World(small_tmpfs, "sqlite")
    h = await world.open()
    root = await h.root(agent={"model": MODEL})
    first = await _wait(await root.submit("a small question"))
    assert first.status == "done"
    world.faux.token_size = 100_000
    world.say(faux_message(*["y" * 900_000] * 4))  # more than the whole file system
    sub = await root.submit("a question with a huge answer")
    await _until_poisoned(h)
    await _poisoned_everywhere(h, sub.id)
    await world.crash()
    # The operator frees space (here: moves the actor to a bigger disk) and reopens.
    moved = tmp_path / "moved"
    moved.mkdir()
    for name in os.listdir(small_tmpfs):
        shutil.copy2(small_tmpfs / name, moved / name)
    for name in os.listdir(small_tmpfs):
        os.unlink(small_tmpfs / name)
    world.path = moved / "actor.sqlite"
    storage = await world.storage()
    record = await storage.submission(sub.id)
    assert record is not None and record.status == "placed"
    await storage.close()
    world.say(faux_message("a short answer this time"))
    await _goes_on(world, [first.id, sub.id])


# --------------------------------------------------------------------------- I/O errors


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
@pytest.mark.parametrize("when", ["during", "after"])
async def test_an_io_error_poisons_and_reopening_sees_exactly_what_landed(
    tmp_path: Path, backend: str, when: str
) -> None:
    """``during``: the write failed, nothing landed. ``after``: it landed but the caller
    was not told (an uncertain outcome). Either way the session stops, and the reopened
    storage holds the landed state, never a part of a commit."""
    world = World(tmp_path, backend)  # type: ignore[arg-type]
    h = await world.open()
    root = await h.root(agent={"model": MODEL})
    first = await _wait(await root.submit("warm up"))
    await world.close()

    def answers(writes: object) -> bool:
        return any(getattr(w, "kind", None) == "assistant" for w in writes)  # type: ignore[attr-defined]

    h = await world.open([CommitFault(when, match=answers)])  # type: ignore[arg-type]
    root = await h.conversation(1)
    sub = await root.submit("the answer commit fails")
    await _until_poisoned(h)
    await _poisoned_everywhere(h, sub.id)
    await world.crash()

    storage = await world.storage()
    record = await storage.submission(sub.id)
    assert record is not None
    assert record.status == ("done" if when == "after" else "placed")
    assert not await check_consistency(storage)
    await storage.close()
    await _goes_on(world, [first.id, sub.id])


async def test_a_rejected_commit_does_not_poison(tmp_path: Path) -> None:
    """``StorageRejected`` means nothing was written: the caller sees it, the session goes on."""
    world = World(tmp_path, "sqlite")
    h = await world.open()
    root = await h.root(agent={"model": MODEL})

    def admission(writes: object) -> bool:
        return any(getattr(w, "kind", None) == "user" for w in writes)  # type: ignore[attr-defined]

    assert world.faulty is not None
    world.faulty.add(CommitFault("before", match=admission))
    with pytest.raises(StorageRejected):
        await root.submit("refused")
    assert h.session.poisoned is None
    sub = await _wait(await root.submit("accepted"))
    assert sub.status == "done"
    await world.settle()
    assert not await world.problems(settled=True)
    await world.close()


# --------------------------------------------------------------------------- torn write


def _size(path: Path) -> int:
    return path.stat().st_size


def _torn_copy(db: Path, into: Path, *, cut: int) -> None:
    """Copy a live database and its WAL (as a power cut would leave them), minus the
    WAL's last ``cut`` bytes."""
    into.mkdir()
    shutil.copy2(db, into / db.name)
    shutil.copy2(f"{db}-wal", into / f"{db.name}-wal")
    with open(into / f"{db.name}-wal", "r+b") as f:
        f.truncate(_size(into / f"{db.name}-wal") - cut)


async def test_a_torn_wal_write_loses_the_whole_last_commit_only(tmp_path: Path) -> None:
    """Power lost while the last commit's frames were being written: a copy of the file and
    its WAL with the tail cut off. SQLite must drop that whole commit and keep every
    earlier one; the reopened actor goes on from there."""
    world = World(tmp_path / "live", "sqlite")
    (tmp_path / "live").mkdir()
    world.path = tmp_path / "live" / "actor.sqlite"
    h = await world.open()
    root = await h.root(agent={"model": MODEL})
    first = await _wait(await root.submit("one"))
    before = await h.session.storage.submission(first.id)
    wal = Path(f"{world.path}-wal")
    size_before = _size(wal)
    second = await _wait(await root.submit("two " + "z" * 20_000))
    size_after = _size(wal)
    assert size_after > size_before  # the second turn's commits are in the WAL, unmerged
    torn = tmp_path / "torn"
    _torn_copy(world.path, torn, cut=100)  # the last frame (the last commit's marker) is torn
    await world.crash()

    world.path = torn / "actor.sqlite"
    world.log = SettlementLog()  # the torn copy's history: the lost commit never happened
    storage = await world.storage()
    record = await storage.submission(second.id)
    # The answer commit was the last one: gone entirely, the placed input is still there.
    assert record is not None and record.status == "placed", record
    assert await storage.submission(first.id) == before
    conn = sqlite3.connect(world.path)
    assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    conn.close()
    assert not await check_consistency(storage)
    await storage.close()
    await _goes_on(world, [first.id, second.id])


# --------------------------------------------------------------------------- locked database


async def test_a_locked_database_poisons_and_reopening_after_the_lock_recovers(
    tmp_path: Path,
) -> None:
    world = World(tmp_path, "sqlite")
    h = await world.open()
    root = await h.root(agent={"model": MODEL})
    first = await _wait(await root.submit("before the lock"))
    await world.close()

    db = Sqlite3Database.open(world.path)
    await db.execute("PRAGMA busy_timeout = 50")  # fail fast instead of blocking the loop 5 s
    h = await world.open_on(await SqliteStorage.open(db))
    root = await h.conversation(1)
    intruder = sqlite3.connect(world.path, isolation_level=None, timeout=0.05)
    intruder.execute("BEGIN IMMEDIATE")  # a second writer holds the write lock
    try:
        with pytest.raises(SessionPoisoned) as raised:
            await root.submit("while locked")
        assert "locked" in str(raised.value.__cause__).lower()
        await _poisoned_everywhere(h, first.id)
    finally:
        intruder.execute("ROLLBACK")
        intruder.close()
    await world.crash()
    storage = await world.storage()
    subs = (await storage.scan_submissions(SubmissionQuery(limit=100))).items
    assert [s.id for s in subs] == [first.id]  # the refused admission wrote nothing
    await storage.close()
    await _goes_on(world, [first.id])
