"""The SqlDatabase facade over a Durable Object's ``ctx.storage``.

The portable :class:`~core.storage.sqlite.SqliteStorage` runs on it unchanged. What the
Durable Object gives us differs from a SQLite driver in three ways, each handled here:

* transactions: raw ``BEGIN``/``COMMIT``/``SAVEPOINT`` are refused; a write transaction
  is one ``ctx.storage.transactionSync(fn)`` call, which rolls back when ``fn`` throws;
* rows: ``sql.exec(query, *bindings)`` returns a cursor; ``raw()`` yields each row as a
  list in column order (``toArray()`` would give objects keyed by column name, which
  loses duplicate names and reorders integer-like ones);
* values crossing from JavaScript: ``null`` may arrive as Pyodide's ``JsNull`` and an
  ``ArrayBuffer`` as a ``memoryview``; both are normalised on read. Bindings are sent as
  plain scalars (the SDK refuses tuples and bytearrays; SQLite bindings refuse booleans
  and BigInts, and Pyodide turns ints from 2**53 - 1 up into BigInts, so those go as
  doubles). Every number is a JS double on the way: integers beyond 2**53 - 1 come
  back as Python floats (callers ``int()`` them; the schema has no REAL column).

Read-only transactions need no ``transactionSync``: ``fn`` is synchronous and a Durable
Object runs one JavaScript turn at a time, so nothing can interleave with its reads.

The module imports no ``js``/``pyodide`` at top level: it takes any object of the
:class:`DurableObjectStorage` shape, which is what ``self.ctx.storage`` is in a Python
Durable Object (the SDK's wrapper) and what the test stand-ins are. Inside Pyodide,
when a JavaScript storage is behind that object, it imports them to talk to it directly
(see :class:`DurableObjectDatabase`).
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from core.errors import StorageClosed
from core.storage.sqlite import Row, SqlExecutor, SqliteStorage, SqlValue

__all__ = [
    "DurableObjectDatabase",
    "DurableObjectStorage",
    "SqlCursor",
    "SqlStorage",
    "open_durable_object_storage",
]

T = TypeVar("T")


class SqlCursor(Protocol):
    """The part of workerd's ``SqlStorageCursor`` the facade uses."""

    def raw(self) -> Iterable[Sequence[Any]]:
        """The remaining rows, each as a sequence of column values in select order."""
        ...


class SqlStorage(Protocol):
    """``ctx.storage.sql``: runs one statement with positional ``?`` bindings."""

    def exec(self, query: str, /, *bindings: Any) -> SqlCursor: ...


class DurableObjectStorage(Protocol):
    """``ctx.storage`` of a SQLite-backed Durable Object, as far as the facade needs it.

    ``transactionSync(fn)`` calls ``fn()`` inside one transaction and returns its value;
    if ``fn`` raises, everything it executed is rolled back and the error propagates.
    """

    @property
    def sql(self) -> SqlStorage: ...

    def transactionSync(self, fn: Callable[[], Any], /) -> Any: ...


# Pyodide sends a Python int as a BigInt from this magnitude on (2**53 - 1 included),
# which is not among the SQL API's documented binding types (null, number, string, bytes).
_BIGINT_FROM = 2**53 - 1


def _binding(value: Any) -> Any:
    # bool is an int to Python but a JS boolean, which SQLite bindings refuse.
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int) and abs(value) >= _BIGINT_FROM:
        # A double carries it exactly when it is representable: MAX_ID (2**53 - 1, the
        # upper bound of every id range scan) and 2**53 (the exhausted id counter).
        as_float = float(value)
        if int(as_float) != value:
            raise ValueError(f"{value} cannot be bound exactly in a Durable Object")
        return as_float
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    return value


def _value(value: Any) -> Any:
    if value is None or isinstance(value, int | float | str | bytes):
        return value
    if isinstance(value, memoryview):
        return value.tobytes()
    if type(value).__name__ == "JsNull":  # pyodide.ffi.jsnull, without importing pyodide
        return None
    return value


Statements = Callable[[str, Sequence[SqlValue]], list[Row]]
Writes = Callable[[str, Sequence[SqlValue]], object]  # what it returns is not used


def _portable(sql: SqlStorage) -> Statements:
    """Statements through any object of the :class:`SqlStorage` shape."""

    def run(query: str, params: Sequence[SqlValue]) -> list[Row]:
        cursor = sql.exec(query, *[_binding(p) for p in params])
        # Always drain: an undrained cursor can hold a table lock (SQLITE_LOCKED).
        return [tuple([_value(v) for v in row]) for row in cursor.raw()]

    return run


def _native(sql: Any) -> tuple[Statements, Writes]:
    """Statements straight on workerd's JavaScript ``SqlStorage``, inside Pyodide: one
    that returns its rows, and one for writes, whose rows are drained but not converted.

    The SDK's wrapper converts every argument, result and row through its RPC
    converters (about 185 µs a statement under Node, 17x the statement); here a
    statement is three boundary crossings: ``exec``, ``Array.from(cursor.raw())`` and
    one ``to_py()`` of all its rows (none for a write). ``None`` must be sent as
    ``null`` (Pyodide's own conversion would send ``undefined``) and bytes as a
    ``Uint8Array``.
    """
    from js import Array  # type: ignore[import-not-found]  # only inside Pyodide
    from pyodide.ffi import jsnull, to_js  # type: ignore[import-not-found]

    array_from = getattr(Array, "from")  # "from" is a Python keyword
    execute = sql.exec

    def bind(value: Any) -> Any:
        # Strings, floats and small ints cross as they are; tested first, since a round
        # binds about 50 values and each Python call costs several times CPython's here.
        kind = type(value)
        if kind is str or kind is float or (kind is int and -_BIGINT_FROM < value < _BIGINT_FROM):
            return value
        if value is None:
            return jsnull
        value = _binding(value)
        return to_js(value) if isinstance(value, bytes) else value

    def run(query: str, params: Sequence[SqlValue]) -> list[Row]:
        cursor = execute(query, *[bind(p) for p in params])
        rows = array_from(cursor.raw()).to_py()
        return [tuple([_value(v) for v in row]) for row in rows]

    def write(query: str, params: Sequence[SqlValue]) -> None:
        array_from(execute(query, *[bind(p) for p in params]).raw())  # drained (_portable)

    return run, write


