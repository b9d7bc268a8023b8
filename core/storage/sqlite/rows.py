"""Row decoding for :class:`~core.storage.sqlite.storage.SqliteStorage`: the columns
of ``documents``, ``revisions`` and the ``(id, record, parts)`` record tables turned back
into records, joining chunked records from ``record_parts``.

Shared by the reads (:mod:`core.storage.sqlite.queries`) and the commit planner's view
(:mod:`core.storage.sqlite.commit_view`), which both run inside a facade transaction.
"""

from __future__ import annotations

from typing import Any

from core.errors import StorageCorrupt
from core.jsonvalue import loads
from core.records import (
    MAX_ID,
    ConversationRecord,
    DocumentHistory,
    DocumentRecord,
    DocumentScope,
    DocumentState,
    conversation_from_json,
)
from core.storage.reads import StoredRevision, fold_revisions, historical_read_allowed
from core.storage.sqlite.database import Row, SqlExecutor

__all__ = [
    "DOC_COLUMNS",
    "decode_document",
    "decode_record",
    "owner_column",
    "read_conversation",
    "read_document_state",
    "read_revisions",
]

_NO_OWNER = 0  # documents.owner_id for session documents (keeps the address index NOT NULL)
_NO_KEY = "null"  # documents.key for singletons: the JSON encoding of None

DOC_COLUMNS = "id, kind, scope, owner_id, key, history, created_at, retired_at"


def owner_column(owner_id: int | None) -> int:
    return _NO_OWNER if owner_id is None else owner_id


def decode_document(row: Row) -> DocumentRecord:
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


def decode_record(ex: SqlExecutor, table: str, row: Row) -> Any:
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


def read_conversation(ex: SqlExecutor, conversation_id: int) -> ConversationRecord | None:
    rows = ex.fetch("SELECT id, record, parts FROM conversations WHERE id = ?", (conversation_id,))
    return conversation_from_json(decode_record(ex, "conversations", rows[0])) if rows else None


def read_document_state(ex: SqlExecutor, document_id: int, at: int | None) -> DocumentState | None:
    rows = ex.fetch(f"SELECT {DOC_COLUMNS} FROM documents WHERE id = ?", (document_id,))
    if not rows:
        return None
    rec = decode_document(rows[0])
    historical_read_allowed(rec, at)
    if not (rec.retired_at is None if at is None else rec.alive_at(at)):
        return None
    return read_revisions(ex, rec, at)


def read_revisions(ex: SqlExecutor, rec: DocumentRecord, at: int | None) -> DocumentState:
    """The value of the incarnation ``rec`` (read, and alive at ``at``) at ``at``
    (``None``: current), folded from its latest base revision on."""
    document_id = rec.id
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
