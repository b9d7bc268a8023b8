"""The SqlDatabase facade: the only thing the portable SQLite storage needs from a driver.

Four calls, no driver import. Adapters exist for aiosqlite and stdlib ``sqlite3``
(``runtimes.local``); one over the Durable Object ``ctx.storage.sql`` is the Cloudflare
host's to write (it does not exist yet). Pragmas (WAL, ``synchronous``) are the
adapter's business: a Durable Object, for instance, does not allow them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeAlias, TypeVar

__all__ = ["Row", "SqlDatabase", "SqlExecutor", "SqlValue"]

T = TypeVar("T")
SqlValue: TypeAlias = int | float | str | bytes | None
Row: TypeAlias = tuple[Any, ...]


class SqlExecutor(Protocol):
    """Synchronous statement execution inside :meth:`SqlDatabase.transaction`.

    Parameters are positional (``?``); no statement binds more than 100 of them.
    """

    def execute(self, sql: str, params: Sequence[SqlValue] = ()) -> None:
        """Run one statement for its effect. Errors propagate and abort the
        transaction."""
        ...

    def fetch(self, sql: str, params: Sequence[SqlValue] = ()) -> list[Row]:
        """Run one query and return all its rows as tuples, in the statement's order."""
        ...


class SqlDatabase(Protocol):
    """An async handle on one SQLite database.

    ``transaction(fn)`` runs the *synchronous* ``fn`` with an executor inside one atomic
    transaction: if ``fn`` returns, everything it executed is committed and its result
    returned; if it raises, everything is rolled back and the exception propagates.
    ``fn`` must not await and must not touch the database except through the executor
    (Durable Objects run it in ``transactionSync``; aiosqlite runs it on its worker
    thread in one hop). Transactions never interleave with each other or with
    ``execute``/``fetch``. ``write=False`` marks a read-only transaction (a consistent
    snapshot for reads that take several statements).
    """

    async def execute(self, sql: str, params: Sequence[SqlValue] = ()) -> None:
        """Run one statement in its own transaction (schema set-up, pragmas)."""
        ...

    async def fetch(self, sql: str, params: Sequence[SqlValue] = ()) -> list[Row]:
        """Run one query outside any transaction of ours and return all its rows."""
        ...

    async def transaction(self, fn: Callable[[SqlExecutor], T], *, write: bool = True) -> T:
        """Run ``fn`` atomically, as the class docstring says; return what it returned.

        If the commit itself fails, the exception propagates and the outcome is
        whatever the driver guarantees: the storage treats it as uncertain.
        """
        ...

    async def close(self) -> None:
        """Release the database. Idempotent; nothing may be called afterwards."""
        ...
