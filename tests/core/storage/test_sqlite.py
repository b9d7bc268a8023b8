"""SQLite-specific guarantees: pragmas, schema versions, query plans, row sizes, atomicity."""

from __future__ import annotations

import asyncio
import itertools
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest

from core.errors import StorageClosed, StorageCorrupt, StorageRejected
from core.jsonvalue import JsonObject
from core.records import Completed, ConversationRecord, Entry, Pending, Running, Task, Terminal
from core.storage import (
    DocumentChange,
    DocumentCreate,
    DocumentRetire,
    EntryQuery,
    SqliteStorage,
    TaskQuery,
)
from core.storage.sqlite import schema
from core.storage.sqlite.database import Row, SqlExecutor, SqlValue
from core.storage.sqlite.schema import CHUNK_CHARS
from core.storage.sqlite.storage import COUNTER_RESERVE
from core.storage.sqlite.write_set import CommitGate
from core.testing.consistency import check_sqlite
from core.testing.storage_conformance import storage_cases
from core.testing.two_phase_conformance import TwoPhaseCase, TwoPhaseStorage, two_phase_cases
from runtimes.actor.sqlite import Sqlite3Database
from runtimes.local.sqlite import AioSqliteDatabase, open_sqlite_storage

T = TypeVar("T")


class Recorder:
    """A Sqlite3Database that records every statement (and can fail the n-th write)."""

    def __init__(self, path: Path, fail_at: int | None = None) -> None:
        self.db = Sqlite3Database.open(path)
        self.statements: list[tuple[str, tuple[Any, ...]]] = []
        self.fail_at = fail_at
        self.executes = 0

    def _record(self, sql: str, params: Sequence[SqlValue]) -> None:
        self.statements.append((sql, tuple(params)))

    async def execute(self, sql: str, params: Sequence[SqlValue] = ()) -> None:
        self._record(sql, params)
        await self.db.execute(sql, params)

    async def fetch(self, sql: str, params: Sequence[SqlValue] = ()) -> list[Row]:
        self._record(sql, params)
        return await self.db.fetch(sql, params)

    async def transaction(self, fn: Callable[[SqlExecutor], T], *, write: bool = True) -> T:
        outer = self

        class Ex:
            def execute(self, sql: str, params: Sequence[SqlValue] = ()) -> None:
                outer._record(sql, params)
                outer.executes += 1
                if outer.fail_at is not None and outer.executes == outer.fail_at:
                    raise OSError("disk went away mid-transaction")
                inner.execute(sql, params)

            def fetch(self, sql: str, params: Sequence[SqlValue] = ()) -> list[Row]:
                outer._record(sql, params)
                return inner.fetch(sql, params)

        def run(ex: SqlExecutor) -> T:
            nonlocal inner
            inner = ex
            return fn(Ex())

        inner: SqlExecutor
        return await self.db.transaction(run, write=write)

    async def close(self) -> None:
        await self.db.close()


def _task(task_id: int) -> Task:
    return Task(task_id, 1, "k", 1, {"v": task_id}, Pending({"phase": "p"}))


async def test_files_use_wal_and_normal_sync_by_default_and_full_on_request(tmp_path: Path) -> None:
    for sync, code in (("NORMAL", 1), ("FULL", 2)):
        db = Sqlite3Database.open(tmp_path / f"{sync}.sqlite", synchronous=sync)  # type: ignore[arg-type]
        assert await db.fetch("PRAGMA journal_mode") == [("wal",)]
        assert await db.fetch("PRAGMA synchronous") == [(code,)]
        await db.close()
    aio = await AioSqliteDatabase.open(tmp_path / "aio.sqlite")
    assert await aio.fetch("PRAGMA journal_mode") == [("wal",)]
    assert await aio.fetch("PRAGMA synchronous") == [(1,)]
    await aio.close()
    with pytest.raises(ValueError, match="synchronous"):
        Sqlite3Database.open(tmp_path / "x.sqlite", synchronous="OFF")  # type: ignore[arg-type]


