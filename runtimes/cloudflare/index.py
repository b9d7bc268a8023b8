"""The Worker's index of its actors: :data:`INDEX_SHARDS` index Durable Objects.

A Durable Object holds one actor and knows nothing of the others, and asking every
object would wake them all, so ``GET /v1/actors`` reads an index kept beside them (no
Workers SDK import here: it runs on CPython against the ``ctx.storage`` stand-in too):

* :class:`IndexShard` is one index object's table of actor ids over its
  ``ctx.storage.sql``. An actor's id goes to the shard :func:`shard_of` picks (a hash
  of the id), so creations spread over every shard and no one object takes them all;
* :class:`ActorIndex` is the index as the Worker and the actor objects see it, through
  the shards' stubs (:class:`ShardStub`): :meth:`~ActorIndex.add` writes one shard,
  :meth:`~ActorIndex.names` asks every shard for its next ids after ``after`` and merges
  them, so a page is ascending across shards and continues from its last id, whatever
  was added meanwhile;
* an actor's object adds its id once its first commit has landed
  (:class:`~runtimes.cloudflare.actor.DurableActor`), so an actor a refused first
  request discarded is never listed.

:data:`INDEX_SHARDS` is fixed for a deployment: another count would look for ids in
other shards than the ones holding them.
"""

from __future__ import annotations

import asyncio
import hashlib
import heapq
from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["INDEX_SHARDS", "ActorIndex", "IndexShard", "ShardStub", "shard_name", "shard_of"]

INDEX_SHARDS = 16

_TABLE = "perdure_actor_index"


def shard_of(actor: str, shards: int = INDEX_SHARDS) -> int:
    """The shard that holds ``actor``'s id: stable across isolates and releases (a hash
    of the id, not Python's per-process ``hash``)."""
    return int.from_bytes(hashlib.sha256(actor.encode()).digest()[:8], "big") % shards


def shard_name(shard: int) -> str:
    """The index object's name (``getByName``) of shard number ``shard``."""
    return f"actor-index-{shard}"


class IndexShard:
    """One index object's actor ids over its ``ctx.storage`` (``sql.exec``), ascending
    by the table's primary key."""

    def __init__(self, storage: Any) -> None:
        self._sql = storage.sql
        self._rows(f"CREATE TABLE IF NOT EXISTS {_TABLE} (actor TEXT PRIMARY KEY NOT NULL) STRICT")

    def _rows(self, query: str, *bindings: Any) -> list[list[Any]]:
        # Always drained: an undrained cursor can hold a table lock (SQLITE_LOCKED).
        return [list(row) for row in self._sql.exec(query, *bindings).raw()]

    def add(self, actor: str) -> None:
        """Record ``actor`` (again: nothing changes)."""
        self._rows(f"INSERT OR IGNORE INTO {_TABLE} (actor) VALUES (?)", actor)

    def names(self, after: str | None, limit: int) -> list[str]:
        """At most ``limit`` ids, ascending, each greater than ``after``."""
        rows = self._rows(
            f"SELECT actor FROM {_TABLE} WHERE actor > ? ORDER BY actor LIMIT ?", after or "", limit
        )
        return [str(row[0]) for row in rows]


class ShardStub(Protocol):
    """One index shard as a caller reaches it (a Durable Object stub's RPC methods, or
    the shard itself in tests).

    Contract: :meth:`add` returns once the id is stored (idempotent); :meth:`names`
    answers :meth:`IndexShard.names`.
    """

    async def add(self, actor: str) -> None: ...

    async def names(self, after: str | None, limit: int) -> list[str]: ...


class ActorIndex:
    """The sharded index (see the module docstring); ``shard(n)`` reaches shard ``n``."""

    def __init__(self, shard: Callable[[int], ShardStub], *, shards: int = INDEX_SHARDS) -> None:
        self._shard = shard
        self.shards = shards

    async def add(self, actor: str) -> None:
        await self._shard(shard_of(actor, self.shards)).add(actor)

    async def names(self, *, after: str | None = None, limit: int = 100) -> list[str]:
        """At most ``limit`` ids, ascending, each greater than ``after``: the first
        ``limit`` of every shard's own first ``limit``, merged."""
        found = await asyncio.gather(
            *(self._shard(n).names(after, limit) for n in range(self.shards))
        )
        return list(heapq.merge(*found))[:limit]
