"""SQLite schema and its migrations.

``perdure_schema`` holds the schema version; :data:`MIGRATIONS` lists the statements
that take a database from version ``i`` to ``i + 1``. Migrations run in order, each in
the transaction that opens the storage together with the version bumps, so a crash
mid-upgrade leaves the database at its previous version.

Layout notes:

* one row per entry, per task, per submission and per document revision — never a
  transcript or a document history in one row;
* a record whose JSON exceeds :data:`CHUNK_CHARS` is split into ``record_parts`` rows so
  no row approaches the Durable Object 2 MB row limit (JSON is stored ASCII-only, so
  characters are bytes);
* strings that are indexed (task kinds, request ids, document kinds and keys) are
  stored JSON-encoded so lone surrogates stay distinct;
* every scan is served by an index (checked with ``EXPLAIN QUERY PLAN`` in the tests);
  a task scan for a value nearly every task holds (not aborting, not in the background,
  terminal) follows the table's id order instead, where almost every row read is an
  answer, and the rare values have partial indexes (see migration 2).
"""

from __future__ import annotations

from core.errors import StorageCorrupt
from core.storage.sqlite.database import SqlExecutor

__all__ = [
    "CHUNK_CHARS",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "WRITE_SETS_SINCE",
    "apply_migrations",
    "open_schema",
    "schema_version",
]

CHUNK_CHARS = 512 * 1024

MIGRATIONS: list[list[str]] = [
    [
        """CREATE TABLE meta (
            singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
            next_id INTEGER NOT NULL,
            next_seq INTEGER NOT NULL
        ) STRICT""",
        "INSERT INTO meta (singleton, next_id, next_seq) VALUES (1, 2, 1)",
        "CREATE TABLE record_ids (id INTEGER PRIMARY KEY, type TEXT NOT NULL) STRICT",
        """CREATE TABLE conversations (
            id INTEGER PRIMARY KEY,
            owner_conversation_id INTEGER,
            owner_task_id INTEGER,
            record TEXT,
            parts INTEGER NOT NULL DEFAULT 0
        ) STRICT""",
        "CREATE INDEX conversations_by_owner_conversation"
        " ON conversations (owner_conversation_id, id)",
        "CREATE INDEX conversations_by_owner_task ON conversations (owner_task_id, id)",
        """CREATE TABLE entries (
            id INTEGER PRIMARY KEY,
            conversation_id INTEGER NOT NULL,
            head INTEGER,
            record TEXT,
            parts INTEGER NOT NULL DEFAULT 0
        ) STRICT""",
        "CREATE INDEX entries_by_conversation ON entries (conversation_id, id)",
        "CREATE INDEX entries_heads ON entries (conversation_id, id) WHERE head IS NOT NULL",
        """CREATE TABLE tasks (
            id INTEGER PRIMARY KEY,
            conversation_id INTEGER NOT NULL,
            kind TEXT NOT NULL,
            status TEXT NOT NULL,
            abort_requested INTEGER NOT NULL,
            background INTEGER NOT NULL,
            record TEXT,
            parts INTEGER NOT NULL DEFAULT 0
        ) STRICT""",
        "CREATE INDEX tasks_by_conversation ON tasks (conversation_id, id)",
        "CREATE INDEX tasks_by_kind ON tasks (kind, id)",
        "CREATE INDEX tasks_by_status ON tasks (status, id)",
        "CREATE INDEX tasks_by_abort ON tasks (abort_requested, id)",
        "CREATE INDEX tasks_by_background ON tasks (background, id)",
        """CREATE TABLE submissions (
            id INTEGER PRIMARY KEY,
            conversation_id INTEGER NOT NULL,
            request_id TEXT,
            status TEXT NOT NULL,
            record TEXT,
            parts INTEGER NOT NULL DEFAULT 0
        ) STRICT""",
        "CREATE INDEX submissions_by_conversation ON submissions (conversation_id, id)",
        "CREATE INDEX submissions_by_status ON submissions (status, id)",
        "CREATE UNIQUE INDEX submissions_by_request ON submissions (conversation_id, request_id)"
        " WHERE request_id IS NOT NULL",
        """CREATE TABLE documents (
            id INTEGER PRIMARY KEY,
            kind TEXT NOT NULL,
            scope TEXT NOT NULL,
            owner_id INTEGER NOT NULL,
            key TEXT NOT NULL,
            history TEXT NOT NULL,
            created_at INTEGER NOT NULL,
            retired_at INTEGER,
            version INTEGER
        ) STRICT""",
        "CREATE INDEX documents_by_address ON documents (kind, scope, owner_id, key, created_at)",
        "CREATE INDEX documents_by_scope ON documents (scope, owner_id, id)",
        "CREATE INDEX documents_by_scope_kind ON documents (scope, owner_id, kind, id)",
        """CREATE TABLE revisions (
            document_id INTEGER NOT NULL,
            seq INTEGER NOT NULL,
            base INTEGER NOT NULL,
            version INTEGER NOT NULL,
            content TEXT,
            parts INTEGER NOT NULL DEFAULT 0
        ) STRICT""",
        "CREATE UNIQUE INDEX revisions_by_document ON revisions (document_id, seq)",
        "CREATE INDEX revisions_bases ON revisions (document_id, base, seq)",
        """CREATE TABLE record_parts (
            tbl TEXT NOT NULL,
            key TEXT NOT NULL,
            part INTEGER NOT NULL,
            data TEXT NOT NULL
        ) STRICT""",
        "CREATE UNIQUE INDEX record_parts_by_key ON record_parts (tbl, key, part)",
    ],
    # 2: fewer b-trees written per commit (each one a WAL page at least). Task indexes
    # on a value most tasks share (``abort_requested = 0``, ``background = 0``,
    # ``status = 'terminal'``) cost a page on every task write and serve scans for that
    # value no better than the table's own id order, where nearly every row matches:
    # the rare values keep partial indexes, and the status index holds live tasks only
    # (what opening a session scans). Revisions are clustered by their key (WITHOUT
    # ROWID: the table is the (document, seq) index) and have no other index: the
    # newest base at or before a point is found walking back over the deltas after it,
    # which the read that asked then reads anyway. Who owns an id is told by the record
    # tables themselves (an id is each table's primary key), so ``record_ids`` becomes a
    # view over them instead of a table every commit appends to; its INSTEAD OF trigger
    # absorbs the inserts of write sets recorded on schema 1, which replay unchanged
    # otherwise: no table lost or renamed a column (WRITE_SETS_SINCE).
    [
        "DROP TABLE record_ids",
        """CREATE VIEW record_ids (id, type) AS
            SELECT id, 'conversation' FROM conversations
            UNION ALL SELECT id, 'entry' FROM entries
            UNION ALL SELECT id, 'task' FROM tasks
            UNION ALL SELECT id, 'submission' FROM submissions
            UNION ALL SELECT id, 'document' FROM documents""",
        "CREATE TRIGGER record_ids_implied INSTEAD OF INSERT ON record_ids BEGIN SELECT 1; END",
        "DROP INDEX tasks_by_status",
        "DROP INDEX tasks_by_abort",
        "DROP INDEX tasks_by_background",
        "CREATE INDEX tasks_live ON tasks (status, id) WHERE status != 'terminal'",
        "CREATE INDEX tasks_aborting ON tasks (id) WHERE abort_requested = 1",
        "CREATE INDEX tasks_in_background ON tasks (id) WHERE background = 1",
        """CREATE TABLE revisions_clustered (
            document_id INTEGER NOT NULL,
            seq INTEGER NOT NULL,
            base INTEGER NOT NULL,
            version INTEGER NOT NULL,
            content TEXT,
            parts INTEGER NOT NULL DEFAULT 0,
            PRIMARY KEY (document_id, seq)
        ) STRICT, WITHOUT ROWID""",
        "INSERT INTO revisions_clustered (document_id, seq, base, version, content, parts)"
        " SELECT document_id, seq, base, version, content, parts FROM revisions",
        "DROP TABLE revisions",
        "ALTER TABLE revisions_clustered RENAME TO revisions",
    ],
]

