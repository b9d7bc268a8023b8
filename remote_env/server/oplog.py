"""The op log: one SQLite row per op, written before the op's side effect.

``journal_mode=WAL`` and ``synchronous=FULL``: a row that was inserted survives a crash of the
server or of the machine, which is what lets a restarted server say ``lost`` instead of
"never heard of it". The key is ``(workspace, op_id)``: op ids are chosen by clients and two
actors may well pick the same one, and an op of another workspace must look absent (404).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiosqlite

__all__ = ["OpLog", "OpRow"]

_SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS ops (
    workspace        TEXT    NOT NULL,
    op_id            TEXT    NOT NULL,
    kind             TEXT    NOT NULL,
    request_sha256   TEXT    NOT NULL,
    attempt          INTEGER NOT NULL,
    status           TEXT    NOT NULL,
    target           TEXT,
    pid              INTEGER,
    pgid             INTEGER,
    proc_start_ticks INTEGER,
    boot_id          TEXT,
    pre_sha256       TEXT,
    post_sha256      TEXT,
    pending_result   TEXT,
    result           TEXT,
    error            TEXT,
    output_bytes     INTEGER NOT NULL DEFAULT 0,
    created_at       REAL    NOT NULL,
    finished_at      REAL,
    expires_at       REAL,
    PRIMARY KEY (workspace, op_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS ops_running ON ops (status) WHERE status = 'running';
CREATE INDEX IF NOT EXISTS ops_expiry ON ops (expires_at) WHERE expires_at IS NOT NULL;
"""


@dataclass(frozen=True, slots=True)
class OpRow:
    """One row of the ``ops`` table (JSON columns decoded)."""

    workspace: str
    op_id: str
    kind: str
    request_sha256: str
    attempt: int
    status: str
    created_at: float
    target: str | None = None
    pid: int | None = None
    pgid: int | None = None
    proc_start_ticks: int | None = None
    boot_id: str | None = None
    pre_sha256: str | None = None
    post_sha256: str | None = None
    pending_result: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    output_bytes: int = 0
    finished_at: float | None = None
    expires_at: float | None = None


_COLUMNS = (
    "workspace, op_id, kind, request_sha256, attempt, status, created_at, target, pid, pgid, "
    "proc_start_ticks, boot_id, pre_sha256, post_sha256, pending_result, result, error, "
    "output_bytes, finished_at, expires_at"
)


def _dump(value: dict[str, Any] | None) -> str | None:
    return None if value is None else json.dumps(value, separators=(",", ":"))


def _load(value: str | None) -> dict[str, Any] | None:
    if value is None:
        return None
    loaded = json.loads(value)
    return loaded if isinstance(loaded, dict) else None


def _row(values: Any) -> OpRow:
    (
        workspace,
        op_id,
        kind,
        request_sha256,
        attempt,
        status,
        created_at,
        target,
        pid,
        pgid,
        ticks,
        boot,
        pre,
        post,
        pending,
        result,
        error,
        output_bytes,
        finished_at,
        expires_at,
    ) = values
    return OpRow(
        workspace=workspace,
        op_id=op_id,
        kind=kind,
        request_sha256=request_sha256,
        attempt=attempt,
        status=status,
        created_at=created_at,
        target=target,
        pid=pid,
        pgid=pgid,
        proc_start_ticks=ticks,
        boot_id=boot,
        pre_sha256=pre,
        post_sha256=post,
        pending_result=_load(pending),
        result=_load(result),
        error=_load(error),
        output_bytes=output_bytes,
        finished_at=finished_at,
        expires_at=expires_at,
    )


