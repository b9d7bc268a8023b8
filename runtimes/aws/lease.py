"""The actor lease with a fencing epoch, on the actor's DynamoDB head item.

* **acquire** — one conditional ``UpdateItem``: the lease is absent, expired, or already
  ours; the same write bumps ``epoch``, so every grant carries a number no earlier grant
  had. Refused → :class:`LeaseHeld` (the holder comes back with the refusal, no read).
* **renew** — at commit points, not from a background thread: every fenced write
  (:meth:`Lease.fenced_update`) also pushes ``expires_at`` forward; :meth:`Lease.renew`
  does it alone for a holder with nothing to commit.
* **release** — at the end of the invocation, so the next one need not wait out the
  lease. The head item is never deleted: that would reset the epoch and unfence. The
  release also records the wake the holder armed (``armed``, with ``armed_epoch`` = its
  epoch), so the next holder can skip the Scheduler when the deadline did not change.
  That record is trusted only when ``armed_epoch`` is the epoch just before the new
  grant's: a holder that crashed (or could not arm) never released, so its successor
  sees an older ``armed_epoch`` and arms anew.

Safety comes from the epoch, not the clock: a write is accepted only while the head
still carries our epoch and owner. Expiry (compared with the injected clock of whoever
acquires next) only decides *when* another owner may take over.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from runtimes.aws.errors import LeaseHeld, LeaseLost
from runtimes.aws.keys import LISTING_KEY, ActorKeys
from runtimes.aws.resources import AwsResources, call, error_code

__all__ = ["DEFAULT_LEASE_MS", "FencedUpdate", "Lease", "LeaseGrant"]

DEFAULT_LEASE_MS = 16 * 60 * 1000
"""Lambda's 15-minute maximum plus a margin: a holder running normally never outlives it."""

_NAMES = {"#o": "owner", "#x": "expires_at", "#e": "epoch", "#s": "seq"}


@dataclass(frozen=True)
class LeaseGrant:
    """The head item as our last successful write left it."""

    owner: str
    epoch: int
    seq: int
    expires_at: int
    snapshot_seq: int
    snapshot_key: str | None
    armed: int | None = None
    """The wake the previous holder armed and released with (``None``: no schedule)."""
    armed_known: bool = False
    """Whether :attr:`armed` is the previous holder's record (see the module docstring)."""
    listed: bool = False  # the head carries the listing index's keys


@dataclass(frozen=True)
class FencedUpdate:
    request: dict[str, Any]
    seq: int
    expires_at: int
    snapshot: tuple[int, str] | None
    lists: bool = False  # sets the listing index's keys
    release: bool = False  # gives the lease up


def _n(value: int) -> dict[str, str]:
    return {"N": str(value)}


def _grant(item: dict[str, Any]) -> LeaseGrant:
    epoch = int(item["epoch"]["N"])
    return LeaseGrant(
        owner=item["owner"]["S"],
        epoch=epoch,
        seq=int(item.get("seq", {"N": "0"})["N"]),
        expires_at=int(item["expires_at"]["N"]),
        snapshot_seq=int(item.get("snapshot_seq", {"N": "0"})["N"]),
        snapshot_key=item["snapshot_key"]["S"] if "snapshot_key" in item else None,
        armed=int(item["armed"]["N"]) if "armed" in item else None,
        armed_known=int(item.get("armed_epoch", {"N": "-1"})["N"]) == epoch - 1,
        listed=LISTING_KEY in item,
    )


