"""Two-phase commits of :class:`~core.storage.sqlite.SqliteStorage`: write sets and gates.

A *write set* is everything one commit writes to the SQLite file, as a JSON value: the
SQL statements with their parameters, in order, plus the counters they leave behind.
Executed in one transaction on a replica that holds exactly the state before the commit
(same schema version, same ``seq``), it reproduces the commit byte for byte. That lets a
host make a commit durable somewhere else first — the AWS host appends the write set to
a fenced DynamoDB log — and rebuild a replica later from a snapshot plus the log.

Shape (``format`` 1)::

    {"format": 1, "schema": <schema version>, "seq": <commit seq>, "next_id": <int>,
     "chunked": [<tables that received record_parts rows>],
     "sql": [<distinct statement texts>], "ops": [[<index into sql>, [<params>]], ...]}

Statements are interned (``sql`` lists each text once) because a commit repeats the
same few statements many times and the log pays for every byte. Parameters are JSON
scalars: the storage never binds ``bytes``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from core.errors import StorageCorrupt
from core.jsonvalue import JsonObject, JsonValue
from core.storage.sqlite.database import SqlExecutor, SqlValue

__all__ = ["WRITE_SET_FORMAT", "CommitGate", "DeferringGate", "WriteSetLog", "replay_write_set"]

WRITE_SET_FORMAT = 1


class CommitGate(Protocol):
    """Where a host makes a prepared commit durable before the storage applies it.

    :class:`~core.storage.sqlite.SqliteStorage` built with a gate commits in two phases:
    it plans the commit and records its write set without changing the file (*prepare*),
    awaits ``make_durable(seq, write_set)``, and only when that returns executes the
    write set locally (*apply*). The storage's commit lock is held throughout, so the
    gate sees commits one at a time, in seq order, each prepared against the state the
    previous one left.

    Contract for ``make_durable``:

    * return → the commit is durable elsewhere; the storage applies it locally. (If the
      local apply then fails, the storage raises an uncertain error: the durable copy is
      ahead and the host must rebuild the replica from it.)
    * raise :class:`~core.errors.StorageRejected` → the commit is guaranteed *not*
      durable anywhere; the storage applies nothing, keeps its seq and id counters, and
      the caller's session stays usable.
    * raise anything else → the outcome is unknown (for instance a timeout after the
      request left); the storage applies nothing and re-raises, and the session is
      poisoned (docs/design.md, invariant 13) until the host reopens the storage and reconciles
      the replica with the durable copy.

    A gate may also *defer* (:class:`DeferringGate`): then returning means the commit is
    accepted into the gate's pending group, and durable only once ``flush()`` returns.

    ``write_set`` is a JSON value (see the module docstring) the gate may keep; it must
    not mutate it.
    """

    async def make_durable(self, seq: int, write_set: JsonObject) -> None:
        """Make the prepared commit ``seq`` durable; the class docstring says what
        returning and each kind of exception mean."""
        ...


@runtime_checkable
class DeferringGate(Protocol):
    """A :class:`CommitGate` that may return from ``make_durable`` before the commit is
    durable elsewhere, keeping it pending, so that several commits become durable in one
    write. The storage then applies each commit locally at once and exposes ``flush()``
    (:class:`~core.storage.port.DeferringStorage`).

    ``make_durable`` keeps its contract for the commit it is given, with one addition:
    returning may mean *pending*. The gate may flush the earlier pending commits inside
    it (to bound what is pending); :class:`~core.errors.StorageRejected` then still means
    that this commit is not durable, and any pending ones stay pending.
    """

    @property
    def pending(self) -> int:
        """How many commits are pending."""
        ...

    async def make_durable(self, seq: int, write_set: JsonObject) -> None:
        """As :meth:`CommitGate.make_durable`; returning may leave the commit pending."""
        ...

    async def flush(self) -> None:
        """Make every pending commit durable. The storage calls it under its commit lock.
        Returns once they are; :class:`~core.errors.StorageRejected`: none became durable
        and all stay pending; anything else: they may never become durable, and the gate
        refuses every later call (the storage's owner must reopen it)."""
        ...


class WriteSetLog:
    """A write-only executor that records statements instead of running them.

    The storage's commit plumbing writes through ``execute`` only, so the same code
    either writes the file directly (no gate) or records the write set (prepare).
    """

    __slots__ = ("_index", "ops", "sql")

    def __init__(self) -> None:
        self.sql: list[str] = []
        self.ops: list[JsonValue] = []
        self._index: dict[str, int] = {}

    def execute(self, sql: str, params: Sequence[SqlValue] = ()) -> None:
        """Record one statement (its text once, its parameters per call)."""
        index = self._index.get(sql)
        if index is None:
            index = self._index[sql] = len(self.sql)
            self.sql.append(sql)
        values: list[JsonValue] = []
        for value in params:
            if isinstance(value, bytes):
                raise TypeError("write sets carry JSON scalars; the storage never binds bytes")
            values.append(value)
        self.ops.append([index, values])

    def write_set(self, *, schema: int, seq: int, next_id: int, chunked: set[str]) -> JsonObject:
        """The recorded statements as the JSON write set of commit ``seq``."""
        tables: list[JsonValue] = [*sorted(chunked)]
        return {
            "format": WRITE_SET_FORMAT,
            "schema": schema,
            "seq": seq,
            "next_id": next_id,
            "chunked": tables,
            "sql": [*self.sql],
            "ops": list(self.ops),
        }


def replay_write_set(ex: SqlExecutor, write_set: JsonObject) -> None:
    """Execute ``write_set``'s statements, in order, inside the caller's transaction.

    Raises :class:`~core.errors.StorageCorrupt` for a value that is not a well-formed
    write set (it comes from outside: a log, a network). Compatibility of ``schema``
    and ``seq`` is the caller's check.
    """
    sql, ops = write_set.get("sql"), write_set.get("ops")
    if not isinstance(sql, list) or not isinstance(ops, list):
        raise StorageCorrupt("write set has no statement list")
    for op in ops:
        if not (isinstance(op, list) and len(op) == 2):
            raise StorageCorrupt(f"malformed write-set operation {op!r}")
        index, params = op
        if not isinstance(params, list):
            raise StorageCorrupt(f"malformed write-set operation {op!r}")
        if type(index) is not int or not 0 <= index < len(sql):
            raise StorageCorrupt(f"write-set operation names statement {index!r}")
        statement = sql[index]
        if not isinstance(statement, str):
            raise StorageCorrupt("write-set statement is not text")
        for value in params:
            if value is not None and type(value) not in (int, float, str):
                raise StorageCorrupt(f"write-set parameter {value!r} is not a SQL scalar")
        ex.execute(statement, params)  # type: ignore[arg-type]  # checked scalars above
