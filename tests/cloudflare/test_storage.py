"""The Durable Object storage facade on CPython, over the ``ctx.storage`` stand-in.

The whole storage conformance kit runs on ``SqliteStorage`` over the facade (plain, and
evicted after every commit), and the stand-in's workerd limits are shown to bite, so
code that would fail in a Durable Object fails here too.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import pytest

from core.errors import StorageClosed
from core.records import ConversationRecord, Entry, Pending, Task
from core.storage import Storage
from core.storage.sqlite.database import SqlExecutor
from core.testing.storage_conformance import StorageCase, storage_cases
from core.testing.wrappers import ReopeningStorage
from runtimes.cloudflare.storage import DurableObjectDatabase, open_durable_object_storage
from tests.cloudflare.standin import (
    DurableObjectHome,
    SqlStorageError,
)

CASES = storage_cases()


@asynccontextmanager
async def _plain(tmp: Path) -> AsyncIterator[Storage]:
    home = DurableObjectHome(tmp / "do.sqlite")
    storage = await open_durable_object_storage(home.open())
    try:
        yield storage
    finally:
        await storage.close()
        home.close()


@asynccontextmanager
async def _evicted_after_every_commit(tmp: Path) -> AsyncIterator[Storage]:
    home = DurableObjectHome(tmp / "do.sqlite")

    async def reopen() -> Storage:
        return await open_durable_object_storage(home.open())  # evicts the previous isolate

    storage = await ReopeningStorage.open(reopen)
    try:
        yield storage
    finally:
        await storage.close()
        home.close()


PROVIDERS: dict[str, Callable[[Path], AbstractAsyncContextManager[Storage]]] = {
    "durable-object": _plain,
    "durable-object-evicting": _evicted_after_every_commit,
}


@pytest.mark.parametrize("adapter", sorted(PROVIDERS))
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_conformance(case: StorageCase, adapter: str, tmp_path: Path) -> None:
    async with PROVIDERS[adapter](tmp_path) as storage:
        await case.run(storage)


# ------------------------------------------------------------------ the stand-in's limits


@pytest.fixture
def home(tmp_path: Path) -> Iterator[DurableObjectHome]:
    home = DurableObjectHome(tmp_path / "do.sqlite")
    yield home
    home.close()


def test_the_stand_in_refuses_what_workerd_refuses(home: DurableObjectHome) -> None:
    sql = home.open().sql
    sql.exec("CREATE TABLE t (v TEXT)")
    for statement in ("BEGIN", "BEGIN IMMEDIATE", "COMMIT", "SAVEPOINT s", "RELEASE s"):
        with pytest.raises(SqlStorageError, match="transactionSync"):
            sql.exec(statement)
    with pytest.raises(SqlStorageError, match="PRAGMA journal_mode"):
        sql.exec("PRAGMA journal_mode = WAL")
    with pytest.raises(SqlStorageError, match="ATTACH"):
        sql.exec("ATTACH DATABASE ':memory:' AS other")
    with pytest.raises(SqlStorageError, match="too big"):
        sql.exec("INSERT INTO t (v) VALUES (?)", "x" * 2_000_001)
    with pytest.raises(SqlStorageError, match="too many SQL variables"):
        sql.exec(f"SELECT {', '.join('?' * 101)}", *range(101))
    with pytest.raises(SqlStorageError, match="statement too long"):
        sql.exec("SELECT 1 -- " + "x" * 100_000)
    with pytest.raises(TypeError, match="bool"):
        sql.exec("INSERT INTO t (v) VALUES (?)", True)
    with pytest.raises(TypeError, match="tuple"):
        sql.exec("INSERT INTO t (v) VALUES (?)", (1, 2))
    # ...and serves what it allows, the SDK's way.
    assert sql.exec("INSERT INTO t (v) VALUES (?), (?)", "a", None).rowsWritten == 2
    assert sql.exec("SELECT v FROM t ORDER BY rowid").toArray() == [{"v": "a"}, {"v": None}]
    assert list(sql.exec("SELECT v, v FROM t ORDER BY rowid").raw()) == [["a", "a"], [None, None]]
    assert sql.exec("PRAGMA table_info(t)").toArray()[0]["name"] == "v"
    with pytest.raises(SqlStorageError, match="exactly one"):
        sql.exec("SELECT v FROM t").one()


async def test_the_facade_rolls_a_failed_write_transaction_back(home: DurableObjectHome) -> None:
    do = home.open()
    db = DurableObjectDatabase(do)
    await db.execute("CREATE TABLE t (v INTEGER)")

    class Boom(Exception):
        pass

    def write_then_fail(ex: SqlExecutor) -> None:
        ex.execute("INSERT INTO t (v) VALUES (?)", (1,))
        raise Boom("after the first write")

    with pytest.raises(Boom, match="after the first write"):
        await db.transaction(write_then_fail)
    assert await db.fetch("SELECT COUNT(*) FROM t") == [(0,)]

    def oversized(ex: SqlExecutor) -> None:
        ex.execute("INSERT INTO t (v) VALUES (?)", (2,))
        ex.execute("INSERT INTO t (v) VALUES (?)", ("x" * 2_000_001,))

    with pytest.raises(SqlStorageError, match="too big"):
        await db.transaction(oversized)
    assert await db.fetch("SELECT COUNT(*) FROM t") == [(0,)]

    def write(ex: SqlExecutor) -> list[tuple[object, ...]]:
        ex.execute("INSERT INTO t (v) VALUES (?)", (True,))  # a bool is bound as 1
        return ex.fetch("SELECT v FROM t")

    assert await db.transaction(write) == [(1,)]
    # Reads take no transactionSync; writes take exactly one.
    before = do.transactions
    assert await db.transaction(lambda ex: ex.fetch("SELECT v FROM t"), write=False) == [(1,)]
    assert do.transactions == before
    await db.close()
    with pytest.raises(StorageClosed):
        await db.fetch("SELECT 1")


async def test_records_past_the_row_limit_are_chunked_and_survive_eviction(
    home: DurableObjectHome,
) -> None:
    storage = await open_durable_object_storage(home.open())
    big = "y" * (5 * 1024 * 1024)  # 2.5x the 2 MB row limit the stand-in enforces
    await storage.commit([ConversationRecord(1)])
    e, t = await storage.mint_id(), await storage.mint_id()
    await storage.commit(
        [Entry(e, 1, "custom", data={"blob": big}), Task(t, 1, "k", 1, big, Pending({}))]
    )
    storage = await open_durable_object_storage(home.open())  # evicted
    entry, task = await storage.entry(e), await storage.task(t)
    assert entry is not None and entry.data == {"blob": big}
    assert task is not None and task.input == big
    await storage.close()
    home.close()
    conn = sqlite3.connect(home.path)
    assert conn.execute("SELECT COUNT(*) FROM record_parts").fetchone()[0] >= 20
    conn.close()


async def test_integers_past_the_js_safe_range_cross_as_exact_doubles_or_not_at_all(
    home: DurableObjectHome,
) -> None:
    db = DurableObjectDatabase(home.open())
    await db.execute("CREATE TABLE t (v INTEGER) STRICT")
    await db.execute("INSERT INTO t (v) VALUES (?)", (2**53,))  # a BigInt would be refused
    (value,) = (await db.fetch("SELECT v FROM t"))[0]
    assert value == 2**53
    with pytest.raises(ValueError, match="cannot be bound exactly"):
        await db.execute("INSERT INTO t (v) VALUES (?)", (2**53 + 1,))