class Lease:
    """One owner's lease on one actor. ``now`` is the injected clock (epoch ms).

    ``owner`` must be unique per invocation (the Lambda request id, say): a grant to an
    owner that already holds the lease succeeds and fences that owner's earlier session
    with the new epoch, so two live sessions under one owner name would fence each
    other rather than be refused.
    """

    def __init__(
        self,
        resources: AwsResources,
        actor: str,
        owner: str,
        now: Callable[[], int],
        *,
        duration_ms: int = DEFAULT_LEASE_MS,
    ) -> None:
        self.resources = resources
        self.keys = ActorKeys(actor, resources.prefix)
        self.owner = owner
        self.now = now
        self.duration_ms = duration_ms
        self._grant: LeaseGrant | None = None
        self._armed: tuple[int | None] | None = None  # see record_armed

    @property
    def grant(self) -> LeaseGrant:
        if self._grant is None:
            raise LeaseLost(f"{self.owner!r} holds no lease on {self.keys.actor!r}")
        return self._grant

    async def acquire(self) -> LeaseGrant:
        now = self.now()
        try:
            out = await call(
                self.resources.dynamodb.update_item,
                TableName=self.resources.table,
                Key=self.keys.head(),
                UpdateExpression="SET #o = :me, #x = :until, #e = if_not_exists(#e, :zero) + :one,"
                " #s = if_not_exists(#s, :zero)",
                ConditionExpression="attribute_not_exists(#o) OR #x < :now OR #o = :me",
                ExpressionAttributeNames=_NAMES,
                ExpressionAttributeValues={
                    ":me": {"S": self.owner},
                    ":until": _n(now + self.duration_ms),
                    ":now": _n(now),
                    ":zero": _n(0),
                    ":one": _n(1),
                },
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except Exception as e:
            if error_code(e) != "ConditionalCheckFailedException":
                raise
            held = getattr(e, "response", {}).get("Item", {})
            raise LeaseHeld(
                self.keys.actor,
                held.get("owner", {}).get("S"),
                int(held["expires_at"]["N"]) if "expires_at" in held else None,
            ) from None
        self._grant = _grant(out["Attributes"])
        return self._grant

    @property
    def grant_or_none(self) -> LeaseGrant | None:
        """The grant, or ``None`` once lost or released."""
        return self._grant

    def fenced_update(
        self,
        expect_seq: int,
        new_seq: int,
        snapshot: tuple[int, str] | None = None,
        *,
        release: bool = False,
    ) -> FencedUpdate:
        """The head ``Update`` for a write made under this lease: accepted only while the
        head carries our epoch and owner and ``seq == expect_seq``. It sets
        ``seq = new_seq``, renews the lease and, with ``snapshot = (seq, key)``, moves
        the snapshot pointer. The first write with ``new_seq > 0`` to a head without the
        listing keys (:meth:`ActorKeys.listing`) also sets them, so the first commit
        lists the actor in the same write (and an actor committed before the index
        existed is listed by its next write); later writes leave them, so the index is
        written once per actor, not once per commit. ``release``: the same write also
        gives the lease up, as :meth:`release` does (a holder's last commit and its
        release in one write). Send ``.request`` as an ``UpdateItem`` or as a
        ``TransactWriteItems`` action, then :meth:`adopt` it."""
        grant = self.grant
        until = self.now() + self.duration_ms
        sets = ["#s = :new", "#x = :until"]
        names = dict(_NAMES)
        values = {
            ":me": {"S": self.owner},
            ":epoch": _n(grant.epoch),
            ":seq": _n(expect_seq),
            ":new": _n(new_seq),
            ":until": _n(until),
        }
        if snapshot is not None:
            names |= {"#ps": "snapshot_seq", "#pk": "snapshot_key"}
            values |= {":ps": _n(snapshot[0]), ":pk": {"S": snapshot[1]}}
            sets += ["#ps = :ps", "#pk = :pk"]
        lists = new_seq > 0 and not grant.listed
        if lists:
            for n, (attribute, value) in enumerate(self.keys.listing().items()):
                names[f"#l{n}"] = attribute
                values[f":l{n}"] = value
                sets.append(f"#l{n} = :l{n}")
        removes: list[str] = []
        if release:
            sets[1] = "#x = :zero"
            del values[":until"]  # DynamoDB refuses a request naming a value it does not use
            values[":zero"] = _n(0)
            removes = self._release_clauses(names, values, sets, grant.epoch)
        request = {
            "TableName": self.resources.table,
            "Key": self.keys.head(),
            "UpdateExpression": ("REMOVE " + ", ".join(removes) + " " if removes else "")
            + "SET "
            + ", ".join(sets),
            "ConditionExpression": "#e = :epoch AND #o = :me AND #s = :seq",
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
        }
        return FencedUpdate(request, new_seq, until, snapshot, lists, release)

    def adopt(self, update: FencedUpdate) -> None:
        """Record that ``update`` was accepted by DynamoDB (one that released the lease
        leaves this holder without a grant)."""
        if update.release:
            self._grant = None
            return
        grant = replace(
            self.grant,
            seq=update.seq,
            expires_at=update.expires_at,
            listed=self.grant.listed or update.lists,
        )
        if update.snapshot is not None:
            grant = replace(grant, snapshot_seq=update.snapshot[0], snapshot_key=update.snapshot[1])
        self._grant = grant

    def lost(self) -> None:
        """Forget the grant: after a refused fenced write nothing may be written again."""
        self._grant = None

    async def renew(self) -> None:
        grant = self.grant
        update = self.fenced_update(grant.seq, grant.seq)
        try:
            await call(self.resources.dynamodb.update_item, **update.request)
        except Exception as e:
            if error_code(e) == "ConditionalCheckFailedException":
                self.lost()
                raise LeaseLost(f"lease on {self.keys.actor!r} was taken over") from None
            raise
        self.adopt(update)

    def record_armed(self, wake: int | None) -> None:
        """Note that the actor's schedule now says ``wake`` (``None``: no schedule): the
        release records it for the next holder. Without it the next holder arms anew."""
        self._armed = (wake,)

    async def release(self) -> bool:
        """Give the lease up; ``False`` if it was not ours any more (nothing to release)."""
        if self._grant is None:
            return False
        grant, self._grant = self._grant, None
        names = {"#o": "owner", "#x": "expires_at", "#e": "epoch"}
        values = {":me": {"S": self.owner}, ":epoch": _n(grant.epoch), ":zero": _n(0)}
        sets = ["#x = :zero"]
        removes = self._release_clauses(names, values, sets, grant.epoch)
        try:
            await call(
                self.resources.dynamodb.update_item,
                TableName=self.resources.table,
                Key=self.keys.head(),
                UpdateExpression=f"REMOVE {', '.join(removes)} SET {', '.join(sets)}",
                ConditionExpression="#e = :epoch AND #o = :me",
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
            )
        except Exception as e:
            if error_code(e) == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def _release_clauses(
        self, names: dict[str, str], values: dict[str, Any], sets: list[str], epoch: int
    ) -> list[str]:
        """Add what a release writes besides ``expires_at = 0`` (the armed wake, see
        :meth:`record_armed`) to ``names``, ``values`` and ``sets``; return the
        attributes it removes (the owner, and ``armed`` when no schedule is armed)."""
        names["#o"] = "owner"
        removes = ["#o"]
        armed = self._armed
        if armed is not None:
            names |= {"#ae": "armed_epoch", "#a": "armed"}
            values[":ae"] = _n(epoch)
            sets.append("#ae = :ae")
            if armed[0] is None:
                removes.append("#a")
            else:
                values[":a"] = _n(armed[0])
                sets.append("#a = :a")
        return removes
