"""New SQLite files are copies of the process's empty, migrated template
(runtimes.local.template): the same database a migration makes, written only where no
file exists."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from core.storage.sqlite.schema import MIGRATIONS
from runtimes.local.host import ActorHost
from runtimes.local.sqlite import _new_empty_database
from runtimes.local.template import write_new_database
from tests.local.support import AGENT, host_config


def _schema(path: Path) -> list[tuple[str, str]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT name, sql FROM sqlite_master ORDER BY name").fetchall()
    finally:
        conn.close()


def test_a_copy_is_the_database_a_migration_makes(tmp_path: Path) -> None:
    migrated = tmp_path / "migrated.sqlite"
    _new_empty_database(migrated).close()
    copied = tmp_path / "copied.sqlite"
    assert write_new_database(copied, _new_empty_database)
    assert _schema(copied) == _schema(migrated)
    conn = sqlite3.connect(copied)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert conn.execute("SELECT max(version) FROM perdure_schema").fetchone() == (
            len(MIGRATIONS),
        )
    finally:
        conn.close()


def test_an_existing_file_is_never_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "there.sqlite"
    path.write_bytes(b"not ours")
    assert not write_new_database(path, _new_empty_database)
    assert path.read_bytes() == b"not ours"


async def test_an_actor_created_from_the_template_keeps_its_commits(tmp_path: Path) -> None:
    host = ActorHost(host_config(tmp_path, recover_on_start=False))
    await host.start()
    try:
        async with host.use("fresh", create=True) as harness:
            root = await harness.root(agent=dict(AGENT))
            done = await (await root.submit("hello")).wait(timeout=10)
            assert done.status == "done"
    finally:
        await host.close()
    again = ActorHost(host_config(tmp_path, recover_on_start=False))
    await again.start()
    try:
        async with again.use("fresh") as harness:
            submission = await harness.submission(done.id)
            assert submission is not None
            assert (await submission.status()).status == "done"
    finally:
        await again.close()
