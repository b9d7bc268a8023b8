"""WAL checkpoints of the inline sqlite3 facade run on the background thread (issue 14)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runtimes.actor.sqlite import Sqlite3Database
from runtimes.local.checkpointer import EVERY, checkpointer
from runtimes.local.sqlite import CheckpointedDatabase, open_sqlite_storage


def _wal_size(path: Path) -> int:
    wal = Path(f"{path}-wal")
    return wal.stat().st_size if wal.exists() else 0


async def _write_pages(db: Sqlite3Database, commits: int) -> None:
    await db.execute("CREATE TABLE IF NOT EXISTS t (x TEXT)")

    def write(ex: Any) -> None:
        ex.execute("INSERT INTO t VALUES (?)", ("x" * 2048,))

    for _ in range(commits):
        await db.transaction(write)


@pytest.mark.parametrize("background", [True, False])
async def test_commits_leave_checkpoints_to_the_background_thread(
    tmp_path: Path, background: bool
) -> None:
    path = tmp_path / "a.sqlite"
    db = (CheckpointedDatabase if background else Sqlite3Database).open(path)
    autocheckpoint = (await db.fetch("PRAGMA wal_autocheckpoint"))[0][0]
    assert (autocheckpoint > 1000) is background  # the loop's connection: a backstop only
    await _write_pages(db, EVERY * 3)  # ~200 pages: below either autocheckpoint
    assert checkpointer().drain()
    # Checkpointed pages are in the file itself; without the thread they are still
    # only in the WAL (until the close's checkpoint).
    assert (path.stat().st_size > 100 * 1024) is background
    await db.close()
    assert path.stat().st_size > 100 * 1024


async def test_a_facade_without_background_checkpoints_keeps_sqlite_default(
    tmp_path: Path,
) -> None:
    db = Sqlite3Database.open(tmp_path / "b.sqlite")
    assert (await db.fetch("PRAGMA wal_autocheckpoint"))[0][0] == 1000
    await db.close()


async def test_open_sqlite_storage_checkpoints_in_the_background_and_closes_cleanly(
    tmp_path: Path,
) -> None:
    path = tmp_path / "c.sqlite"
    storage = await open_sqlite_storage(path)
    await storage.close()
    # Closing ends with a TRUNCATE checkpoint: the WAL is empty (or gone).
    assert _wal_size(path) == 0
    path.unlink()  # the thread holds no connection to the file any more