SCHEMA_VERSION = len(MIGRATIONS)

WRITE_SETS_SINCE = 1
"""The oldest schema whose recorded write sets replay unchanged on this one: every
migration since kept each table's name and columns (a host's log may hold write sets
recorded before an upgrade, replayed onto a replica migrated at open)."""


def schema_version(ex: SqlExecutor) -> int:
    ex.execute("CREATE TABLE IF NOT EXISTS perdure_schema (version INTEGER NOT NULL) STRICT")
    rows = ex.fetch("SELECT version FROM perdure_schema")
    if not rows:
        ex.execute("INSERT INTO perdure_schema (version) VALUES (0)")
        return 0
    return int(rows[0][0])


def apply_migrations(ex: SqlExecutor, current: int) -> int:
    """Run the migration that follows ``current`` (one per transaction); return the new version."""
    for statement in MIGRATIONS[current]:
        ex.execute(statement)
    ex.execute("UPDATE perdure_schema SET version = ?", (current + 1,))
    return current + 1


def open_schema(ex: SqlExecutor) -> tuple[int, int, set[str]]:
    """Bring the schema up to :data:`SCHEMA_VERSION` (migrations in order, atomically with
    the version bumps) and read the counters and which tables hold chunked records."""
    version, target = schema_version(ex), len(MIGRATIONS)
    if version > target:
        raise StorageCorrupt(
            f"database schema version {version} is newer than this perdure ({target})"
        )
    while version < target:
        version = apply_migrations(ex, version)
    rows = ex.fetch("SELECT next_id, next_seq FROM meta WHERE singleton = 1")
    if not rows:
        raise StorageCorrupt("Durable SQLite metadata is missing")
    chunked = {
        table
        for table in ("tasks", "submissions")
        if ex.fetch("SELECT 1 FROM record_parts WHERE tbl = ? LIMIT 1", (table,))
    }
    return int(rows[0][0]), int(rows[0][1]), chunked