async def test_records_seq_and_ids_persist_across_reopen_and_close_truncates_the_wal(
    tmp_path: Path,
) -> None:
    path = tmp_path / "a.sqlite"
    storage = await open_sqlite_storage(path)
    await storage.commit([ConversationRecord(1)])
    ids = [await storage.mint_id() for _ in range(3)]
    seq = await storage.commit([_task(ids[0])])
    await storage.close()
    wal = tmp_path / "a.sqlite-wal"
    assert not wal.exists() or wal.stat().st_size == 0  # checkpointed (and removed) on close
    storage = await open_sqlite_storage(path)
    # A clean close stored the counters exactly (a watcher's cursor stays current).
    assert storage.seq == seq
    assert await storage.mint_id() > ids[-1]
    assert await storage.commit([_task(ids[1])]) > seq
    assert await storage.task(ids[0]) == _task(ids[0])
    await storage.close()


async def test_an_id_minted_before_a_commit_is_not_minted_again_after_a_crash(
    tmp_path: Path,
) -> None:
    """A generation's checkpoint names the tasks it kept in memory, whose ids no record
    holds: a process that dies without closing must not hand them out again."""
    path = tmp_path / "a.sqlite"
    storage = await open_sqlite_storage(path)
    await storage.commit([ConversationRecord(1)])
    named = [await storage.mint_id() for _ in range(3)]
    await storage.commit([_task(named[0])])
    # The process dies here (no close): a second storage opens the file as it is.
    after = await open_sqlite_storage(path)
    assert await after.mint_id() > named[-1]
    await after.close()
    await storage.close()


async def test_counters_are_stored_ahead_so_meta_is_rewritten_once_per_reserve(
    tmp_path: Path,
) -> None:
    """Without a gate, ``meta`` holds bounds reserved :data:`COUNTER_RESERVE` ahead: of
    ``2 * COUNTER_RESERVE`` commits minting two ids each, at most four rewrite it (issue
    36: a Durable Object pays per row written). A storage that dies without closing
    leaves bounds a reopen goes on from: no committed seq or id is handed out again."""
    path = tmp_path / "a.sqlite"
    recorder = Recorder(path)
    storage = await SqliteStorage.open(recorder)
    seqs = [await storage.commit([ConversationRecord(1)])]
    ids: list[int] = []
    for _ in range(2 * COUNTER_RESERVE):
        ids += [await storage.mint_id(), await storage.mint_id()]
        seqs.append(await storage.commit([_task(ids[-2]), _task(ids[-1])]))
    rewrites = [sql for sql, _ in recorder.statements if sql.startswith("UPDATE meta")]
    assert 1 <= len(rewrites) <= 4, rewrites
    # The process dies here (no close): a second storage opens the file as it is.
    after = await open_sqlite_storage(path)
    assert after.seq >= seqs[-1] and await after.mint_id() > ids[-1]
    assert await after.commit([_task(await after.mint_id())]) > seqs[-1]
    assert await after.task(ids[-1]) == _task(ids[-1])
    await after.close()
    await storage.close()  # the dead storage's close leaves the newer bounds alone
    again = await open_sqlite_storage(path)
    assert again.seq == after.seq
    await again.close()


async def test_a_gated_storage_stores_the_exact_counters_with_every_commit(
    tmp_path: Path,
) -> None:
    """A replica rebuilt from a snapshot and a log must tell the seq it holds exactly:
    with a gate, each write set carries ``meta``'s exact counters."""

    class Gate:
        def __init__(self) -> None:
            self.sets: list[JsonObject] = []

        async def make_durable(self, seq: int, write_set: JsonObject) -> None:
            self.sets.append(write_set)

    gate = Gate()
    storage = await SqliteStorage.open(Sqlite3Database.open(tmp_path / "g.sqlite"), gate=gate)
    await storage.commit([ConversationRecord(1)])
    task_id = await storage.mint_id()
    seq = await storage.commit([_task(task_id)])
    for write_set in gate.sets:
        sql, ops = write_set["sql"], write_set["ops"]
        assert isinstance(sql, list) and isinstance(ops, list)
        meta = [params for index, params in ops if str(sql[index]).startswith("UPDATE meta")]  # type: ignore[misc]
        assert meta == [[write_set["next_id"], write_set["seq"] + 1]]  # type: ignore[operator]
    await storage.close()
    reopened = await SqliteStorage.open(Sqlite3Database.open(tmp_path / "g.sqlite"))
    assert reopened.seq == seq and await reopened.mint_id() == task_id + 1
    await reopened.close()


