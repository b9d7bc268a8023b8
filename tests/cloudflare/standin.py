"""A CPython stand-in for a SQLite-backed Durable Object's ``ctx.storage``.

Same shape as what a Python Durable Object sees through the Workers SDK (class and
method names are workerd's), backed by stdlib ``sqlite3`` on a file, with workerd's SQL
limits enforced by SQLite itself (``setlimit``) and its statement policy by an
authorizer: raw ``BEGIN``/``COMMIT``/``SAVEPOINT``, ``ATTACH`` and most pragmas are
refused; transactions go through ``transactionSync``. Rows come back the way the SDK
hands them to Python: ``toArray()`` and iteration give dicts, ``raw()`` gives lists.

:class:`DurableObjectHome` is what outlives an isolate: the SQLite file and the alarm.
``home.open()`` is a fresh ``DurableObjectStorage`` (a new isolate after an eviction).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

__all__ = [
    "MAX_BINDINGS",
    "MAX_STATEMENT_BYTES",
    "MAX_VALUE_BYTES",
    "DurableObjectHome",
    "DurableObjectStorage",
    "SqlStorage",
    "SqlStorageCursor",
    "SqlStorageError",
]

MAX_VALUE_BYTES = 2_000_000  # a row, string or BLOB (workerd: 2 MB)
MAX_STATEMENT_BYTES = 100_000  # one SQL statement (workerd: 100 KB)
MAX_BINDINGS = 100  # bound parameters per statement
_MAX_SAFE_INTEGER = 2**53 - 1  # larger Python ints would cross as BigInt

_ALLOWED_PRAGMAS = {"table_info", "table_xinfo", "table_list", "index_list", "index_info"}
_TRANSACTION_REFUSAL = (
    "To execute a transaction, please use the state.storage.transaction() or "
    "state.storage.transactionSync() APIs instead of the SQL BEGIN TRANSACTION or "
    "SAVEPOINT statements."
)


class SqlStorageError(Exception):
    """What a refused or failing ``sql.exec`` raises (workerd throws a JS ``Error``)."""


class SqlStorageCursor:
    """An eagerly materialised cursor (workerd's is lazy; the facade drains it anyway).

    ``rowsRead`` counts the rows the statement returned and ``rowsWritten`` the rows it
    inserted, updated or deleted (SQLite's change count). workerd's bill counts more: rows
    a query scans without returning them, and each index a written row updates; so these
    are lower bounds, good for comparing one change against another, not for a bill.
    """

    def __init__(self, columns: list[str], rows: list[tuple[Any, ...]], written: int) -> None:
        self.columnNames = columns
        self._rows = rows
        self._next = 0
        self.rowsRead = len(rows)
        self.rowsWritten = written

    def _take(self) -> list[tuple[Any, ...]]:
        rest = self._rows[self._next :]
        self._next = len(self._rows)
        return rest

    def toArray(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columnNames, r, strict=True)) for r in self._take()]

    def one(self) -> dict[str, Any]:
        rows = self.toArray()
        if len(rows) != 1:
            raise SqlStorageError("Expected exactly one result from SQL query")
        return rows[0]

    def raw(self) -> Iterator[list[Any]]:
        return iter([list(r) for r in self._take()])

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.toArray())


def _check_binding(value: Any) -> Any:
    # What the Workers SDK and workerd accept as a binding: null, number, string, bytes.
    scalar = value is None or isinstance(value, int | float | str | bytes)
    if isinstance(value, bool) or not scalar:
        raise TypeError(f"{type(value).__name__} cannot be bound to a SQL parameter")
    if isinstance(value, int) and abs(value) >= _MAX_SAFE_INTEGER:
        # Pyodide converts these to BigInt (2**53 - 1 included): not a documented binding type.
        raise TypeError("integer binding would cross to JavaScript as a BigInt")
    return value


def _as_js(row: tuple[Any, ...]) -> tuple[Any, ...]:
    # Every number crosses to Python as a JS double: an unsafe integer arrives as a float.
    return tuple(float(v) if isinstance(v, int) and abs(v) > _MAX_SAFE_INTEGER else v for v in row)


class SqlStorage:
    """``ctx.storage.sql``."""

    def __init__(self, conn: sqlite3.Connection, owner: DurableObjectStorage) -> None:
        self._conn = conn
        self._owner = owner
        self.statements = 0
        self.rows_read = 0  # totals of the cursors' rowsRead / rowsWritten
        self.rows_written = 0

    def exec(self, query: str, /, *bindings: Any) -> SqlStorageCursor:
        self._owner._check_open()
        if len(query.encode()) > MAX_STATEMENT_BYTES:
            raise SqlStorageError("SQLITE_TOOBIG: statement too long")
        if len(bindings) > MAX_BINDINGS:
            raise SqlStorageError("too many SQL variables")
        params = [_check_binding(b) for b in bindings]
        self.statements += 1
        before = self._conn.total_changes
        try:
            cur = self._conn.execute(query, params)
            rows = cur.fetchall()
        except sqlite3.DatabaseError as e:
            if "not authorized" in str(e) and self._owner._refused:
                raise SqlStorageError(self._owner._refused.pop()) from None
            raise SqlStorageError(f"{e}: SQLITE_ERROR") from None
        columns = [d[0] for d in cur.description or ()]
        cursor = SqlStorageCursor(
            columns, [_as_js(r) for r in rows], self._conn.total_changes - before
        )
        self.rows_read += cursor.rowsRead
        self.rows_written += cursor.rowsWritten
        return cursor

    @property
    def databaseSize(self) -> int:
        (pages,) = self._conn.execute("PRAGMA page_count").fetchone()
        (size,) = self._conn.execute("PRAGMA page_size").fetchone()
        return int(pages) * int(size)


class DurableObjectStorage:
    """``ctx.storage`` for one isolate's lifetime over the home's SQLite file."""

    def __init__(self, home: DurableObjectHome) -> None:
        self._home = home
        self._conn = sqlite3.connect(str(home.path), isolation_level=None)
        # workerd's SQLite does not fsync in the request path (the output gate confirms
        # writes); WAL with synchronous=NORMAL keeps fsyncs out here too, as in the
        # JavaScript stand-in, so per-round costs compare like for like.
        self._conn.execute("PRAGMA journal_mode = WAL")
        self._conn.execute("PRAGMA synchronous = NORMAL")
        self._conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
        self._conn.setlimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, MAX_STATEMENT_BYTES)
        self._conn.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, MAX_BINDINGS)
        self._conn.set_authorizer(self._authorize)
        self._depth = 0
        self._internal = False
        self._refused: list[str] = []
        self._closed = False
        self.sql = SqlStorage(self._conn, self)
        self.transactions = 0

    def _authorize(self, action: int, arg1: str | None, *_: Any) -> int:
        if self._internal:
            return sqlite3.SQLITE_OK
        if action in (sqlite3.SQLITE_TRANSACTION, sqlite3.SQLITE_SAVEPOINT):
            self._refused.append(_TRANSACTION_REFUSAL)
            return sqlite3.SQLITE_DENY
        if action in (sqlite3.SQLITE_ATTACH, sqlite3.SQLITE_DETACH):
            self._refused.append("ATTACH and DETACH are not allowed: SQLITE_AUTH")
            return sqlite3.SQLITE_DENY
        if action == sqlite3.SQLITE_PRAGMA and (arg1 or "").lower() not in _ALLOWED_PRAGMAS:
            self._refused.append(f"PRAGMA {arg1} is not allowed: SQLITE_AUTH")
            return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK

    def _internal_exec(self, sql: str) -> None:
        self._internal = True
        try:
            self._conn.execute(sql)
        finally:
            self._internal = False

    def transactionSync(self, fn: Callable[[], Any], /) -> Any:
        """Run ``fn()`` in a savepoint (nested calls nest); roll back if it raises."""
        self._check_open()
        name = f"standin_sync_savepoint_{self._depth}"
        self._internal_exec(f"SAVEPOINT {name}")
        self._depth += 1
        self.transactions += 1
        try:
            result = fn()
        except BaseException:
            self._depth -= 1
            self._internal_exec(f"ROLLBACK TO {name}")
            self._internal_exec(f"RELEASE {name}")
            raise
        self._depth -= 1
        self._internal_exec(f"RELEASE {name}")
        return result

    async def getAlarm(self) -> int | None:
        self._check_open()
        return self._home.alarm

    async def setAlarm(self, when: int | float | datetime) -> None:
        self._check_open()
        ms = when.timestamp() * 1000 if isinstance(when, datetime) else when
        self._home.alarm = int(ms)
        self._home.alarm_sets += 1

    async def deleteAlarm(self) -> None:
        self._check_open()
        self._home.alarm = None
        self._home.alarm_deletes += 1

    def _check_open(self) -> None:
        if self._closed:
            raise SqlStorageError("this isolate was evicted; its storage object is dead")

    def evict(self) -> None:
        """The isolate goes away: this object stops working; the file and alarm stay."""
        self._closed = True
        self._conn.close()


class DurableObjectHome:
    """What survives an eviction: the SQLite file and the single alarm.

    ``alarm_file``: keep the alarm in that file too, so it also survives the process (a
    crash test kills the isolate's process and delivers the alarm in a new one)."""

    def __init__(self, path: Path, *, alarm_file: Path | None = None) -> None:
        self.path = path
        self.alarm_file = alarm_file
        self._alarm: int | None = None
        if alarm_file is not None and alarm_file.exists():
            text = alarm_file.read_text().strip()
            self._alarm = int(text) if text else None
        self.alarm_sets = 0  # setAlarm / deleteAlarm calls, from every isolate
        self.alarm_deletes = 0
        self.current: DurableObjectStorage | None = None

    @property
    def alarm(self) -> int | None:
        return self._alarm

    @alarm.setter
    def alarm(self, when: int | None) -> None:
        self._alarm = when
        if self.alarm_file is not None:
            tmp = self.alarm_file.with_suffix(".tmp")
            tmp.write_text("" if when is None else str(when))
            tmp.replace(self.alarm_file)

    def open(self) -> DurableObjectStorage:
        """A fresh isolate's ``ctx.storage`` (the previous one, if any, is evicted)."""
        self.close()
        self.current = DurableObjectStorage(self)
        return self.current

    def close(self) -> None:
        """Evict the current isolate, if any (tests call it to release the file)."""
        if self.current is not None and not self.current._closed:
            self.current.evict()
