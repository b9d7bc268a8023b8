"""Where an actor's items and objects live.

DynamoDB: ``pk = "actor#<id>"`` with ``sk = "head"`` (the lease, fencing epoch, seq and
snapshot pointer — never deleted or TTL'd: losing it would reset the epoch) and
``sk = "log#<seq>#<part>"`` (zero-padded, so the sort key orders by seq). S3:
``<prefix>/<id>/snap/<seq>-<epoch>.sqlite`` and ``<prefix>/<id>/log/<seq>-<epoch>.json.z``;
the epoch in the name keeps a paused former holder from ever writing the object a
newer holder writes.

The host's actors are listed from a sparse global secondary index, ``LISTING_INDEX``
(keys only): a head gets ``listing = "actor"`` and ``actor = <id>`` in the same fenced
write as its first commit, so an actor is listed once its first commit lands and never
before (a refused first request leaves a head at seq 0, without them). One partition,
sorted by id, so a page is one ``Query`` from where the last one ended.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LISTING_INDEX", "LISTING_KEY", "LISTING_SORT", "LISTING_VALUE", "ActorKeys"]

_SEQ_DIGITS = 20
_PART_DIGITS = 4

LISTING_INDEX = "actors"
LISTING_KEY = "listing"  # the index's partition key: LISTING_VALUE on every committed head
LISTING_SORT = "actor"  # the index's sort key: the actor's id
LISTING_VALUE = "actor"


@dataclass(frozen=True)
class ActorKeys:
    actor: str
    prefix: str = "actors"

    @property
    def pk(self) -> str:
        return f"actor#{self.actor}"

    def head(self) -> dict[str, dict[str, str]]:
        return {"pk": {"S": self.pk}, "sk": {"S": "head"}}

    def listing(self) -> dict[str, dict[str, str]]:
        """The head's attributes that list it in :data:`LISTING_INDEX`."""
        return {LISTING_KEY: {"S": LISTING_VALUE}, LISTING_SORT: {"S": self.actor}}

    def log_sk(self, seq: int, part: int) -> str:
        return f"log#{seq:0{_SEQ_DIGITS}d}#{part:0{_PART_DIGITS}d}"

    def log_range(self, first: int, last: int) -> tuple[str, str]:
        """Sort-key bounds (inclusive) of every part of seqs ``first..last``."""
        return self.log_sk(first, 0), self.log_sk(last, 10**_PART_DIGITS - 1)

    def snapshot_key(self, seq: int, epoch: int) -> str:
        return f"{self.prefix}/{self.actor}/snap/{seq:0{_SEQ_DIGITS}d}-{epoch}.sqlite"

    def log_object_key(self, seq: int, epoch: int) -> str:
        return f"{self.prefix}/{self.actor}/log/{seq:0{_SEQ_DIGITS}d}-{epoch}.json.z"
