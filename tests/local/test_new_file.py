"""A new actor file's schema is copied from a migrated template (runtimes/local/sqlite.py):
the result must be the file the migrations make, and an existing file is never replaced."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from core.records import ConversationRecord
from core.storage.sqlite import SCHEMA_VERSION
from runtimes.local import sqlite as sqlite_module
from runtimes.local.sqlite import _connect, fill_new_database, open_sqlite_storage

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
    conn = _connect(tmp_path / "b.sqlite", "NORMAL")
    conn.execute("CREATE TABLE mine (x INTEGER)")
    conn.execute("INSERT INTO mine VALUES (7)")
    assert fill_new_database(conn) is False
    assert conn.execute("SELECT x FROM mine").fetchall() == [(7,)]
    assert conn.execute("SELECT name FROM sqlite_master").fetchall() == [("mine",)]
    conn.close()
    empty = _connect(tmp_path / "c.sqlite", "NORMAL")
    assert fill_new_database(empty) is True
    assert empty.execute("SELECT version FROM perdure_schema").fetchall() == [(SCHEMA_VERSION,)]
    empty.close()