async def test_schema_versions_migrate_in_order_and_refuse_the_future(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "m.sqlite"
    storage = await open_sqlite_storage(path)
    await storage.commit([ConversationRecord(1)])
    await storage.close()
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT version FROM perdure_schema").fetchall() == [
        (schema.SCHEMA_VERSION,)
    ]
    conn.close()

    # A later release adds a migration: it runs once, in order, keeping the data.
    extended = [*schema.MIGRATIONS, ["ALTER TABLE entries ADD COLUMN note TEXT"]]
    monkeypatch.setattr(schema, "MIGRATIONS", extended)
    monkeypatch.setattr("core.storage.sqlite.storage.SCHEMA_VERSION", len(extended))
    storage = await open_sqlite_storage(path)
    assert await storage.conversation(1) == ConversationRecord(1)
    await storage.close()
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT version FROM perdure_schema").fetchall() == [(len(extended),)]
    assert "note" in [r[1] for r in conn.execute("PRAGMA table_info(entries)")]
    conn.close()

    monkeypatch.undo()
    with pytest.raises(StorageCorrupt, match="newer than this perdure"):
        await open_sqlite_storage(path)


async def test_missing_metadata_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "meta.sqlite"
    storage = await open_sqlite_storage(path)
    await storage.close()
    conn = sqlite3.connect(path)
    conn.execute("DELETE FROM meta")
    conn.commit()
    conn.close()
    with pytest.raises(StorageCorrupt, match="Durable SQLite metadata is missing"):
        await open_sqlite_storage(path)


async def _run_kit(tmp_path: Path) -> list[tuple[str, tuple[Any, ...]]]:
    recorded: list[tuple[str, tuple[Any, ...]]] = []
    for i, case in enumerate(storage_cases()):
        recorder = Recorder(tmp_path / f"kit-{i}.sqlite")
        storage = await SqliteStorage.open(recorder)
        try:
            await case.run(storage)
        finally:
            await storage.close()
        recorded += recorder.statements
    return recorded


async def test_every_query_the_kit_issues_is_served_by_an_index(tmp_path: Path) -> None:
    statements = await _run_kit(tmp_path)
    conn = sqlite3.connect(tmp_path / "plan.sqlite")
    storage = await SqliteStorage.open(Sqlite3Database(conn))  # creates the schema
    checked = 0
    for sql, params in {(s, p) for s, p in statements}:
        if not sql.lstrip().upper().startswith("SELECT") or "perdure_schema" in sql:
            continue
        plan = [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params)]
        scans = [line for line in plan if line.startswith("SCAN") and "meta" not in line]
        assert not scans, f"{sql}\n{plan}"
        checked += 1
    assert checked > 20
    await storage.close()


async def test_no_statement_binds_more_than_100_parameters(tmp_path: Path) -> None:
    statements = await _run_kit(tmp_path)
    assert statements
    assert max(len(p) for _, p in statements) <= 100


async def test_large_values_are_split_below_one_megabyte_per_row(tmp_path: Path) -> None:
    path = tmp_path / "big.sqlite"
    storage = await open_sqlite_storage(path)
    big = "x" * (3 * 1024 * 1024)
    await storage.commit([ConversationRecord(1)])
    e, d, t = [await storage.mint_id() for _ in range(3)]
    await storage.commit(
        [
            Entry(e, 1, "custom", data={"blob": big}),
            DocumentCreate(d, "big", "conversation", 1, None, "rewindable", 1, [big]),
            Task(t, 1, "k", 1, big, Pending({"phase": "p"})),
        ]
    )
    await storage.commit([DocumentChange(d, 1, ops=[["s", [0], big[:10]]])])
    await storage.commit([Task(t, 1, "k", 1, "small now", Pending({"phase": "p"}))])
    entry = await storage.entry(e)
    assert entry is not None and entry.data == {"blob": big}
    doc = await storage.document(d)
    assert doc is not None and doc.value == [big[:10]]
    old = await storage.document(d, 2)
    assert old is not None and old.value == [big]
    task = await storage.task(t)
    assert task is not None and task.input == "small now"
    await storage.close()

    conn = sqlite3.connect(path)
    longest = 0
    for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'"):
        cols = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
        expr = " + ".join(f"COALESCE(length(CAST({c} AS BLOB)), 0)" for c in cols)
        (size,) = conn.execute(f"SELECT COALESCE(MAX({expr}), 0) FROM {table}").fetchone()
        longest = max(longest, size)
    assert longest < 1024 * 1024
    # The replaced task left no orphaned parts behind.
    parts = conn.execute(
        "SELECT tbl, COUNT(*) FROM record_parts GROUP BY tbl ORDER BY tbl"
    ).fetchall()
    assert parts == [("entries", 7), ("revisions", 7)]  # 3 MiB of JSON in 512 KiB parts
    conn.close()