class OpLog:
    """Async access to the op log; a single connection (one writer is enough)."""

    def __init__(self, db: aiosqlite.Connection) -> None:
        self._db = db

    @classmethod
    async def open(cls, path: Path) -> OpLog:
        """Open (creating if needed) the database at ``path``."""
        db = await aiosqlite.connect(path, timeout=10.0)
        try:
            await db.execute("PRAGMA journal_mode=WAL")
            await db.execute("PRAGMA synchronous=FULL")
            await db.execute("PRAGMA busy_timeout=10000")
            async with db.execute("PRAGMA user_version") as cursor:
                row = await cursor.fetchone()
            version = int(row[0]) if row else 0
            if version > _SCHEMA_VERSION:
                raise RuntimeError(f"op log schema {version} is newer than this server")
            await db.executescript(_SCHEMA)
            await db.execute(f"PRAGMA user_version={_SCHEMA_VERSION}")
            await db.commit()
        except BaseException:
            await db.close()
            raise
        return cls(db)

    async def close(self) -> None:
        """Close the connection."""
        await self._db.close()

    async def insert(self, row: OpRow) -> bool:
        """Insert a new ``running`` row; ``False`` if the key already exists."""
        cursor = await self._db.execute(
            "INSERT OR IGNORE INTO ops (workspace, op_id, kind, request_sha256, attempt, status, "
            "created_at, target) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                row.workspace,
                row.op_id,
                row.kind,
                row.request_sha256,
                row.attempt,
                row.status,
                row.created_at,
                row.target,
            ),
        )
        inserted = cursor.rowcount == 1
        await cursor.close()
        await self._db.commit()
        return inserted

    async def get(self, workspace: str, op_id: str) -> OpRow | None:
        """The row for ``(workspace, op_id)``, if any."""
        async with self._db.execute(
            f"SELECT {_COLUMNS} FROM ops WHERE workspace = ? AND op_id = ?", (workspace, op_id)
        ) as cursor:
            values = await cursor.fetchone()
        return None if values is None else _row(values)

    async def running(self) -> list[OpRow]:
        """Every row still marked ``running``."""
        async with self._db.execute(
            f"SELECT {_COLUMNS} FROM ops WHERE status = 'running'"
        ) as cursor:
            return [_row(values) for values in await cursor.fetchall()]

    async def _update(self, sql: str, params: tuple[Any, ...]) -> None:
        await self._db.execute(sql, params)
        await self._db.commit()

    async def note_attempt(self, workspace: str, op_id: str, attempt: int) -> None:
        """Remember the highest attempt number seen for an op."""
        await self._update(
            "UPDATE ops SET attempt = ? WHERE workspace = ? AND op_id = ? AND attempt < ?",
            (attempt, workspace, op_id, attempt),
        )

    async def set_process(
        self, workspace: str, op_id: str, *, pid: int, pgid: int, ticks: int | None, boot: str
    ) -> None:
        """Record the process group of a running command."""
        await self._update(
            "UPDATE ops SET pid = ?, pgid = ?, proc_start_ticks = ?, boot_id = ? "
            "WHERE workspace = ? AND op_id = ?",
            (pid, pgid, ticks, boot, workspace, op_id),
        )

    async def set_hashes(
        self,
        workspace: str,
        op_id: str,
        *,
        pre: str | None,
        post: str,
        pending_result: dict[str, Any],
    ) -> None:
        """Record a file mutation's before/after hashes and result before it is committed."""
        await self._update(
            "UPDATE ops SET pre_sha256 = ?, post_sha256 = ?, pending_result = ? "
            "WHERE workspace = ? AND op_id = ?",
            (pre, post, _dump(pending_result), workspace, op_id),
        )

    async def finish(
        self,
        workspace: str,
        op_id: str,
        *,
        status: str,
        result: dict[str, Any] | None,
        error: dict[str, Any] | None,
        output_bytes: int,
        finished_at: float,
        expires_at: float,
    ) -> None:
        """Write an op's terminal status and outcome."""
        await self._update(
            "UPDATE ops SET status = ?, result = ?, error = ?, output_bytes = ?, finished_at = ?, "
            "expires_at = ? WHERE workspace = ? AND op_id = ?",
            (
                status,
                _dump(result),
                _dump(error),
                output_bytes,
                finished_at,
                expires_at,
                workspace,
                op_id,
            ),
        )

    async def delete(self, workspace: str, op_id: str) -> None:
        """Forget an op (used when it was refused before any side effect)."""
        await self._update("DELETE FROM ops WHERE workspace = ? AND op_id = ?", (workspace, op_id))

    async def expire(self, now: float) -> list[tuple[str, str]]:
        """Delete finished ops whose retention ended; return their keys."""
        async with self._db.execute(
            "SELECT workspace, op_id FROM ops WHERE expires_at IS NOT NULL AND expires_at < ?",
            (now,),
        ) as cursor:
            keys = [(str(ws), str(op)) for ws, op in await cursor.fetchall()]
        if keys:
            await self._update(
                "DELETE FROM ops WHERE expires_at IS NOT NULL AND expires_at < ?", (now,)
            )
        return keys
