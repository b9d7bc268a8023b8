"""A new actor file's schema is copied from a migrated template (runtimes/local/sqlite.py):
the result must be the file the migrations make, and an existing file is never replaced."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from core.records import ConversationRecord
from core.storage.sqlite import SCHEMA_VERSION, SqliteStorage
from runtimes.actor.sqlite import Sqlite3Database, connect
from runtimes.local import sqlite as sqlite_module
from runtimes.local.sqlite import fill_new_database, open_sqlite_storage

_MASTER = "SELECT type, name, tbl_name, rootpage, sql FROM sqlite_master ORDER BY name"


def _layout(path: Path) -> dict[str, object]:
    conn = sqlite3.connect(path)
    try:
        return {
            "master": conn.execute(_MASTER).fetchall(),
            "version": conn.execute("SELECT version FROM perdure_schema").fetchall(),
            "meta": conn.execute("SELECT * FROM meta").fetchall(),
            "journal": conn.execute("PRAGMA journal_mode").fetchone(),
            "integrity": conn.execute("PRAGMA integrity_check").fetchall(),
        }
    finally:
        conn.close()


async def test_a_new_file_from_the_template_is_the_migrated_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    filled: list[bool] = []

    def spy(conn: sqlite3.Connection) -> bool:  # the real copy, its answer recorded
        filled.append(fill_new_database(conn))
        return filled[-1]

    monkeypatch.setattr(sqlite_module, "fill_new_database", spy)
    migrated = await open_sqlite_storage(tmp_path / "migrated.sqlite")
    assert filled == []
    copied = await open_sqlite_storage(tmp_path / "copied.sqlite", new=True)
    assert filled == [True]
    assert await copied.mint_id() == await migrated.mint_id()  # the same counters
    assert await copied.commit([ConversationRecord(1)]) == await migrated.commit(
        [ConversationRecord(1)]
    )
    await migrated.close()
    await copied.close()
    expected = _layout(tmp_path / "migrated.sqlite")
    assert expected["version"] == [(SCHEMA_VERSION,)]
    assert expected["journal"] == ("wal",) and expected["integrity"] == [("ok",)]
    assert _layout(tmp_path / "copied.sqlite") == expected


async def test_a_copied_file_stores_and_reopens(tmp_path: Path) -> None:
    path = tmp_path / "a.sqlite"
    storage = await open_sqlite_storage(path, new=True)
    await storage.commit([ConversationRecord(1)])
    await storage.close()
    reopened = await open_sqlite_storage(path, new=True)  # not new any more: left alone
    assert await reopened.conversation(1) == ConversationRecord(1)
    await reopened.close()


def test_only_a_database_without_schema_is_filled(tmp_path: Path) -> None:
    conn = connect(tmp_path / "b.sqlite", "NORMAL")
    conn.execute("CREATE TABLE mine (x INTEGER)")
    conn.execute("INSERT INTO mine VALUES (7)")
    assert fill_new_database(conn) is False
    assert conn.execute("SELECT x FROM mine").fetchall() == [(7,)]
    assert conn.execute("SELECT name FROM sqlite_master").fetchall() == [("mine",)]
    conn.close()
    empty = connect(tmp_path / "c.sqlite", "NORMAL")
    assert fill_new_database(empty) is True
    assert empty.execute("SELECT version FROM perdure_schema").fetchall() == [(SCHEMA_VERSION,)]
    empty.close()


def _traced(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every statement the file connections opened from now on run, in order (not the
    in-memory template's)."""
    statements: list[str] = []
    connect = sqlite3.connect

    def traced(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = connect(*args, **kwargs)
        if str(args[0]) != ":memory:":
            conn.set_trace_callback(statements.append)
        return conn

    monkeypatch.setattr(sqlite3, "connect", traced)
    return statements


def _level(storage: SqliteStorage) -> int:
    db = storage._db
    assert isinstance(db, Sqlite3Database)
    return int(db.connection.execute("PRAGMA synchronous").fetchone()[0])


async def test_a_new_file_is_set_up_unsynced_and_synced_before_its_first_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A file without a page has nothing a lost write could damage: its switch to WAL and
    # the schema's copy run at synchronous=OFF (no fsync), NORMAL is back before the
    # schema's own transaction and any commit.
    statements = _traced(monkeypatch)
    storage = await open_sqlite_storage(tmp_path / "new.sqlite", new=True)
    assert _level(storage) == 1  # NORMAL
    off = statements.index("PRAGMA synchronous = OFF")
    assert off < statements.index("PRAGMA journal_mode = MEMORY")  # no -journal file
    assert statements.index("PRAGMA journal_mode = MEMORY") < statements.index(
        "PRAGMA journal_mode = WAL"
    )
    assert (
        off < statements.index("PRAGMA synchronous = NORMAL") < statements.index("BEGIN IMMEDIATE")
    )
    await storage.commit([ConversationRecord(1)])
    await storage.close()
    assert _layout(tmp_path / "new.sqlite")["integrity"] == [("ok",)]


async def test_a_file_with_pages_or_at_full_is_never_set_up_unsynced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    existing = tmp_path / "old.sqlite"
    await (await open_sqlite_storage(existing)).close()
    statements = _traced(monkeypatch)
    reopened = await open_sqlite_storage(existing, new=True)  # a wrong claim: it has pages
    at_full = await open_sqlite_storage(
        tmp_path / "full.sqlite", synchronous="FULL", driver="sqlite3", new=True
    )
    assert "PRAGMA synchronous = OFF" not in statements
    assert "PRAGMA journal_mode = MEMORY" not in statements
    assert (_level(reopened), _level(at_full)) == (1, 2)  # NORMAL, FULL
    await reopened.close()
    await at_full.close()


@pytest.mark.parametrize("left", ["no page", "wal header page only"])
async def test_what_a_power_loss_can_leave_of_a_new_file_opens_as_an_empty_actor(
    tmp_path: Path, left: str
) -> None:
    # What an unsynced set-up can leave after a power loss (see _open_and_migrate): an
    # existing file without pages, or one switched to WAL without the schema's copy.
    path = tmp_path / "lost.sqlite"
    path.touch()
    if left != "no page":
        conn = sqlite3.connect(path)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.close()
        assert path.stat().st_size > 0
    storage = await open_sqlite_storage(path)  # not new: it exists
    assert await storage.conversation(1) is None
    await storage.commit([ConversationRecord(1)])
    await storage.close()
    layout = _layout(path)
    assert layout["version"] == [(SCHEMA_VERSION,)] and layout["integrity"] == [("ok",)]


def _lost_first_page(path: Path) -> None:
    """A new file grown to its first page whose bytes never reached the disk, and a WAL
    with its header."""
    path.write_bytes(bytes(4096))
    probe = sqlite3.connect(path)
    with pytest.raises(sqlite3.DatabaseError):  # SQLite itself refuses it
        probe.execute("PRAGMA schema_version").fetchall()
    probe.close()
    Path(f"{path}-shm").unlink(missing_ok=True)
    Path(f"{path}-wal").write_bytes(b"\x37\x7f\x06\x82" + bytes(28))


async def test_a_lost_first_page_of_a_new_file_opens_as_an_empty_actor(tmp_path: Path) -> None:
    # The unsynced set-up's first page may not reach the disk though the file grew: one
    # page of zeros, with or without a WAL. The open empties it and sets it up again.
    path = tmp_path / "torn.sqlite"
    _lost_first_page(path)
    storage = await open_sqlite_storage(path)
    await storage.commit([ConversationRecord(1)])
    await storage.close()
    layout = _layout(path)
    assert layout["version"] == [(SCHEMA_VERSION,)] and layout["integrity"] == [("ok",)]


@pytest.mark.parametrize("size", [1400, 4096, 12_000])
async def test_any_other_file_that_is_not_a_database_is_refused_untouched(
    tmp_path: Path, size: int
) -> None:
    path = tmp_path / "other.sqlite"
    data = (b"not a database " * 1000)[:size]
    path.write_bytes(data)
    with pytest.raises(sqlite3.DatabaseError):
        await open_sqlite_storage(path)
    assert path.read_bytes() == data