async def test_one_row_per_entry_and_per_revision_and_latest_documents_reclaim_old_rows(
    tmp_path: Path,
) -> None:
    path = tmp_path / "rows.sqlite"
    storage = await open_sqlite_storage(path)
    await storage.commit([ConversationRecord(1)])
    for _ in range(25):
        await storage.commit([Entry(await storage.mint_id(), 1, "custom", data={"n": 1})])
    latest, rewindable = await storage.mint_id(), await storage.mint_id()
    await storage.commit(
        [
            DocumentCreate(latest, "live", "conversation", 1, None, "latest", 1, 0),
            DocumentCreate(rewindable, "agent", "conversation", 1, None, "rewindable", 1, 0),
        ]
    )
    for i in range(10):
        await storage.commit(
            [
                DocumentChange(latest, 1, ops=[["r", i]]),
                DocumentChange(rewindable, 1, ops=[["r", i]]),
            ]
        )
    conn = sqlite3.connect(path)

    def count(sql: str, doc: int = latest) -> int:
        return (
            int(conn.execute(sql, (doc,)).fetchone()[0])
            if "?" in sql
            else int(conn.execute(sql).fetchone()[0])
        )

    assert count("SELECT COUNT(*) FROM entries") == 25
    revisions = "SELECT COUNT(*) FROM revisions WHERE document_id = ?"
    assert count(revisions, rewindable) == 11  # each readable at its own seq
    # Nothing reads a latest document at an earlier point: its deltas since the base
    # are folded into one row.
    assert count(revisions) == 2
    state = await storage.document(latest)
    assert state is not None and state.value == 9
    await storage.commit([DocumentChange(latest, 1, value=99)])
    assert count(revisions) == 1
    await storage.commit([DocumentChange(latest, 1, ops=[["r", 100]])])
    assert count(revisions) == 2
    await storage.commit([DocumentRetire(latest)])
    assert count(revisions) == 0
    conn.close()
    await storage.close()


async def test_a_latest_document_is_rebased_over_its_newest_revision_one_row_a_rebase(
    tmp_path: Path,
) -> None:
    """A new base of a ``latest`` document is written over the newest stored revision
    (the older ones deleted) instead of inserted beside it: one row written per rebase
    of a document with nothing but its base (issue 36), and no part left behind when the
    base was split into parts."""
    db = Sqlite3Database.open(tmp_path / "rebase.sqlite")
    storage = await SqliteStorage.open(db)
    await storage.commit([ConversationRecord(1)])
    doc = await storage.mint_id()
    await storage.commit([DocumentCreate(doc, "usage", "conversation", 1, None, "latest", 1, 0)])
    changes = db.connection.total_changes
    for i in range(1, 11):
        await storage.commit([DocumentChange(doc, 1, value=i)])
    assert db.connection.total_changes - changes == 10  # was 30: insert, delete and meta
    await storage.commit([DocumentChange(doc, 1, ops=[["r", 11]])])  # a delta, then a base
    changes = db.connection.total_changes
    big = "x" * (CHUNK_CHARS + 1)
    seq = await storage.commit([DocumentChange(doc, 1, value=big)])
    assert db.connection.total_changes - changes == 2 + 2  # base and delta; the 2 parts
    state = await storage.document(doc)
    assert state is not None and state.value == big
    await storage.commit([DocumentChange(doc, 1, value="small")])
    rows = await db.fetch("SELECT seq, base FROM revisions WHERE document_id = ?", (doc,))
    assert [tuple(r) for r in rows] == [(seq + 1, 1)]
    assert await db.fetch("SELECT COUNT(*) FROM record_parts") == [(0,)]
    assert await check_sqlite(db) == []
    await storage.close()
    reopened = await open_sqlite_storage(tmp_path / "rebase.sqlite")
    state = await reopened.document(doc)
    assert state is not None and state.value == "small"
    await reopened.close()


