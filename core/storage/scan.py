"""Cursor and paging rules shared by every Storage adapter.

A cursor is ``{"scan": name, "filters": {...}, "order": "asc"|"desc", "after": id}``:
plain JSON, so it survives a round-trip through a client, and self-describing, so a
cursor handed to the wrong scan (or the same scan with other filters, or the other
order) is refused instead of silently skipping records.
"""

from __future__ import annotations

from core.errors import InvalidCursor
from core.jsonvalue import JsonObject, JsonValue, json_equal
from core.readonly import readonly
from core.records import MAX_ID
from core.storage.port import Cursor, Order

__all__ = ["MAX_LIMIT", "ScanPosition", "min_cap", "next_cursor", "start_scan"]

MAX_LIMIT = 10_000


@readonly
class ScanPosition:
    order: Order
    limit: int
    after: int | None
    """Exclusive bound: continue strictly after this id in ``order``."""

    def admits(self, record_id: int) -> bool:
        if self.after is None:
            return True
        return record_id > self.after if self.order == "asc" else record_id < self.after


def start_scan(
    scan: str,
    filters: JsonObject,
    order: Order | None,
    default_order: Order,
    limit: int,
    cursor: Cursor | None,
) -> ScanPosition:
    """Validate the arguments of a scan and decode its cursor."""
    if type(limit) is not int or not 1 <= limit <= MAX_LIMIT:
        raise ValueError(f"limit must be an integer from 1 to {MAX_LIMIT}, got {limit!r}")
    if order is not None and order not in ("asc", "desc"):
        raise ValueError(f"order must be 'asc' or 'desc', got {order!r}")
    if cursor is None:
        return ScanPosition(order or default_order, limit, None)
    if (
        type(cursor) is not dict
        or set(cursor) != {"scan", "filters", "order", "after"}
        or cursor["order"] not in ("asc", "desc")
        or type(cursor["after"]) is not int
        # A page ends at a record's id: 1..MAX_ID. Outside, the cursor was made up (and
        # past 2**63 no SQL engine can even bind it).
        or not 1 <= cursor["after"] <= MAX_ID
    ):
        raise InvalidCursor(f"not a cursor of this storage: {cursor!r}")
    if cursor["scan"] != scan:
        raise InvalidCursor(f"cursor belongs to the {cursor['scan']!r} scan, not {scan!r}")
    if not json_equal(cursor["filters"], _filters_json(filters)):
        raise InvalidCursor(f"cursor belongs to the {scan!r} scan with other filters")
    cursor_order: Order = "asc" if cursor["order"] == "asc" else "desc"
    if order is not None and order != cursor_order:
        raise InvalidCursor(f"cursor continues a {cursor_order!r} scan; {order!r} was asked")
    return ScanPosition(cursor_order, limit, cursor["after"])


def next_cursor(scan: str, filters: JsonObject, pos: ScanPosition, last_id: int) -> Cursor:
    return {"scan": scan, "filters": _filters_json(filters), "order": pos.order, "after": last_id}


def _filters_json(filters: JsonObject) -> JsonValue:
    # None-valued filters are "not filtered"; dropping them keeps cursors stable
    # whether a caller passes an explicit None or omits the argument.
    return {k: v for k, v in filters.items() if v is not None}


def min_cap(a: int | None, b: int | None) -> int | None:
    """The tighter of two optional upper bounds (``None``: unbounded)."""
    if a is None:
        return b
    return a if b is None else min(a, b)
