"""What the commit planner (:func:`~core.storage.batch.plan_commit`) sees of a SQLite
file: :class:`Known`, the committed facts the storage caches because it is the file's
only writer, and :class:`PlannerView`, which answers from them or by queries inside the
commit transaction.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from core.jsonvalue import dumps
from core.records import DocumentRecord, DocumentState
from core.storage.batch import CommitPlan
from core.storage.sqlite.commit_writes import LatestRows, task_row_key
from core.storage.sqlite.database import SqlExecutor
from core.storage.sqlite.rows import (
    DOC_COLUMNS,
    decode_document,
    owner_column,
    read_document_state,
)

__all__ = ["Known", "PlannerView"]

_ID_CACHE_LIMIT = 65_536


@dataclass
class Known:
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
    keeps them needs no fallback replacement (see ``apply_plan``)."""
    latest: dict[int, LatestRows] = field(default_factory=dict)
    """The stored revisions of ``latest`` documents, as ``apply_plan`` left them."""

    def adopt(self, plan: CommitPlan, latest: dict[int, LatestRows | None]) -> None:
        """Learn what the landed ``plan`` committed; ``latest``: what ``apply_plan``
        returned for it."""
        self.committed_next_id = max(self.committed_next_id, plan.next_id)
        for cache in (self.owners, self.versions, self.records, self.task_rows, self.latest):
            if len(cache) > _ID_CACHE_LIMIT:
                cache.clear()
        for doc_id, rows in latest.items():
            if rows is None:
                self.latest.pop(doc_id, None)
            else:
                self.latest[doc_id] = rows
        self.owners.update(plan.new_ids)
        self.versions.update(plan.versions)
        for task, _text in plan.tasks.values():
            self.task_rows[task.id] = task_row_key(task)
        for rec in plan.created_documents:
            self.records[rec.id] = rec
        for rec in plan.retired:
            self.versions.pop(rec.id, None)
            self.records[rec.id] = rec


class PlannerView:
    """The planner's view, answered from :class:`Known` or by queries inside the commit
    transaction."""

    def __init__(self, ex: SqlExecutor, known: Known) -> None:
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
        rows = self.ex.fetch(f"SELECT {DOC_COLUMNS} FROM documents WHERE id = ?", (document_id,))
        if not rows:
            return None
        record = decode_document(rows[0])
        # Read before the commit writes anything, so committed: kept, or a reopened
        # storage reads a live document's row on every commit that writes it (only a
        # retire changes the row, and ``adopt`` learns that from the plan).
        self.known.records[document_id] = record
        return record

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
            (dumps(kind), scope, owner_column(owner_id), dumps(key)),
        )
        return int(rows[0][0]) if rows else None

    def document_state(self, document_id: int, at: int | None) -> DocumentState | None:
        return read_document_state(self.ex, document_id, at)