async def test_a_latest_documents_deltas_fold_into_one_row_until_the_next_base(
    tmp_path: Path,
) -> None:
    """Nothing reads a ``latest`` document at an earlier point, so a delta is folded into
    the delta row before it: one row written per delta and none deleted at the next base
    (issue 36: the live document changes twice a tool round). A fold that would make
    the row longer than 1,000 characters starts a new row; a reopened storage, not
    knowing the rows, inserts."""
    path = tmp_path / "fold.sqlite"
    db = Sqlite3Database.open(path)
    storage = await SqliteStorage.open(db)
    await storage.commit([ConversationRecord(1)])
    doc = await storage.mint_id()
    await storage.commit(
        [DocumentCreate(doc, "live", "conversation", 1, None, "latest", 1, {"n": 0})]
    )
    changes = db.connection.total_changes
    for n in range(1, 11):
        await storage.commit([DocumentChange(doc, 1, ops=[["s", ["n"], n]])])
    assert db.connection.total_changes - changes == 10  # was 20: a meta row each
    revisions = "SELECT seq, base FROM revisions WHERE document_id = ? ORDER BY seq"
    assert [r[1] for r in await db.fetch(revisions, (doc,))] == [1, 0]
    half = "x" * 450
    for key in ("a", "b"):  # the second would make the row too long: a row of its own
        await storage.commit([DocumentChange(doc, 1, ops=[["s", [key], half]])])
    assert [r[1] for r in await db.fetch(revisions, (doc,))] == [1, 0, 0]
    state = await storage.document(doc)
    assert state is not None and state.value == {"n": 10, "a": half, "b": half}
    await storage.close()

    db = Sqlite3Database.open(path)
    storage = await SqliteStorage.open(db)
    for n in (11, 12):  # the first inserts (the rows are not known), the second folds
        await storage.commit([DocumentChange(doc, 1, ops=[["s", ["n"], n]])])
    await storage.commit([DocumentChange(doc, 1, ops=[])])  # an empty delta: its own row
    await storage.commit([DocumentChange(doc, 1, ops=[["d", ["a"]]])])
    state = await storage.document(doc)
    assert state is not None and state.value == {"n": 12, "b": half}
    assert [r[1] for r in await db.fetch(revisions, (doc,))] == [1, 0, 0, 0, 0, 0]
    await storage.commit([DocumentChange(doc, 1, value={"n": 13})])
    assert [tuple(r) for r in await db.fetch(revisions, (doc,))] == [(storage.seq, 1)]
    assert await check_sqlite(db) == []
    await storage.close()


async def test_a_failure_inside_the_sql_transaction_leaves_nothing_behind(tmp_path: Path) -> None:
    path = tmp_path / "atomic.sqlite"
    storage = await open_sqlite_storage(path)
    await storage.commit([ConversationRecord(1)])
    await storage.close()
    # Each statement of the commit fails once, in turn, until the commit has none left.
    for fail_at in itertools.count(1):
        recorder = Recorder(path)
        storage = await SqliteStorage.open(recorder)
        recorder.fail_at = recorder.executes + fail_at
        ids = [await storage.mint_id() for _ in range(3)]
        try:
            await storage.commit(
                [Entry(ids[0], 1, "custom"), _task(ids[1]), Entry(ids[2], 1, "custom")]
            )
        except OSError as e:
            assert "mid-transaction" in str(e)
        else:
            assert fail_at > 3  # ids, entries, the task, the counters: all failed above
            await storage.close()
            break
        await storage.close()
        storage = await open_sqlite_storage(path)
        assert (await storage.scan_entries(EntryQuery(1))).items == []
        assert (await storage.scan_tasks(TaskQuery())).items == []
        await storage.close()


