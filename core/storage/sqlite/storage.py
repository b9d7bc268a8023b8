"""SqliteStorage: the portable SQLite Storage, written against :class:`SqlDatabase`.

Each commit is one facade transaction: the shared planner validates the batch against
the rows it reads inside that transaction, then the plan is written. The storage is
the only writer of its database (the host guarantees it), so the id and seq counters
live in memory and are persisted with every commit.

With a :class:`~core.storage.sqlite.write_set.CommitGate` the commit has two phases:
*prepare* plans it in a read transaction and records its write set (the statements the
plan executes, see :mod:`core.storage.sqlite.write_set`), the gate makes that durable
elsewhere, and *apply* executes the write set in a write transaction. A gate refusal
leaves the file untouched. :meth:`SqliteStorage.apply_write_set` replays a recorded
write set on a replica (a host rebuilding its working copy from a log).

The commit plumbing only ever *executes* statements (no reads whose answer steers a
write), so what it records is exactly what it would have done.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from core.errors import StorageClosed, StorageCorrupt, StorageRejected
from core.jsonvalue import JsonObject, JsonValue, dumps, loads
from core.records import (
    MAX_ID,
    ConversationRecord,
    DocumentHistory,
    DocumentRecord,
    DocumentScope,
    DocumentState,
    Entry,
    SubmissionRecord,
    SubmissionStatus,
    Task,
    TaskStatus,
    conversation_from_json,
    entry_from_json,
    submission_from_json,
    task_from_json,
)
from core.storage.batch import CommitPlan, plan_commit
from core.storage.port import Cursor, Order, Page, Write
from core.storage.reads import StoredRevision, fold_revisions, fork_chain, historical_read_allowed
from core.storage.scan import ScanPosition, next_cursor, start_scan
from core.storage.sqlite.database import Row, SqlDatabase, SqlExecutor, SqlValue
from core.storage.sqlite.schema import CHUNK_CHARS, SCHEMA_VERSION, open_schema
from core.storage.sqlite.write_set import (
    WRITE_SET_FORMAT,
    CommitGate,
    WriteSetLog,
    replay_write_set,
)

__all__ = ["SqliteStorage"]

T = TypeVar("T")

_NO_OWNER = 0  # documents.owner_id for session documents (keeps the address index NOT NULL)
_NO_KEY = "null"  # documents.key for singletons: the JSON encoding of None
_ID_CACHE_LIMIT = 65_536


class SqliteStorage:
    """:class:`~core.storage.port.Storage` over any :class:`SqlDatabase`.

    Open with :meth:`open`, which migrates the schema. ``close()`` closes the database.
    ``gate`` (optional) makes every commit two-phase; see the module docstring.
    """

    def __init__(
        self,
        db: SqlDatabase,
        next_id: int,
        next_seq: int,
        chunked: set[str] | None = None,
        *,
        gate: CommitGate | None = None,
    ) -> None:
        self._db = db
        self._gate = gate
        self._chunked = chunked if chunked is not None else {"tasks", "submissions"}
        self._next_id = next_id
        self._next_seq = next_seq
        self._closed = False
        # Id ownership never changes once committed, so a bounded cache of it saves one
        # lookup per written record.
        self._known = _Known(next_id)
        self._commit_lock = asyncio.Lock()

    @classmethod
    async def open(cls, db: SqlDatabase, *, gate: CommitGate | None = None) -> SqliteStorage:
        # One transaction: the version check, any migrations and the metadata reads. On
        # a new file that is the whole schema in one commit, and a host opening many
        # actors at once pays one driver round trip per open, not one per step.
        next_id, next_seq, chunked = await db.transaction(open_schema)
        return cls(db, next_id, next_seq, chunked, gate=gate)

    @property
    def seq(self) -> int:
        """The seq of the newest commit in the file (0 when there is none)."""
        return self._next_seq - 1

    # ------------------------------------------------------------------ ids and commits

    async def mint_id(self) -> int:
        self._check()
        if self._next_id > MAX_ID:
            raise StorageRejected("ID space is exhausted")
        self._next_id += 1
        return self._next_id - 1

    async def commit(self, writes: Sequence[Write]) -> int:
        self._check()
        batch = list(writes)
        async with self._commit_lock:
            self._check()
            seq, next_id, known = self._next_seq, self._next_id, self._known
            if self._gate is None:

                def run(ex: SqlExecutor) -> CommitPlan:
                    plan = plan_commit(batch, _View(ex, known), seq, next_id)
                    _apply(ex, plan, self._chunked, known.task_rows)
                    return plan

                plan = await self._db.transaction(run)
            else:
                plan = await self._two_phase(self._gate, batch, seq, next_id, known)
            # Counters are only touched on the event loop thread (the transaction may run
            # on a driver thread), under the lock that also orders seqs.
            self._next_seq = plan.seq + 1
            self._next_id = max(self._next_id, plan.next_id)
            known.adopt(plan)
            return plan.seq

    async def _two_phase(
        self, gate: CommitGate, batch: list[Write], seq: int, next_id: int, known: _Known
    ) -> CommitPlan:
        chunked = set(self._chunked)  # adopted only once the write set is applied

        def prepare(ex: SqlExecutor) -> tuple[CommitPlan, WriteSetLog]:
            plan = plan_commit(batch, _View(ex, known), seq, next_id)
            log = WriteSetLog()
            _apply(log, plan, chunked, known.task_rows)
            return plan, log

        # The commit lock is held from here to the apply, and this storage is the file's
        # only writer, so the state the plan was made against cannot move in between.
        plan, log = await self._db.transaction(prepare, write=False)
        write_set = log.write_set(
            schema=SCHEMA_VERSION, seq=plan.seq, next_id=plan.next_id, chunked=chunked
        )
        await gate.make_durable(plan.seq, write_set)
        await self._db.transaction(partial(replay_write_set, write_set=write_set))
        self._chunked |= chunked
        return plan

    async def apply_write_set(self, write_set: JsonObject) -> int:
        """Replay a write set recorded by a two-phase commit of a replica; return its seq.

        This storage must hold exactly the state the write set was prepared against: the
        same schema version and ``seq`` one below the write set's (the host replays its
        log in order). Bypasses the gate — the write set is durable already. Raises
        :class:`~core.errors.StorageCorrupt` for a malformed or out-of-order write set
        and writes nothing then.
        """
        self._check()
        async with self._commit_lock:
            self._check()
            seq, next_id = write_set.get("seq"), write_set.get("next_id")
            if write_set.get("format") != WRITE_SET_FORMAT:
                raise StorageCorrupt(f"unknown write-set format {write_set.get('format')!r}")
            if write_set.get("schema") != SCHEMA_VERSION:
                raise StorageCorrupt(
                    f"write set of schema {write_set.get('schema')!r} cannot be replayed on"
                    f" schema {SCHEMA_VERSION}"
                )
            if type(seq) is not int or type(next_id) is not int:
                raise StorageCorrupt("write set has no seq or next_id")
            if seq != self._next_seq:
                raise StorageCorrupt(
                    f"write set for seq {seq} does not follow local seq {self._next_seq - 1}"
                )
            await self._db.transaction(partial(replay_write_set, write_set=write_set))
            self._next_seq = seq + 1
            self._next_id = max(self._next_id, next_id)
            self._chunked |= {str(t) for t in _json_list(write_set.get("chunked"))}
            # The caches only learn from plans; a replayed commit starts them afresh.
            self._known = _Known(next_id)
            return seq

    # ------------------------------------------------------------------ point reads

    async def conversation(self, conversation_id: int) -> ConversationRecord | None:
        return await self._read(lambda ex: _conversation(ex, conversation_id))

    async def entry(self, entry_id: int) -> Entry | None:
        def read(ex: SqlExecutor) -> Entry | None:
            rows = ex.fetch("SELECT id, record, parts FROM entries WHERE id = ?", (entry_id,))
            return entry_from_json(_record(ex, "entries", rows[0])) if rows else None

        return await self._read(read)

    async def visible_entry(self, conversation_id: int, entry_id: int) -> Entry | None:
        def read(ex: SqlExecutor) -> Entry | None:
            chain = fork_chain(conversation_id, lambda c: _conversation(ex, c))
            rows = ex.fetch("SELECT id, record, parts FROM entries WHERE id = ?", (entry_id,))
            if not rows:
                return None
            entry = entry_from_json(_record(ex, "entries", rows[0]))
            for cid, cap in chain:
                if cid == entry.conversation_id:
                    return entry if cap is None or entry.id <= cap else None
            return None

        return await self._read(read)

    async def latest_head(
        self, conversation_id: int, at_or_before: int | None = None
    ) -> Entry | None:
        def read(ex: SqlExecutor) -> Entry | None:
            best: Row | None = None
            for cid, cap in fork_chain(conversation_id, lambda c: _conversation(ex, c)):
                bound = _min_cap(cap, at_or_before)
                rows = ex.fetch(
                    "SELECT id, record, parts FROM entries WHERE conversation_id = ?"
                    " AND head IS NOT NULL AND id <= ? ORDER BY id DESC LIMIT 1",
                    (cid, MAX_ID if bound is None else bound),
                )
                if rows and (best is None or rows[0][0] > best[0]):
                    best = rows[0]
            return entry_from_json(_record(ex, "entries", best)) if best is not None else None

        return await self._read(read)

    async def task(self, task_id: int) -> Task | None:
        def read(ex: SqlExecutor) -> Task | None:
            rows = ex.fetch("SELECT id, record, parts FROM tasks WHERE id = ?", (task_id,))
            return task_from_json(_record(ex, "tasks", rows[0])) if rows else None

        return await self._read(read)

    async def submission(self, submission_id: int) -> SubmissionRecord | None:
        def read(ex: SqlExecutor) -> SubmissionRecord | None:
            rows = ex.fetch(
                "SELECT id, record, parts FROM submissions WHERE id = ?", (submission_id,)
            )
            return submission_from_json(_record(ex, "submissions", rows[0])) if rows else None

        return await self._read(read)

    async def submission_by_request(
        self, conversation_id: int, request_id: str
    ) -> SubmissionRecord | None:
        def read(ex: SqlExecutor) -> SubmissionRecord | None:
            rows = ex.fetch(
                "SELECT id, record, parts FROM submissions"
                " WHERE conversation_id = ? AND request_id = ?",
                (conversation_id, dumps(request_id)),
            )
            return submission_from_json(_record(ex, "submissions", rows[0])) if rows else None

        return await self._read(read)

    async def document(self, document_id: int, at: int | None = None) -> DocumentState | None:
        return await self._read(lambda ex: _document_state(ex, document_id, at))

    async def find_document(
        self,
        kind: str,
        scope: DocumentScope,
        owner_id: int | None = None,
        key: str | None = None,
        at: int | None = None,
    ) -> DocumentRecord | None:
        def read(ex: SqlExecutor) -> DocumentRecord | None:
            address = (dumps(kind), scope, _owner(owner_id), dumps(key))
            if at is None:
                rows = ex.fetch(
                    f"SELECT {_DOC_COLUMNS} FROM documents WHERE kind = ? AND scope = ?"
                    " AND owner_id = ? AND key = ? AND retired_at IS NULL",
                    address,
                )
            else:
                rows = ex.fetch(
                    f"SELECT {_DOC_COLUMNS} FROM documents WHERE kind = ? AND scope = ?"
                    " AND owner_id = ? AND key = ? AND created_at <= ?"
                    " AND (retired_at IS NULL OR retired_at > ?) ORDER BY created_at DESC LIMIT 1",
                    (*address, at, at),
                )
            return _document_record(rows[0]) if rows else None

        return await self._read(read)

    # ------------------------------------------------------------------ scans

    async def scan_conversations(
        self,
        *,
        owner_conversation_id: int | None = None,
        owner_task_id: int | None = None,
        order: Order | None = None,
        limit: int = 100,
        cursor: Cursor | None = None,
    ) -> Page[ConversationRecord]:
        filters: JsonObject = {
            "owner_conversation_id": owner_conversation_id,
            "owner_task_id": owner_task_id,
        }
        pos = start_scan("conversations", filters, order, "asc", limit, cursor)
        where, params = _where(
            [("owner_conversation_id", owner_conversation_id), ("owner_task_id", owner_task_id)]
        )
        return await self._scan(
            "conversations", filters, pos, "conversations", where, params, conversation_from_json
        )

    async def scan_entries(
        self,
        conversation_id: int,
        *,
        min_id: int | None = None,
        max_id: int | None = None,
        order: Order | None = None,
        limit: int = 100,
        cursor: Cursor | None = None,
    ) -> Page[Entry]:
        filters: JsonObject = {
            "conversation_id": conversation_id,
            "min_id": min_id,
            "max_id": max_id,
        }
        pos = start_scan("entries", filters, order, "desc", limit, cursor)

        def read(ex: SqlExecutor) -> Page[Entry]:
            rows: list[Row] = []
            for cid, cap in fork_chain(conversation_id, lambda c: _conversation(ex, c)):
                lo, hi = _bounds(pos, min_id, _min_cap(cap, max_id))
                if lo > hi:
                    continue
                rows.extend(
                    ex.fetch(
                        "SELECT id, record, parts FROM entries WHERE conversation_id = ?"
                        f" AND id >= ? AND id <= ? ORDER BY id {_dir(pos)} LIMIT ?",
                        (cid, lo, hi, pos.limit + 1),
                    )
                )
            rows.sort(key=lambda r: int(r[0]), reverse=pos.order == "desc")
            return _page(ex, "entries", filters, pos, "entries", rows, entry_from_json)

        return await self._read(read)

    async def scan_tasks(
        self,
        *,
        conversation_id: int | None = None,
        kind: str | None = None,
        status: TaskStatus | None = None,
        abort_requested: bool | None = None,
        background: bool | None = None,
        order: Order | None = None,
        limit: int = 100,
        cursor: Cursor | None = None,
    ) -> Page[Task]:
        filters: JsonObject = {
            "conversation_id": conversation_id,
            "kind": kind,
            "status": status,
            "abort_requested": abort_requested,
            "background": background,
        }
        pos = start_scan("tasks", filters, order, "asc", limit, cursor)
        where, params = _where(
            [
                ("conversation_id", conversation_id),
                ("kind", None if kind is None else dumps(kind)),
                ("status", status),
                ("abort_requested", None if abort_requested is None else int(abort_requested)),
                ("background", None if background is None else int(background)),
            ]
        )
        return await self._scan("tasks", filters, pos, "tasks", where, params, task_from_json)

    async def scan_submissions(
        self,
        *,
        conversation_id: int | None = None,
        status: SubmissionStatus | None = None,
        order: Order | None = None,
        limit: int = 100,
        cursor: Cursor | None = None,
    ) -> Page[SubmissionRecord]:
        filters: JsonObject = {"conversation_id": conversation_id, "status": status}
        pos = start_scan("submissions", filters, order, "asc", limit, cursor)
        where, params = _where([("conversation_id", conversation_id), ("status", status)])
        return await self._scan(
            "submissions", filters, pos, "submissions", where, params, submission_from_json
        )

    async def scan_documents(
        self,
        scope: DocumentScope,
        *,
        owner_id: int | None = None,
        kind: str | None = None,
        at: int | None = None,
        limit: int = 100,
        cursor: Cursor | None = None,
    ) -> Page[DocumentRecord]:
        filters: JsonObject = {"scope": scope, "owner_id": owner_id, "kind": kind, "at": at}
        pos = start_scan("documents", filters, "asc", "asc", limit, cursor)
        sql = f"SELECT {_DOC_COLUMNS} FROM documents WHERE scope = ? AND owner_id = ?"
        params: list[SqlValue] = [scope, _owner(owner_id)]
        if kind is not None:
            sql += " AND kind = ?"
            params.append(dumps(kind))
        if at is None:
            sql += " AND retired_at IS NULL"
        else:
            sql += " AND created_at <= ? AND (retired_at IS NULL OR retired_at > ?)"
            params += [at, at]
        sql += " AND id > ? ORDER BY id ASC LIMIT ?"
        params += [pos.after or 0, pos.limit + 1]

        def read(ex: SqlExecutor) -> Page[DocumentRecord]:
            recs = [_document_record(r) for r in ex.fetch(sql, params)]
            more = len(recs) > pos.limit
            recs = recs[: pos.limit]
            return Page(recs, next_cursor("documents", filters, pos, recs[-1].id) if more else None)

        return await self._read(read)

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            await self._db.close()

    # ------------------------------------------------------------------ helpers

    def _check(self) -> None:
        if self._closed:
            raise StorageClosed("storage is closed")

    async def _read(self, fn: Callable[[SqlExecutor], T]) -> T:
        self._check()
        return await self._db.transaction(fn, write=False)

    async def _scan(
        self,
        scan: str,
        filters: JsonObject,
        pos: ScanPosition,
        table: str,
        where: str,
        params: list[SqlValue],
        decode: Callable[[Any], T],
    ) -> Page[T]:
        lo, hi = _bounds(pos, None, None)
        sql = (
            f"SELECT id, record, parts FROM {table} WHERE {where}id >= ? AND id <= ?"
            f" ORDER BY id {_dir(pos)} LIMIT ?"
        )
        args = [*params, lo, hi, pos.limit + 1]
        return await self._read(
            lambda ex: _page(ex, scan, filters, pos, table, ex.fetch(sql, args), decode)
        )


# --------------------------------------------------------------------------- row helpers

_DOC_COLUMNS = "id, kind, scope, owner_id, key, history, created_at, retired_at"
_TASK_COLUMNS = "(id, conversation_id, kind, status, abort_requested, background, record, parts)"
_SUBMISSION_COLUMNS = "(id, conversation_id, request_id, status, record, parts)"
_EIGHT = "(?, ?, ?, ?, ?, ?, ?, ?)"
_SIX = "(?, ?, ?, ?, ?, ?)"


def _owner(owner_id: int | None) -> int:
    return _NO_OWNER if owner_id is None else owner_id


def _document_record(row: Row) -> DocumentRecord:
    scope: DocumentScope = row[2]
    history: DocumentHistory = row[5]
    return DocumentRecord(
        id=int(row[0]),
        kind=loads(row[1]),
        scope=scope,
        owner_id=None if scope == "session" else int(row[3]),
        key=loads(row[4]),
        history=history,
        created_at=int(row[6]),
        retired_at=None if row[7] is None else int(row[7]),
    )


def _record(ex: SqlExecutor, table: str, row: Row) -> Any:
    """Decode ``(id, record, parts)``, joining chunked records."""
    if row[2]:
        parts = ex.fetch(
            "SELECT data FROM record_parts WHERE tbl = ? AND key = ? ORDER BY part",
            (table, str(row[0])),
        )
        if len(parts) != row[2]:
            raise StorageCorrupt(f"{table} row {row[0]} is missing parts")
        return loads("".join(p[0] for p in parts))
    return loads(row[1])


def _conversation(ex: SqlExecutor, conversation_id: int) -> ConversationRecord | None:
    rows = ex.fetch("SELECT id, record, parts FROM conversations WHERE id = ?", (conversation_id,))
    return conversation_from_json(_record(ex, "conversations", rows[0])) if rows else None


def _document_state(ex: SqlExecutor, document_id: int, at: int | None) -> DocumentState | None:
    rows = ex.fetch(f"SELECT {_DOC_COLUMNS} FROM documents WHERE id = ?", (document_id,))
    if not rows:
        return None
    rec = _document_record(rows[0])
    historical_read_allowed(rec, at)
    if not (rec.retired_at is None if at is None else rec.alive_at(at)):
        return None
    point = MAX_ID if at is None else at
    base = ex.fetch(
        "SELECT seq FROM revisions WHERE document_id = ? AND base = 1 AND seq <= ?"
        " ORDER BY seq DESC LIMIT 1",
        (document_id, point),
    )
    start = int(base[0][0]) if base else 0
    revs = ex.fetch(
        "SELECT seq, base, version, content, parts FROM revisions"
        " WHERE document_id = ? AND seq >= ? AND seq <= ? ORDER BY seq",
        (document_id, start, point),
    )
    return fold_revisions(
        rec,
        (
            StoredRevision(
                int(r[0]),
                bool(r[1]),
                int(r[2]),
                _joined(ex, "revisions", f"{document_id}:{r[0]}", r[3], r[4]),
            )
            for r in revs
        ),
    )


def _joined(ex: SqlExecutor, table: str, key: str, inline: str | None, parts: int) -> str:
    if not parts:
        assert inline is not None
        return inline
    rows = ex.fetch(
        "SELECT data FROM record_parts WHERE tbl = ? AND key = ? ORDER BY part", (table, key)
    )
    if len(rows) != parts:
        raise StorageCorrupt(f"{table} row {key} is missing parts")
    return "".join(r[0] for r in rows)


def _where(filters: list[tuple[str, SqlValue]]) -> tuple[str, list[SqlValue]]:
    clauses = [f"{column} = ? AND " for column, value in filters if value is not None]
    return "".join(clauses), [value for _, value in filters if value is not None]


def _bounds(pos: ScanPosition, lo: int | None, hi: int | None) -> tuple[int, int]:
    """Inclusive id range for a scan page; always bounded so the plan is an index search."""
    low = 0 if lo is None else lo
    high = MAX_ID if hi is None else hi
    if pos.after is not None:
        if pos.order == "asc":
            low = max(low, pos.after + 1)
        else:
            high = min(high, pos.after - 1)
    return low, high


def _dir(pos: ScanPosition) -> str:
    return "ASC" if pos.order == "asc" else "DESC"


def _min_cap(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    return a if b is None else min(a, b)


def _page(
    ex: SqlExecutor,
    scan: str,
    filters: JsonObject,
    pos: ScanPosition,
    table: str,
    rows: list[Row],
    decode: Callable[[Any], T],
) -> Page[T]:
    more = len(rows) > pos.limit
    rows = rows[: pos.limit]
    items = [decode(_record(ex, table, r)) for r in rows]
    return Page(items, next_cursor(scan, filters, pos, int(rows[-1][0])) if more else None)


# --------------------------------------------------------------------------- commit plumbing


@dataclass
class _Known:
    """What this storage knows without asking its database. It is the only writer, so
    what it committed stays true until its own next commit; the caches are bounded and
    only ever hold committed facts."""

    committed_next_id: int
    """Every committed id is below this: larger ids belong to nobody yet."""
    owners: dict[int, str] = field(default_factory=dict)
    versions: dict[int, int] = field(default_factory=dict)
    records: dict[int, DocumentRecord] = field(default_factory=dict)
    task_rows: dict[int, tuple[int, str, int]] = field(default_factory=dict)
    """``(conversation_id, kind, background)`` of task rows as committed: an update that
    keeps them needs no fallback replacement (see ``_apply``)."""

    def adopt(self, plan: CommitPlan) -> None:
        self.committed_next_id = max(self.committed_next_id, plan.next_id)
        for cache in (self.owners, self.versions, self.records, self.task_rows):
            if len(cache) > _ID_CACHE_LIMIT:
                cache.clear()
        self.owners.update(plan.new_ids)
        self.versions.update(plan.versions)
        for task, _text in plan.tasks.values():
            self.task_rows[task.id] = _task_row_key(task)
        for rec in plan.created_documents:
            self.records[rec.id] = rec
        for rec in plan.retired:
            self.versions.pop(rec.id, None)
            self.records[rec.id] = rec


class _View:
    """The planner's view, answered from :class:`_Known` or by queries inside the commit
    transaction."""

    def __init__(self, ex: SqlExecutor, known: _Known) -> None:
        self.ex = ex
        self.known = known

    def id_owner(self, record_id: int) -> str | None:
        if record_id >= self.known.committed_next_id:
            return None
        owner = self.known.owners.get(record_id)
        if owner is not None:
            return owner
        rows = self.ex.fetch("SELECT type FROM record_ids WHERE id = ?", (record_id,))
        return str(rows[0][0]) if rows else None

    def submission_for_request(self, conversation_id: int, request_id: str) -> int | None:
        rows = self.ex.fetch(
            "SELECT id FROM submissions WHERE conversation_id = ? AND request_id = ?",
            (conversation_id, dumps(request_id)),
        )
        return int(rows[0][0]) if rows else None

    def document_record(self, document_id: int) -> DocumentRecord | None:
        cached = self.known.records.get(document_id)
        if cached is not None:
            return cached
        rows = self.ex.fetch(f"SELECT {_DOC_COLUMNS} FROM documents WHERE id = ?", (document_id,))
        return _document_record(rows[0]) if rows else None

    def document_version(self, document_id: int) -> int | None:
        version = self.known.versions.get(document_id)
        if version is not None:
            return version
        rows = self.ex.fetch("SELECT version FROM documents WHERE id = ?", (document_id,))
        return int(rows[0][0]) if rows and rows[0][0] is not None else None

    def current_document(
        self, kind: str, scope: str, owner_id: int | None, key: str | None
    ) -> int | None:
        rows = self.ex.fetch(
            "SELECT id FROM documents WHERE kind = ? AND scope = ? AND owner_id = ? AND key = ?"
            " AND retired_at IS NULL",
            (dumps(kind), scope, _owner(owner_id), dumps(key)),
        )
        return int(rows[0][0]) if rows else None

    def document_state(self, document_id: int, at: int | None) -> DocumentState | None:
        return _document_state(self.ex, document_id, at)


class _Writer(Protocol):
    """What the commit plumbing writes through: a transaction's executor, or a
    :class:`WriteSetLog` recording the write set. Execute only: a read here would make
    a recorded write set depend on the replica it is replayed on."""

    def execute(self, sql: str, params: Sequence[SqlValue] = ()) -> None: ...


def _json_list(value: JsonValue) -> list[JsonValue]:
    return value if isinstance(value, list) else []


def _store(
    ex: _Writer, table: str, key: str, text: str, chunked: set[str]
) -> tuple[str | None, int]:
    """Return what goes in the row's ``(record, parts)`` columns, writing parts if needed.

    ``chunked`` collects the tables that hold parts, so replacing a record elsewhere can
    skip looking for parts to delete."""
    if len(text) <= CHUNK_CHARS:
        return text, 0
    chunked.add(table)
    chunks = [text[i : i + CHUNK_CHARS] for i in range(0, len(text), CHUNK_CHARS)]
    for n, chunk in enumerate(chunks):
        ex.execute(
            "INSERT INTO record_parts (tbl, key, part, data) VALUES (?, ?, ?, ?)",
            (table, key, n, chunk),
        )
    return None, len(chunks)


def _drop_parts(ex: _Writer, table: str, key: str) -> None:
    ex.execute("DELETE FROM record_parts WHERE tbl = ? AND key = ?", (table, key))


def _task_row_key(task: Task) -> tuple[int, str, int]:
    return task.conversation_id, dumps(task.kind), int(task.background)


def _apply(
    ex: _Writer,
    plan: CommitPlan,
    chunked: set[str],
    task_rows: dict[int, tuple[int, str, int]] | None = None,
) -> None:
    """Write ``plan``; ``task_rows``: committed task rows' unchanging columns, where known."""
    # One statement for the new ids (50 rows at most: 100 bound parameters).
    new_ids = list(plan.new_ids.items())
    for start in range(0, len(new_ids), 50):
        rows = new_ids[start : start + 50]
        ex.execute(
            "INSERT INTO record_ids (id, type) VALUES " + ", ".join(["(?, ?)"] * len(rows)),
            tuple(value for row in rows for value in row),
        )
    for conv, text in plan.conversations:
        record, parts = _store(ex, "conversations", str(conv.id), text, chunked)
        ex.execute(
            "INSERT INTO conversations (id, owner_conversation_id, owner_task_id, record, parts)"
            " VALUES (?, ?, ?, ?, ?)",
            (
                conv.id,
                conv.owner.conversation_id if conv.owner else None,
                conv.owner.task_id if conv.owner else None,
                record,
                parts,
            ),
        )
    for entry, text in plan.entries:
        record, parts = _store(ex, "entries", str(entry.id), text, chunked)
        ex.execute(
            "INSERT INTO entries (id, conversation_id, head, record, parts) VALUES (?, ?, ?, ?, ?)",
            (entry.id, entry.conversation_id, entry.head, record, parts),
        )
    # Tasks and submissions are replaced whole, but an UPDATE of the columns that can
    # change touches far fewer index b-trees than INSERT OR REPLACE (delete + insert);
    # the replacement runs only for new rows or when an "immutable" column changed,
    # which the second statement learns from changes() (rows the UPDATE matched), so
    # the pair stays a pure write a replica can replay.
    for task, text in plan.tasks.values():
        key = str(task.id)
        fresh = task.id in plan.new_ids
        if not fresh and "tasks" in chunked:
            _drop_parts(ex, "tasks", key)
        record, parts = _store(ex, "tasks", key, text, chunked)
        kind = dumps(task.kind)
        status, aborting, background = task.status, int(task.abort_requested), int(task.background)
        row = (task.id, task.conversation_id, kind, status, aborting, background, record, parts)
        if fresh:
            ex.execute(f"INSERT OR REPLACE INTO tasks {_TASK_COLUMNS} VALUES {_EIGHT}", row)
        elif task_rows is not None and task_rows.get(task.id) == _task_row_key(task):
            # The row exists with these very columns (this storage committed it): the
            # UPDATE matches it, so the replacement below would do nothing.
            ex.execute(
                "UPDATE tasks SET status = ?, abort_requested = ?, record = ?, parts = ?"
                " WHERE id = ?",
                (status, aborting, record, parts, task.id),
            )
        else:
            ex.execute(
                "UPDATE tasks SET status = ?, abort_requested = ?, record = ?, parts = ?"
                " WHERE id = ? AND conversation_id = ? AND kind = ? AND background = ?",
                (status, aborting, record, parts, task.id, task.conversation_id, kind, background),
            )
            ex.execute(
                f"INSERT OR REPLACE INTO tasks {_TASK_COLUMNS} SELECT {_EIGHT[1:-1]}"
                " WHERE changes() = 0",
                row,
            )
    for sub, text in plan.submissions.values():
        key = str(sub.id)
        fresh = sub.id in plan.new_ids
        if not fresh and "submissions" in chunked:
            _drop_parts(ex, "submissions", key)
        record, parts = _store(ex, "submissions", key, text, chunked)
        request = None if sub.request_id is None else dumps(sub.request_id)
        srow = (sub.id, sub.conversation_id, request, sub.status, record, parts)
        if fresh:
            ex.execute(
                f"INSERT OR REPLACE INTO submissions {_SUBMISSION_COLUMNS} VALUES {_SIX}", srow
            )
        else:
            ex.execute(
                "UPDATE submissions SET request_id = ?, status = ?, record = ?, parts = ?"
                " WHERE id = ? AND conversation_id = ?",
                (request, sub.status, record, parts, sub.id, sub.conversation_id),
            )
            ex.execute(
                f"INSERT OR REPLACE INTO submissions {_SUBMISSION_COLUMNS} SELECT {_SIX[1:-1]}"
                " WHERE changes() = 0",
                srow,
            )
    for doc in plan.created_documents:
        ex.execute(
            "INSERT INTO documents (id, kind, scope, owner_id, key, history, created_at, version)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                doc.id,
                dumps(doc.kind),
                doc.scope,
                _owner(doc.owner_id),
                dumps(doc.key),
                doc.history,
                doc.created_at,
                plan.versions[doc.id],
            ),
        )
    for rev in plan.revisions:
        key = f"{rev.document_id}:{rev.seq}"
        record, parts = _store(ex, "revisions", key, rev.content, chunked)
        ex.execute(
            "INSERT INTO revisions (document_id, seq, base, version, content, parts)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (rev.document_id, rev.seq, int(rev.base), rev.version, record, parts),
        )
    for doc_id, version in plan.version_changes.items():
        ex.execute("UPDATE documents SET version = ? WHERE id = ?", (version, doc_id))
    for doc_id in plan.rebased_latest:
        _drop_revisions(ex, doc_id, plan.seq, "revisions" in chunked)
    for doc in plan.retired:
        ex.execute(
            "UPDATE documents SET retired_at = ?, version = NULL WHERE id = ?",
            (doc.retired_at, doc.id),
        )
        if doc.history == "latest":
            _drop_revisions(ex, doc.id, None, "revisions" in chunked)
    ex.execute(
        "UPDATE meta SET next_id = ?, next_seq = ? WHERE singleton = 1",
        (plan.next_id, plan.seq + 1),
    )


def _drop_revisions(ex: _Writer, document_id: int, before: int | None, chunked: bool) -> None:
    """Reclaim revisions a ``latest`` document no longer needs (all when ``before`` is None)."""
    bound = MAX_ID if before is None else before - 1
    if chunked:
        # Part keys are "<document id>:<seq>" (see _apply); built in SQL to stay write-only.
        ex.execute(
            "DELETE FROM record_parts WHERE tbl = 'revisions' AND key IN (SELECT"
            " CAST(document_id AS TEXT) || ':' || CAST(seq AS TEXT) FROM revisions"
            " WHERE document_id = ? AND seq <= ? AND parts > 0)",
            (document_id, bound),
        )
    ex.execute("DELETE FROM revisions WHERE document_id = ? AND seq <= ?", (document_id, bound))


if TYPE_CHECKING:  # mypy proves the adapter satisfies its port
    from core.storage.port import Storage

    def _conforms(adapter: SqliteStorage) -> Storage:
        return adapter
