"""Writing a :class:`~core.storage.batch.CommitPlan` into the SQLite schema:
:func:`apply_plan` executes the plan's statements through a :class:`Writer`, either the
commit transaction's executor or a :class:`~core.storage.sqlite.write_set.WriteSetLog`
recording a two-phase commit's write set.

Execute only: no statement here reads an answer that steers a write, so a recorded
write set replays to the same rows on a replica.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from core.jsonvalue import dumps
from core.readonly import readonly
from core.records import MAX_ID, Task
from core.storage.batch import CommitPlan, kind_text
from core.storage.sqlite.database import SqlValue
from core.storage.sqlite.rows import owner_column
from core.storage.sqlite.schema import CHUNK_CHARS

__all__ = ["LatestRows", "Writer", "apply_plan", "task_row_key"]

_TASK_COLUMNS = "(id, conversation_id, kind, status, abort_requested, background, record, parts)"
_SUBMISSION_COLUMNS = "(id, conversation_id, request_id, status, record, parts)"
_EIGHT = "(?, ?, ?, ?, ?, ?, ?, ?)"
_SIX = "(?, ?, ?, ?, ?, ?)"
_MAX_PARAMS = 100  # the SqlExecutor contract's bound per statement

_ENTRIES = "INSERT INTO entries (id, conversation_id, head, record, parts) VALUES "
_REVISIONS = "INSERT INTO revisions (document_id, seq, base, version, content, parts) VALUES "
_TASKS = f"INSERT INTO tasks {_TASK_COLUMNS} VALUES "
# A task row this storage knows (new, or committed with the same conversation, kind and
# background) changes only in these columns: an upsert of just them leaves the indexes
# on the others untouched (SQLite rewrites an index whenever a SET names its column).
_TASKS_UPSERT = (
    " ON CONFLICT (id) DO UPDATE SET status = excluded.status,"
    " abort_requested = excluded.abort_requested, record = excluded.record,"
    " parts = excluded.parts"
)
_statements: dict[tuple[str, int, str], str] = {}


def _insert_rows(
    ex: Writer, head: str, rows: Sequence[tuple[SqlValue, ...]], tail: str = ""
) -> None:
    """Insert ``rows`` (all of one width) with as few statements as the parameter bound
    allows: one per commit for the usual handful of rows. The texts are interned, so
    the driver's statement cache sees the same few strings."""
    if not rows:
        return
    per = _MAX_PARAMS // len(rows[0])
    for start in range(0, len(rows), per):
        chunk = rows[start : start + per]
        key = (head, len(chunk), tail)
        sql = _statements.get(key)
        if sql is None:
            width = len(chunk[0])
            group = "(" + ", ".join(["?"] * width) + ")"
            sql = _statements.setdefault(key, head + ", ".join([group] * len(chunk)) + tail)
        ex.execute(sql, [value for row in chunk for value in row])


class Writer(Protocol):
    """What the commit plumbing writes through: a transaction's executor, or a
    :class:`WriteSetLog` recording the write set. Execute only: a read here would make
    a recorded write set depend on the replica it is replayed on."""

    def execute(self, sql: str, params: Sequence[SqlValue] = ()) -> None: ...