async def test_a_value_that_contains_itself_is_rejected_and_nothing_is_written(
    tmp_path: Path,
) -> None:
    # The session's JSON gate never lets a cycle through; a caller of the storage port
    # itself can, and the encoder (no circular check) meets it as a RecursionError.
    storage = await open_sqlite_storage(tmp_path / "cycle.sqlite")
    await storage.commit([ConversationRecord(1)])
    seq = storage.seq
    loop: list[Any] = []
    loop.append({"again": loop})
    entry_id = await storage.mint_id()
    with pytest.raises(StorageRejected, match="not plain JSON"):
        await storage.commit([Entry(entry_id, 1, "custom", data=loop)])
    assert storage.seq == seq
    assert await storage.entry(entry_id) is None
    await storage.commit([Entry(entry_id, 1, "custom", data={"fine": True})])  # still usable
    await storage.close()


@pytest.mark.parametrize("driver", ["sqlite3", "aiosqlite"])
@pytest.mark.parametrize("case", two_phase_cases(), ids=[c.name for c in two_phase_cases()])
async def test_two_phase_conformance(case: TwoPhaseCase, driver: str, tmp_path: Path) -> None:
    opened: list[SqliteStorage] = []

    async def open_storage(gate: CommitGate | None) -> TwoPhaseStorage:
        path = tmp_path / f"replica-{len(opened)}.sqlite"
        db = await (AioSqliteDatabase.open(path) if driver == "aiosqlite" else _sqlite3(path))
        opened.append(await SqliteStorage.open(db, gate=gate))
        return opened[-1]

    try:
        await case.run(open_storage)
    finally:
        for storage in opened:
            await storage.close()


async def _sqlite3(path: Path) -> Sqlite3Database:
    return Sqlite3Database.open(path)


async def test_a_replayed_write_set_reproduces_the_file_row_for_row(tmp_path: Path) -> None:
    """Stronger than equal reads: every table of the replica matches the primary's."""
    log: list[tuple[int, object]] = []

    class Keep:
        async def make_durable(self, seq: int, write_set: Any) -> None:
            log.append((seq, write_set))

    primary = await SqliteStorage.open(Sqlite3Database.open(tmp_path / "p.sqlite"), gate=Keep())
    await primary.commit([ConversationRecord(1)])
    t = await primary.mint_id()
    await primary.commit([_task(t), Entry(await primary.mint_id(), 1, "custom")])
    await primary.commit([Task(t, 1, "other", 1, {"v": "x" * 600_000}, Pending({"phase": "q"}))])
    await primary.commit([_task(t)])
    d = await primary.mint_id()
    await primary.commit(
        [DocumentCreate(d, "live", "conversation", 1, None, "latest", 1, "y" * 600_000)]
    )
    await primary.commit([DocumentChange(d, 1, value=0)])
    for n in (1, 2):  # the second folded into the first's row
        await primary.commit([DocumentChange(d, 1, ops=[["r", n]])])
    await primary.commit([DocumentChange(d, 1, value=3)])  # a base over the delta row
    await primary.commit([DocumentChange(d, 1, ops=[["r", 4]])])
    replica = await SqliteStorage.open(Sqlite3Database.open(tmp_path / "r.sqlite"))
    for _, write_set in log:
        await replica.apply_write_set(write_set)  # type: ignore[arg-type]
    await primary.close()
    await replica.close()

    def dump(name: str) -> dict[str, list[tuple[Any, ...]]]:
        conn = sqlite3.connect(tmp_path / name)
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        out = {t: sorted(conn.execute(f"SELECT * FROM {t}").fetchall(), key=repr) for t in tables}
        conn.close()
        return out

    primary_rows = dump("p.sqlite")
    assert primary_rows == dump("r.sqlite")
    assert primary_rows["tasks"][0][2] == '"k"'  # the kind change was replaced back
    assert primary_rows["record_parts"] == []  # parts of replaced records were dropped


