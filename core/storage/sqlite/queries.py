"""The read side of :class:`~core.storage.sqlite.storage.SqliteStorage`: point reads
and paged scans, each one read transaction of the :class:`SqlDatabase` facade.

:class:`SqliteQueries` is the storage's base class; it owns the closed check and the
read-transaction helper the storage's commit path uses too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from core.errors import StorageClosed
from core.jsonvalue import JsonObject, dumps
from core.records import (
    MAX_ID,
    ConversationRecord,
    DocumentRecord,
    DocumentScope,
    DocumentState,
    Entry,
    SubmissionRecord,
    Task,
    conversation_from_json,
    entry_from_json,
    submission_from_json,
    task_from_json,
)
from core.storage.port import (
    ConversationQuery,
    Cursor,
    DocumentQuery,
    EntryQuery,
    Page,
    SubmissionQuery,
    TaskQuery,
)
from core.storage.reads import fork_chain
from core.storage.scan import ScanPosition, min_cap, next_cursor, start_scan
from core.storage.sqlite.database import Row, SqlDatabase, SqlExecutor, SqlValue
from core.storage.sqlite.rows import (
    DOC_COLUMNS,
    decode_document,
    decode_record,
    owner_column,
    read_conversation,
    read_document_state,
    read_revisions,
)

__all__ = ["SqliteQueries"]

T = TypeVar("T")
_IDS_PER_STATEMENT = 100  # the facade's bound on parameters per statement


class SqliteQueries:
    """The :class:`~core.storage.port.Storage` reads over ``_db``; the subclass sets
    ``_db`` and ``_closed``."""

    _db: SqlDatabase
    _closed: bool

    # ------------------------------------------------------------------ point reads

    async def conversation(self, conversation_id: int) -> ConversationRecord | None:
        return await self._read(lambda ex: read_conversation(ex, conversation_id))

    async def conversations(self, conversation_ids: Sequence[int]) -> list[ConversationRecord]:
        ids = sorted(set(conversation_ids))

        def read(ex: SqlExecutor) -> list[ConversationRecord]:
            out: list[ConversationRecord] = []
            for start in range(0, len(ids), _IDS_PER_STATEMENT):
                chunk = ids[start : start + _IDS_PER_STATEMENT]
                marks = ",".join("?" * len(chunk))
                for row in ex.fetch(
                    f"SELECT id, record, parts FROM conversations WHERE id IN ({marks})"
                    " ORDER BY id",
                    chunk,
                ):
                    out.append(conversation_from_json(decode_record(ex, "conversations", row)))
            return out

        return await self._read(read) if ids else []

    async def entry(self, entry_id: int) -> Entry | None:
        def read(ex: SqlExecutor) -> Entry | None:
            rows = ex.fetch("SELECT id, record, parts FROM entries WHERE id = ?", (entry_id,))
            return entry_from_json(decode_record(ex, "entries", rows[0])) if rows else None

        return await self._read(read)

    async def visible_entry(self, conversation_id: int, entry_id: int) -> Entry | None:
        def read(ex: SqlExecutor) -> Entry | None:
            chain = fork_chain(conversation_id, lambda c: read_conversation(ex, c))
            rows = ex.fetch("SELECT id, record, parts FROM entries WHERE id = ?", (entry_id,))
            if not rows:
                return None
            entry = entry_from_json(decode_record(ex, "entries", rows[0]))
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
            for cid, cap in fork_chain(conversation_id, lambda c: read_conversation(ex, c)):
                bound = min_cap(cap, at_or_before)
                rows = ex.fetch(
                    "SELECT id, record, parts FROM entries WHERE conversation_id = ?"
                    " AND head IS NOT NULL AND id <= ? ORDER BY id DESC LIMIT 1",
                    (cid, MAX_ID if bound is None else bound),
                )
                if rows and (best is None or rows[0][0] > best[0]):
                    best = rows[0]
            return entry_from_json(decode_record(ex, "entries", best)) if best is not None else None

        return await self._read(read)

    async def task(self, task_id: int) -> Task | None:
        def read(ex: SqlExecutor) -> Task | None:
            rows = ex.fetch("SELECT id, record, parts FROM tasks WHERE id = ?", (task_id,))
            return task_from_json(decode_record(ex, "tasks", rows[0])) if rows else None

        return await self._read(read)

    async def submission(self, submission_id: int) -> SubmissionRecord | None:
        def read(ex: SqlExecutor) -> SubmissionRecord | None:
            rows = ex.fetch(
                "SELECT id, record, parts FROM submissions WHERE id = ?", (submission_id,)
            )
            return submission_from_json(decode_record(ex, "submissions", rows[0])) if rows else None

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
            return submission_from_json(decode_record(ex, "submissions", rows[0])) if rows else None

        return await self._read(read)

    async def document(self, document_id: int, at: int | None = None) -> DocumentState | None:
        return await self._read(lambda ex: read_document_state(ex, document_id, at))

    async def find_document(
        self,
        kind: str,
        scope: DocumentScope,
        owner_id: int | None = None,
        key: str | None = None,
        at: int | None = None,
    ) -> DocumentRecord | None:
        def read(ex: SqlExecutor) -> DocumentRecord | None:
            address = (dumps(kind), scope, owner_column(owner_id), dumps(key))
            if at is None:
                rows = ex.fetch(
                    f"SELECT {DOC_COLUMNS} FROM documents WHERE kind = ? AND scope = ?"
                    " AND owner_id = ? AND key = ? AND retired_at IS NULL",
                    address,
                )
            else:
                rows = ex.fetch(
                    f"SELECT {DOC_COLUMNS} FROM documents WHERE kind = ? AND scope = ?"
                    " AND owner_id = ? AND key = ? AND created_at <= ?"
                    " AND (retired_at IS NULL OR retired_at > ?) ORDER BY created_at DESC LIMIT 1",
                    (*address, at, at),
                )
            return decode_document(rows[0]) if rows else None

        return await self._read(read)

    async def current_documents(
        self, kind: str, scope: DocumentScope, owner_ids: Sequence[int], key: str | None = None
    ) -> list[DocumentState]:
        owners = sorted(set(owner_ids))

        def read(ex: SqlExecutor) -> list[DocumentState]:
            records: list[DocumentRecord] = []
            for start in range(0, len(owners), _IDS_PER_STATEMENT - 3):
                chunk = owners[start : start + _IDS_PER_STATEMENT - 3]
                marks = ",".join("?" * len(chunk))
                rows = ex.fetch(
                    f"SELECT {DOC_COLUMNS} FROM documents WHERE kind = ? AND scope = ?"
                    f" AND key = ? AND owner_id IN ({marks}) AND retired_at IS NULL",
                    (dumps(kind), scope, dumps(key), *chunk),
                )
                records.extend(decode_document(row) for row in rows)
            records.sort(key=lambda rec: rec.owner_id or 0)
            return [read_revisions(ex, rec, None) for rec in records]

        return await self._read(read) if owners else []

    # ------------------------------------------------------------------ scans

    async def scan_conversations(
        self, query: ConversationQuery, cursor: Cursor | None = None
    ) -> Page[ConversationRecord]:
        filters = query.filters()
        pos = start_scan("conversations", filters, query.order, "asc", query.limit, cursor)
        where, params = _where(
            [
                ("owner_conversation_id", query.owner_conversation_id),
                ("owner_task_id", query.owner_task_id),
            ]
        )
        return await self._scan(
            "conversations", filters, pos, "conversations", where, params, conversation_from_json
        )

    async def scan_entries(self, query: EntryQuery, cursor: Cursor | None = None) -> Page[Entry]:
        filters = query.filters()
        pos = start_scan("entries", filters, query.order, "desc", query.limit, cursor)

        def read(ex: SqlExecutor) -> Page[Entry]:
            rows: list[Row] = []
            chain = fork_chain(query.conversation_id, lambda c: read_conversation(ex, c))
            for cid, cap in chain:
                lo, hi = _bounds(pos, query.min_id, min_cap(cap, query.max_id))
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

    async def scan_tasks(self, query: TaskQuery, cursor: Cursor | None = None) -> Page[Task]:
        filters = query.filters()
        pos = start_scan("tasks", filters, query.order, "asc", query.limit, cursor)
        kind, status = query.kind, query.status
        where, params = _where(
            [
                ("conversation_id", query.conversation_id),
                ("kind", None if kind is None else dumps(kind)),
                ("status", status),
            ]
        )
        # The partial indexes of schema 2 serve a query only when its WHERE spells out
        # theirs: the live-status term, and the flags as literals (0 or 1, from bools).
        if status is not None and status != "terminal":
            where += "status != 'terminal' AND "
        if query.abort_requested is not None:
            where += f"abort_requested = {int(bool(query.abort_requested))} AND "
        if query.background is not None:
            where += f"background = {int(bool(query.background))} AND "
        return await self._scan("tasks", filters, pos, "tasks", where, params, task_from_json)

    async def scan_submissions(
        self, query: SubmissionQuery, cursor: Cursor | None = None
    ) -> Page[SubmissionRecord]:
        filters = query.filters()
        pos = start_scan("submissions", filters, query.order, "asc", query.limit, cursor)
        where, params = _where(
            [("conversation_id", query.conversation_id), ("status", query.status)]
        )
        return await self._scan(
            "submissions", filters, pos, "submissions", where, params, submission_from_json
        )

    async def scan_documents(
        self, query: DocumentQuery, cursor: Cursor | None = None
    ) -> Page[DocumentRecord]:
        filters = query.filters()
        pos = start_scan("documents", filters, "asc", "asc", query.limit, cursor)
        sql = f"SELECT {DOC_COLUMNS} FROM documents WHERE scope = ? AND owner_id = ?"
        params: list[SqlValue] = [query.scope, owner_column(query.owner_id)]
        if query.kind is not None:
            sql += " AND kind = ?"
            params.append(dumps(query.kind))
        at = query.at
        if at is None:
            sql += " AND retired_at IS NULL"
        else:
            sql += " AND created_at <= ? AND (retired_at IS NULL OR retired_at > ?)"
            params += [at, at]
        sql += " AND id > ? ORDER BY id ASC LIMIT ?"
        params += [pos.after or 0, pos.limit + 1]

        def read(ex: SqlExecutor) -> Page[DocumentRecord]:
            recs = [decode_document(r) for r in ex.fetch(sql, params)]
            more = len(recs) > pos.limit
            recs = recs[: pos.limit]
            return Page(recs, next_cursor("documents", filters, pos, recs[-1].id) if more else None)

        return await self._read(read)

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
    items = [decode(decode_record(ex, table, r)) for r in rows]
    return Page(items, next_cursor(scan, filters, pos, int(rows[-1][0])) if more else None)
