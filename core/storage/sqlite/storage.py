"""SqliteStorage: the portable SQLite Storage, written against :class:`SqlDatabase`.

Each commit is one facade transaction: the shared planner validates the batch against
the rows it reads inside that transaction, then the plan is written. The storage is
the only writer of its database (the host guarantees it), so the id and seq counters
live in memory and are persisted with every commit.

With a :class:`~core.storage.sqlite.write_set.CommitGate` the commit has two phases:
*prepare* plans it in a read transaction and records its write set (the statements the
plan executes, see :mod:`core.storage.sqlite.write_set`), the gate makes that durable
elsewhere, and *apply* executes the write set in a write transaction. A gate refusal
leaves the file untouched. A gate that defers (a
:class:`~core.storage.sqlite.write_set.DeferringGate`) makes the storage a
:class:`~core.storage.port.DeferringStorage`: :meth:`SqliteStorage.flush` flushes it.
:meth:`SqliteStorage.apply_write_set` replays a recorded write set on a replica (a host
rebuilding its working copy from a log).

The commit plumbing only ever *executes* statements (no reads whose answer steers a
write), so what it records is exactly what it would have done.

Counters. ``meta`` holds bounds, not exact values: every committed id is below its
``next_id`` and every commit's seq below its ``next_seq``, which is all a reopen needs
to mint and commit on (ids and seqs may have gaps). Without a gate the storage stores
them :data:`COUNTER_RESERVE` ahead and rewrites ``meta`` only when a commit would pass
them, so most commits write no ``meta`` row (a Durable Object pays per row written).
A clean close stores them exactly; after a crash (or a Durable Object's eviction, which
closes nothing) ids and seqs go on from the bounds. With a gate every commit stores
the exact counters, as a replica rebuilt from a snapshot and a log must tell its seq.

This module holds the lifecycle and the commit paths (one-phase, two-phase, replay).
The reads live in :mod:`core.storage.sqlite.queries` (the base class), the planner's
view in :mod:`core.storage.sqlite.commit_view`, the plan's statements in
:mod:`core.storage.sqlite.commit_writes` and row decoding in
:mod:`core.storage.sqlite.rows`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, TypeAlias

from core.errors import StorageCorrupt, StorageRejected
from core.jsonvalue import JsonObject, JsonValue
from core.records import MAX_ID
from core.storage.batch import CommitPlan, plan_commit
from core.storage.port import Write
from core.storage.sqlite.commit_view import Known, PlannerView
from core.storage.sqlite.commit_writes import LatestRows, apply_plan
from core.storage.sqlite.database import SqlDatabase, SqlExecutor
from core.storage.sqlite.queries import SqliteQueries
from core.storage.sqlite.schema import SCHEMA_VERSION, WRITE_SETS_SINCE, open_schema
from core.storage.sqlite.write_set import (
    WRITE_SET_FORMAT,
    CommitGate,
    DeferringGate,
    WriteSetLog,
    replay_write_set,
)

__all__ = ["COUNTER_RESERVE", "SqliteStorage"]

Learned: TypeAlias = dict[int, LatestRows | None]
"""What a commit's ``apply_plan`` learned of ``latest`` documents' rows."""

COUNTER_RESERVE = 128
"""How far ahead of the counters an ungated commit stores them (see the module docstring):
``meta`` is rewritten about once per this many commits or ids, and a reopen skips at
most this many of each."""


class SqliteStorage(SqliteQueries):
    """:class:`~core.storage.port.Storage` over any :class:`SqlDatabase`.

    Open with :meth:`open`, which migrates the schema. ``close()`` closes the database.
    ``gate`` (optional) makes every commit two-phase; see the module docstring.
    """

    def __init__(
        self,
        db: SqlDatabase,
        next_id: int,
        next_seq: int,
        chunked: set[str] | None = None,
        *,
        gate: CommitGate | None = None,
    ) -> None:
        self._db = db
        self._gate = gate
        self._chunked = chunked if chunked is not None else {"tasks", "submissions"}
        self._next_id = next_id
        self._next_seq = next_seq
        self._stored = (next_id, next_seq)  # the bounds ``meta`` holds
        self._closed = False
        # Id ownership never changes once committed, so a bounded cache of it saves one
        # lookup per written record.
        self._known = Known(next_id)
        self._commit_lock = asyncio.Lock()

    @classmethod
    async def open(cls, db: SqlDatabase, *, gate: CommitGate | None = None) -> SqliteStorage:
        # One transaction: the version check, any migrations and the metadata reads. On
        # a new file that is the whole schema in one commit, and a host opening many
        # actors at once pays one driver round trip per open, not one per step.
        next_id, next_seq, chunked = await db.transaction(open_schema)
        return cls(db, next_id, next_seq, chunked, gate=gate)

    @property
    def seq(self) -> int:
        """The seq of the newest commit in the file (0 when there is none); after a reopen
        of a file that was not closed cleanly, a seq above it that no commit has (the
        counters are reserved ahead; see the module docstring)."""
        return self._next_seq - 1

    def _counters(self, plan: CommitPlan) -> tuple[int, int] | None:
        """What ``meta`` must hold after ``plan`` (``None``: what it holds will do)."""
        if self._gate is not None:
            return plan.next_id, plan.seq + 1
        stored_id, stored_seq = self._stored
        if plan.next_id <= stored_id and plan.seq < stored_seq:
            return None
        # Ids stop at MAX_ID + 1, the exhausted counter (and the largest value a Durable
        # Object binds exactly).
        return min(plan.next_id + COUNTER_RESERVE, MAX_ID + 1), plan.seq + 1 + COUNTER_RESERVE

    # ------------------------------------------------------------------ ids and commits

    async def mint_id(self) -> int:
        self._check()
        if self._next_id > MAX_ID:
            raise StorageRejected("ID space is exhausted")
        self._next_id += 1
        return self._next_id - 1

    async def commit(self, writes: Sequence[Write]) -> int:
        self._check()
        batch = list(writes)
        async with self._commit_lock:
            self._check()
            seq, next_id, known = self._next_seq, self._next_id, self._known
            try:
                if self._gate is None:
                    plan, learned = await self._one_phase(batch, seq, next_id, known)
                else:
                    plan, learned = await self._two_phase(self._gate, batch, seq, next_id, known)
            except StorageRejected:
                raise  # nothing written: what the caches hold is still true
            except BaseException:
                # Uncertain: the commit may have landed. Folding a delta into a row that
                # moved would lose it, so the latest documents' rows are asked again
                # (the caller must reopen anyway: docs/design.md, invariant 13).
                known.latest.clear()
                raise
            # Counters are only touched on the event loop thread (the transaction may run
            # on a driver thread), under the lock that also orders seqs.
            self._next_seq = plan.seq + 1
            self._next_id = max(self._next_id, plan.next_id)
            known.adopt(plan, learned)
            return plan.seq

    async def _one_phase(
        self, batch: list[Write], seq: int, next_id: int, known: Known
    ) -> tuple[CommitPlan, Learned]:
        def run(ex: SqlExecutor) -> tuple[CommitPlan, tuple[int, int] | None, Learned]:
            plan = plan_commit(batch, PlannerView(ex, known), seq, next_id)
            counters = self._counters(plan)
            learned = apply_plan(ex, plan, self._chunked, known.task_rows, counters, known.latest)
            return plan, counters, learned

        plan, counters, learned = await self._db.transaction(run)
        if counters is not None:
            self._stored = counters
        return plan, learned

    async def _two_phase(
        self, gate: CommitGate, batch: list[Write], seq: int, next_id: int, known: Known
    ) -> tuple[CommitPlan, Learned]:
        chunked = set(self._chunked)  # adopted only once the write set is applied

        def prepare(ex: SqlExecutor) -> tuple[CommitPlan, WriteSetLog, Learned]:
            plan = plan_commit(batch, PlannerView(ex, known), seq, next_id)
            log = WriteSetLog()
            counters = self._counters(plan)
            learned = apply_plan(log, plan, chunked, known.task_rows, counters, known.latest)
            return plan, log, learned

        # The commit lock is held from here to the apply, and this storage is the file's
        # only writer, so the state the plan was made against cannot move in between.
        plan, log, learned = await self._db.transaction(prepare, write=False)
        write_set = log.write_set(
            schema=SCHEMA_VERSION, seq=plan.seq, next_id=plan.next_id, chunked=chunked
        )
        await gate.make_durable(plan.seq, write_set)
        await self._db.transaction(partial(replay_write_set, write_set=write_set))
        self._chunked |= chunked
        return plan, learned

    @property
    def pending(self) -> int:
        """Commits applied but not durable yet: the deferring gate's (else 0)."""
        return self._gate.pending if isinstance(self._gate, DeferringGate) else 0

    async def flush(self) -> None:
        """Make every commit that returned durable (see
        :class:`~core.storage.port.DeferringStorage`): a no-op unless the gate defers."""
        self._check()
        if isinstance(self._gate, DeferringGate):
            async with self._commit_lock:  # after the commit in flight, if any
                self._check()
                await self._gate.flush()

    async def apply_write_set(self, write_set: JsonObject) -> int:
        """Replay a write set recorded by a two-phase commit of a replica; return its seq.

        This storage must hold exactly the state the write set was prepared against:
        ``seq`` one below the write set's (the host replays its log in order), on a
        schema its statements still apply to — its own, or a later one reaching back to
        it (:data:`~core.storage.sqlite.schema.WRITE_SETS_SINCE`: a log recorded before
        an upgrade replays onto a replica migrated at open). Bypasses the gate — the
        write set is durable already. Raises :class:`~core.errors.StorageCorrupt` for a
        malformed, out-of-order or too old or new write set and writes nothing then.
        """
        self._check()
        async with self._commit_lock:
            self._check()
            seq, next_id = write_set.get("seq"), write_set.get("next_id")
            if write_set.get("format") != WRITE_SET_FORMAT:
                raise StorageCorrupt(f"unknown write-set format {write_set.get('format')!r}")
            schema = write_set.get("schema")
            if type(schema) is not int or not WRITE_SETS_SINCE <= schema <= SCHEMA_VERSION:
                raise StorageCorrupt(
                    f"write set of schema {schema!r} cannot be replayed on schema {SCHEMA_VERSION}"
                )
            if type(seq) is not int or type(next_id) is not int:
                raise StorageCorrupt("write set has no seq or next_id")
            if seq != self._next_seq:
                raise StorageCorrupt(
                    f"write set for seq {seq} does not follow local seq {self._next_seq - 1}"
                )
            await self._db.transaction(partial(replay_write_set, write_set=write_set))
            self._next_seq = seq + 1
            self._next_id = max(self._next_id, next_id)
            self._stored = (next_id, seq + 1)  # the exact counters a gated commit stores
            self._chunked |= {str(t) for t in _json_list(write_set.get("chunked"))}
            # The caches only learn from plans; a replayed commit starts them afresh.
            self._known = Known(next_id)
            return seq

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            exact = (self._next_id, self._next_seq)
            if self._gate is None and self._stored != exact:
                # The counters were stored ahead (module docstring); a clean close stores
                # them exactly, so a reopen goes on from the newest commit's seq and a
                # watcher's cursor from before an eviction is still current. Only over
                # the bounds this storage stored: never back below another writer's.
                await self._db.execute(
                    "UPDATE meta SET next_id = ?, next_seq = ? WHERE singleton = 1"
                    " AND next_seq = ?",
                    (*exact, self._stored[1]),
                )
            await self._db.close()


def _json_list(value: JsonValue) -> list[JsonValue]:
    return value if isinstance(value, list) else []


if TYPE_CHECKING:  # mypy proves the adapter satisfies its port
    from core.storage.port import DeferringStorage, Storage

    def _conforms(adapter: SqliteStorage) -> Storage:
        return adapter

    def _defers(adapter: SqliteStorage) -> DeferringStorage:
        return adapter