async def test_a_schema_1_file_and_its_write_sets_carry_over_to_the_current_schema(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An upgrade: a file written on schema 1 migrates at open keeping every row, and
    the write sets a host logged on schema 1 replay onto a current file to the same
    rows, so a replica rebuilt from an old snapshot and log after the upgrade is whole."""
    log: list[Any] = []

    class Keep:
        async def make_durable(self, seq: int, write_set: Any) -> None:
            log.append(write_set)

    monkeypatch.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:1])
    monkeypatch.setattr("core.storage.sqlite.storage.SCHEMA_VERSION", 1)
    old = await SqliteStorage.open(Sqlite3Database.open(tmp_path / "old.sqlite"), gate=Keep())
    await old.commit([ConversationRecord(1)])
    a, b, c, d, e, r = [await old.mint_id() for _ in range(6)]
    await old.commit(
        [
            Task(a, 1, "k", 1, {}, Pending({"phase": "p"}), abort_requested=True),
            Task(b, 1, "k", 1, {}, Running({"phase": "p"}), background=True),
            Task(c, 1, "other", 1, {}, Terminal(Completed(1))),
            Entry(e, 1, "custom", data={"x": 1}),
            DocumentCreate(d, "notes", "conversation", 1, None, "rewindable", 1, [1]),
            DocumentCreate(r, "usage", "conversation", 1, "u", "latest", 1, {"n": 1}),
        ]
    )
    at_base = await old.commit([DocumentChange(d, 1, ops=[["s", [1], 2]])])
    await old.commit([DocumentChange(d, 1, value=[9]), DocumentChange(r, 1, value={"n": 2})])
    await old.commit([DocumentChange(d, 1, ops=[["s", [1], 3]]), _task(b)])
    await old.close()
    monkeypatch.undo()
    assert {ws["schema"] for ws in log} == {1}

    migrated = await open_sqlite_storage(tmp_path / "old.sqlite")
    replica = await SqliteStorage.open(Sqlite3Database.open(tmp_path / "new.sqlite"))
    for ws in log:
        await replica.apply_write_set(ws)
    for storage in (migrated, replica):
        assert storage.seq == at_base + 2
        scans = [
            (await storage.scan_tasks(TaskQuery(**query))).items
            for query in (
                {"status": "pending"},
                {"status": "terminal"},
                {"abort_requested": True},
                {"abort_requested": False},
                {"background": True},
                {"background": False, "kind": "k"},
            )
        ]
        assert [[t.id for t in items] for items in scans] == [[a, b], [c], [a], [b, c], [], [a, b]]
        now, then = await storage.document(d), await storage.document(d, at_base)
        assert now is not None and now.value == [9, 3] and now.deltas_since_base == 1
        assert then is not None and then.value == [1, 2]
        usage = await storage.document(r)
        assert usage is not None and usage.value == {"n": 2}
        assert [x.id for x in (await storage.scan_entries(EntryQuery(1))).items] == [e]
    await migrated.close()
    await replica.close()

    def rows(name: str) -> tuple[list[Any], dict[str, list[Any]]]:
        conn = sqlite3.connect(tmp_path / name)
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        version = conn.execute("SELECT version FROM perdure_schema").fetchall()
        names = "SELECT name FROM sqlite_master WHERE type = 'table' AND name != 'perdure_schema'"
        tables = [t for (t,) in conn.execute(names)]
        out = {t: sorted(conn.execute(f"SELECT * FROM {t}").fetchall(), key=repr) for t in tables}
        conn.close()
        return version, out

    assert rows("old.sqlite") == rows("new.sqlite")
    assert rows("new.sqlite")[0] == [(schema.SCHEMA_VERSION,)]
    for too in (schema.WRITE_SETS_SINCE - 1, schema.SCHEMA_VERSION + 1):
        fresh = await SqliteStorage.open(Sqlite3Database.open(tmp_path / f"s{too}.sqlite"))
        with pytest.raises(StorageCorrupt, match="cannot be replayed"):
            await fresh.apply_write_set({**log[0], "schema": too})
        await fresh.close()


async def test_a_large_commit_splits_its_multi_row_statements_at_100_parameters(
    tmp_path: Path,
) -> None:
    recorder = Recorder(tmp_path / "wide.sqlite")
    storage = await SqliteStorage.open(recorder)
    await storage.commit([ConversationRecord(1)])
    ids = [await storage.mint_id() for _ in range(75)]
    tasks, entries = ids[:30], ids[30:]
    recorder.statements.clear()
    await storage.commit([*(_task(t) for t in tasks), *(Entry(e, 1, "custom") for e in entries)])
    inserts = [(s, p) for s, p in recorder.statements if s.startswith("INSERT")]
    assert max(len(p) for _, p in inserts) <= 100
    assert sum(s.startswith("INSERT INTO tasks") for s, _ in inserts) == 3  # 12 + 12 + 6 rows
    assert sum(s.startswith("INSERT INTO entries") for s, _ in inserts) == 3  # 20 + 20 + 5
    # Written again, the known task rows take the same upsert, and read back whole.
    recorder.statements.clear()
    running = [Task(t, 1, "k", 1, {"v": t}, Running({"phase": "q"})) for t in tasks]
    await storage.commit(running)
    written = [s for s, _ in recorder.statements if s.startswith(("INSERT", "UPDATE tasks"))]
    assert sum(s.startswith("INSERT INTO tasks") for s in written) == 3
    assert not any(s.startswith("UPDATE tasks") for s in written)
    assert (await storage.scan_tasks(TaskQuery(status="running", limit=100))).items == running
    assert [
        e.id for e in (await storage.scan_entries(EntryQuery(1, order="asc", limit=100))).items
    ] == entries
    await storage.close()


def test_the_planner_writes_a_task_as_its_json_would_encode() -> None:
    # plan_commit writes task rows without building Task.to_json(); the text must not drift.
    from core.jsonvalue import dumps
    from core.records import Completing, ErrorInfo, Failed, Pending, Waiting
    from core.storage.batch import _task_text

    states = [
        Running({"phase": "run", "args": [1, 2.5, None, "é"]}),
        Pending({"phase": "start"}),
        Waiting({"phase": "wait"}, (3, 4), "all_settled", 12),
        Waiting({"phase": "wait"}, (), "fail_fast", None),
        Completing(Failed(ErrorInfo("it broke", {"d": 1}), {"partial": True})),
        Terminal(Completed({"r": 1})),
        Terminal(Completed({})),
        Terminal(Completed(None)),
        Terminal(Failed(ErrorInfo("no"), None)),
        Running({}),
    ]
    for state, owner, memos, task_input, flags, kind in itertools.product(
        states,
        (None, 7),
        ({}, {"m": {"x": 1}}),
        ({"n": [1]}, {}, None),
        ((False, True), (True, False)),
        ("tool", 't\u00e9"q'),
    ):
        task = Task(12, 3, kind, 1, task_input, state, owner, *flags, 100, None, memos)
        assert _task_text(task) == dumps(task.to_json())


class _Deferring:
    """A deferring gate (see DeferringGate) whose flush waits until released."""

    def __init__(self) -> None:
        self.waiting: list[int] = []
        self.durable: list[int] = []
        self.hold: asyncio.Event | None = None

    @property
    def pending(self) -> int:
        return len(self.waiting)

    async def make_durable(self, seq: int, write_set: JsonObject) -> None:
        if self.hold is not None:
            await self.hold.wait()
        self.waiting.append(seq)

    async def flush(self) -> None:
        self.durable += self.waiting
        self.waiting = []


async def test_a_deferring_gate_makes_the_storage_flushable_after_the_commit_in_flight(
    tmp_path: Path,
) -> None:
    plain = await SqliteStorage.open(Sqlite3Database.open(tmp_path / "plain.sqlite"))
    await plain.commit([ConversationRecord(1)])
    assert plain.pending == 0
    await plain.flush()  # no gate that defers: nothing to do
    await plain.close()

    gate = _Deferring()
    storage = await SqliteStorage.open(Sqlite3Database.open(tmp_path / "a.sqlite"), gate=gate)
    await storage.commit([ConversationRecord(1)])
    assert (storage.pending, storage.seq, gate.durable) == (1, 1, [])  # applied, pending
    assert await storage.conversation(1) is not None
    gate.hold = asyncio.Event()
    in_flight = asyncio.ensure_future(storage.commit([Entry(await storage.mint_id(), 1, "x")]))
    await asyncio.sleep(0)
    flushing = asyncio.ensure_future(storage.flush())
    await asyncio.sleep(0)
    assert not flushing.done()  # behind the commit in flight (the commit lock)
    gate.hold.set()
    assert await in_flight == 2
    await flushing
    assert (storage.pending, gate.durable) == (0, [1, 2])
    await storage.close()
    with pytest.raises(StorageClosed):
        await storage.flush()