def _native_transaction(storage: Any) -> Callable[[Callable[[], Any]], Any]:
    """``transactionSync`` on the JavaScript storage through one long-lived proxy.

    Handing a Python function to JavaScript creates (and afterwards destroys) a proxy
    each time; one proxy that calls the current body saves that on every commit.
    """
    from pyodide.ffi import create_proxy

    current: list[Callable[[], Any]] = []
    proxy = create_proxy(lambda: current[-1]())
    transaction_sync = storage.transactionSync

    def run(body: Callable[[], Any]) -> Any:
        current.append(body)
        try:
            return transaction_sync(proxy)
        finally:
            current.pop()

    return run


def _javascript(storage: Any) -> Any | None:
    """The JavaScript ``DurableObjectStorage`` behind ``storage``, if there is one."""
    ffi = sys.modules.get("pyodide.ffi")
    js_proxy = getattr(ffi, "JsProxy", None)
    # The SDK (1.9.5) keeps the wrapped object in ``_binding``; the Pyodide suite checks
    # that this path is taken, so an SDK that moves it fails there, not in production.
    inner = getattr(storage, "_binding", storage)
    return inner if js_proxy is not None and isinstance(inner, js_proxy) else None


class _Executor:
    __slots__ = ("run", "write")

    def __init__(self, run: Statements, write: Writes | None = None) -> None:
        self.run = run
        self.write: Writes = write or run

    def execute(self, sql: str, params: Sequence[SqlValue] = ()) -> None:
        self.write(sql, params)

    def fetch(self, sql: str, params: Sequence[SqlValue] = ()) -> list[Row]:
        return self.run(sql, params)


class DurableObjectDatabase:
    """:class:`~core.storage.sqlite.SqlDatabase` over ``ctx.storage`` of one Durable Object.

    Inside Pyodide it talks to the JavaScript storage directly (``native``), past the
    SDK's per-call converters; ``native=False`` keeps every call on the given object
    (the tests run the storage kit both ways). ``close()`` only stops this handle: a
    Durable Object's database has no connection to close, and it outlives every isolate
    that opens it. ``before_write`` is awaited before every write transaction (the actor
    arms its heartbeat there, so no commit can be durable with no alarm to follow it).
    """

    def __init__(
        self,
        storage: DurableObjectStorage,
        *,
        native: bool = True,
        before_write: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._before_write = before_write
        js = _javascript(storage) if native else None
        self.native = js is not None
        self._transaction_sync: Callable[[Callable[[], Any]], Any]
        if js is not None:
            self._executor = _Executor(*_native(js.sql))
            self._transaction_sync = _native_transaction(js)
        else:
            self._executor = _Executor(_portable(storage.sql))
            self._transaction_sync = storage.transactionSync
        self._closed = False

    async def execute(self, sql: str, params: Sequence[SqlValue] = ()) -> None:
        self._check()
        self._executor.execute(sql, params)

    async def fetch(self, sql: str, params: Sequence[SqlValue] = ()) -> list[Row]:
        self._check()
        return self._executor.fetch(sql, params)

    async def transaction(self, fn: Callable[[SqlExecutor], T], *, write: bool = True) -> T:
        self._check()
        if not write:
            return fn(self._executor)
        if self._before_write is not None:
            await self._before_write()
            self._check()
        results: list[T] = []
        failures: list[BaseException] = []

        def body() -> None:
            # Return nothing across the boundary: the SDK converts a callback's result
            # and cannot convert every Python value (a cursor, for one).
            try:
                results.append(fn(self._executor))
            except BaseException as e:
                failures.append(e)
                raise

        try:
            self._transaction_sync(body)
        except BaseException:
            # Under Pyodide the error reaches us converted by the JS boundary; raise the
            # caller's own exception, the one ``fn`` raised.
            if not failures:
                raise
        if failures:
            raise failures[0]
        return results[0]

    async def close(self) -> None:
        self._closed = True

    def _check(self) -> None:
        if self._closed:
            raise StorageClosed("the Durable Object database handle is closed")


async def open_durable_object_storage(
    storage: DurableObjectStorage,
    *,
    native: bool = True,
    before_write: Callable[[], Awaitable[None]] | None = None,
) -> SqliteStorage:
    """Open (creating and migrating if needed) the harness storage in ``ctx.storage``."""
    return await SqliteStorage.open(
        DurableObjectDatabase(storage, native=native, before_write=before_write)
    )


if TYPE_CHECKING:  # mypy proves the adapter satisfies its port
    from core.storage.sqlite import SqlDatabase

    def _conforms(adapter: DurableObjectDatabase) -> SqlDatabase:
        return adapter