def _store(
    ex: Writer, table: str, key: str, text: str, chunked: set[str]
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


def _drop_parts(ex: Writer, table: str, key: str) -> None:
    ex.execute("DELETE FROM record_parts WHERE tbl = ? AND key = ?", (table, key))


@readonly
class LatestRows:
    """What a storage knows of a ``latest`` document's stored revisions, having written
    them itself: the seq of the newest, how many there are (``None``: not known) and,
    when the newest is a delta stored inline, its length in characters (else ``None``).
    With it a new base is written over the only row, and a delta is folded into the
    delta before it, without asking the file (see :func:`apply_plan`)."""

    newest: int
    rows: int | None
    delta_chars: int | None


def task_row_key(task: Task) -> tuple[int, str, int]:
    return task.conversation_id, kind_text(task.kind), int(task.background)


def apply_plan(
    ex: Writer,
    plan: CommitPlan,
    chunked: set[str],
    task_rows: dict[int, tuple[int, str, int]] | None = None,
    counters: tuple[int, int] | None = None,
    latest: dict[int, LatestRows] | None = None,
) -> dict[int, LatestRows | None]:
    """Write ``plan``; ``task_rows``: committed task rows' unchanging columns, where known;
    ``counters``: the ``(next_id, next_seq)`` to store in ``meta``, or ``None`` when the
    stored ones still bound this commit (see ``SqliteStorage``: counters reserved ahead);
    ``latest``: what is known of ``latest`` documents' rows. Returns what the commit
    makes known of them (``None``: forget), for the caller to adopt once it lands."""
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
    entry_rows: list[tuple[SqlValue, ...]] = []
    for entry, text in plan.entries:
        if len(text) <= CHUNK_CHARS:  # _store's common case, inline: every commit has one
            entry_rows.append((entry.id, entry.conversation_id, entry.head, text, 0))
            continue
        record, parts = _store(ex, "entries", str(entry.id), text, chunked)
        entry_rows.append((entry.id, entry.conversation_id, entry.head, record, parts))
    _insert_rows(ex, _ENTRIES, entry_rows)
    # Tasks and submissions are replaced whole, but an UPDATE of the columns that can
    # change touches far fewer index b-trees than INSERT OR REPLACE (delete + insert).
    # New task rows and rows this storage knows go in one upsert; for any other task
    # row the replacement runs only when an "immutable" column changed, which the
    # second statement of a pair learns from changes() (rows the UPDATE matched), so
    # every statement stays a pure write a replica can replay.
    known_rows: list[tuple[SqlValue, ...]] = []
    new_ids = plan.new_ids
    for task, text in plan.tasks.values():
        fresh = task.id in new_ids
        if not fresh and "tasks" in chunked:
            _drop_parts(ex, "tasks", str(task.id))
        if len(text) <= CHUNK_CHARS:  # _store's common case, inline: several a commit
            record, parts = text, 0
        else:
            record, parts = _store(ex, "tasks", str(task.id), text, chunked)
        kind = kind_text(task.kind)
        status, aborting, background = task.status, int(task.abort_requested), int(task.background)
        row = (task.id, task.conversation_id, kind, status, aborting, background, record, parts)
        if fresh or (
            task_rows is not None and task_rows.get(task.id) == (row[1], kind, background)
        ):
            # No row yet (the id was nobody's), or one with these very unchanging
            # columns (this storage committed it): the upsert writes it exactly.
            known_rows.append(row)
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
    _insert_rows(ex, _TASKS, known_rows, _TASKS_UPSERT)
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
                owner_column(doc.owner_id),
                dumps(doc.key),
                doc.history,
                doc.created_at,
                plan.versions[doc.id],
            ),
        )
    # A ``latest`` document is never read at an earlier point, so only its newest value
    # must be stored: a new base goes over its newest row and a delta is folded into the
    # delta before it, one row written each, where an insert now and a delete at the
    # next base were two (a Durable Object pays per row written; the usage ledger gets
    # a base and the live document deltas every round).
    learned: dict[int, LatestRows | None] = {}
    known = latest if latest is not None else {}
    revision_rows: list[tuple[SqlValue, ...]] = []
    rebased, deltas = set(plan.rebased_latest), set(plan.latest_deltas)
    for rev in plan.revisions:
        doc_id, seq = rev.document_id, rev.seq
        if doc_id in deltas and rev.content != "[]":
            rows = known.get(doc_id)
            chars = None if rows is None else rows.delta_chars
            if rows is not None and chars is not None and chars + len(rev.content) <= _FOLD_CHARS:
                ex.execute(_FOLD_DELTA, (seq, rev.content, doc_id, rows.newest))
                learned[doc_id] = LatestRows(seq, rows.rows, chars + len(rev.content) - 1)
                continue
        record, parts = _store(ex, "revisions", f"{doc_id}:{seq}", rev.content, chunked)
        rev_row = (doc_id, seq, int(rev.base), rev.version, record, parts)
        if doc_id in rebased:
            learned[doc_id] = LatestRows(seq, 1, None)
            rows = known.get(doc_id)
            if "revisions" in chunked:  # the parts of every older revision
                _drop_parts_of_revisions(ex, doc_id, seq - 1)
            if rows is not None:  # over the newest row, no insert
                ex.execute(_REBASE, (*rev_row[1:], doc_id, rows.newest))
                if rows.rows == 1:
                    continue  # nothing older to delete
            else:  # not known (a reopen since): beside the newest, in the batch insert
                revision_rows.append(rev_row)
            ex.execute("DELETE FROM revisions WHERE document_id = ? AND seq < ?", (doc_id, seq))
            continue
        revision_rows.append(rev_row)
        if doc_id in deltas:
            rows = known.get(doc_id)
            count = None if rows is None or rows.rows is None else rows.rows + 1
            inline = parts == 0 and rev.content != "[]"
            learned[doc_id] = LatestRows(seq, count, len(rev.content) if inline else None)
    for doc in plan.created_documents:
        if doc.history == "latest":
            learned[doc.id] = LatestRows(plan.seq, 1, None)
    _insert_rows(ex, _REVISIONS, revision_rows)
    for doc_id, version in plan.version_changes.items():
        ex.execute("UPDATE documents SET version = ? WHERE id = ?", (version, doc_id))
    for doc in plan.retired:
        ex.execute(
            "UPDATE documents SET retired_at = ?, version = NULL WHERE id = ?",
            (doc.retired_at, doc.id),
        )
        if doc.history == "latest":
            _drop_revisions(ex, doc.id, "revisions" in chunked)
            learned[doc.id] = None
    if counters is not None:
        ex.execute("UPDATE meta SET next_id = ?, next_seq = ? WHERE singleton = 1", counters)
    return learned


_REBASE = (
    "UPDATE revisions SET seq = ?, base = ?, version = ?, content = ?, parts = ?"
    " WHERE document_id = ? AND seq = ?"
)
# Two op lists as JSON text, "[a,b]" and "[c]", are one list "[a,b,c]" once joined.
# Folded only while the row stays short: past about 1 KB a row of this b-tree spills
# into overflow pages, and each fold cost twice an insert (callgrind, a tool round).
_FOLD_CHARS = 1000
_FOLD_DELTA = (
    "UPDATE revisions SET seq = ?,"
    " content = substr(content, 1, length(content) - 1) || ',' || substr(?, 2)"
    " WHERE document_id = ? AND seq = ?"
)


def _drop_parts_of_revisions(ex: Writer, document_id: int, bound: int) -> None:
    # Part keys are "<document id>:<seq>" (see apply_plan); built in SQL to stay write-only.
    ex.execute(
        "DELETE FROM record_parts WHERE tbl = 'revisions' AND key IN (SELECT"
        " CAST(document_id AS TEXT) || ':' || CAST(seq AS TEXT) FROM revisions"
        " WHERE document_id = ? AND seq <= ? AND parts > 0)",
        (document_id, bound),
    )


def _drop_revisions(ex: Writer, document_id: int, chunked: bool) -> None:
    """Reclaim every revision of a retired ``latest`` document."""
    if chunked:
        _drop_parts_of_revisions(ex, document_id, MAX_ID)
    ex.execute("DELETE FROM revisions WHERE document_id = ?", (document_id,))
