"""Read-side rules shared by Storage adapters: fork visibility and document revisions."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from core.docops import InvalidOp, apply_ops
from core.errors import StorageCorrupt, StorageRejected, UnknownRecord
from core.jsonvalue import JsonValue, loads
from core.readonly import readonly
from core.records import ConversationRecord, DocumentRecord, DocumentState

__all__ = ["StoredRevision", "fold_revisions", "fork_chain", "historical_read_allowed"]


def fork_chain(
    conversation_id: int, lookup: Callable[[int], ConversationRecord | None]
) -> list[tuple[int, int | None]]:
    """``[(conversation id, highest visible entry id or None), ...]`` from the conversation
    up through its fork ancestors. Each ancestor is capped by the tightest fork point
    below it, so a grandchild never sees parent entries past its own parent's fork."""
    conv = lookup(conversation_id)
    if conv is None:
        raise UnknownRecord(f"Unknown conversation {conversation_id}")
    chain: list[tuple[int, int | None]] = [(conv.id, None)]
    cap: int | None = None
    seen = {conv.id}
    while conv.parent is not None:
        at = conv.parent.at_entry
        cap = at if cap is None else min(cap, at)
        parent = lookup(conv.parent.conversation_id)
        if parent is None or parent.id in seen:
            raise StorageCorrupt(f"conversation {conv.id} has a broken fork parent")
        seen.add(parent.id)
        chain.append((parent.id, cap))
        conv = parent
    return chain


@readonly
class StoredRevision:
    seq: int
    base: bool
    version: int
    content: str


def historical_read_allowed(record: DocumentRecord, at: int | None) -> None:
    if at is not None and record.history != "rewindable":
        raise StorageRejected(
            f"document {record.id} ({record.kind!r}) does not retain historical content"
        )


def fold_revisions(record: DocumentRecord, revisions: Iterable[StoredRevision]) -> DocumentState:
    """Rebuild a value from its newest base and the deltas after it (ascending seq)."""
    value: JsonValue = None
    version = 0
    deltas = 0
    have_base = False
    for rev in revisions:
        content = loads(rev.content)
        if rev.base:
            value, version, deltas, have_base = content, rev.version, 0, True
            continue
        if not have_base:
            raise StorageCorrupt(f"document {record.id} is missing a required base")
        try:
            value = apply_ops(value, content)
        except InvalidOp as e:
            raise StorageCorrupt(f"document {record.id} has a corrupt delta: {e}") from None
        version = rev.version
        deltas += 1
    if not have_base:
        raise StorageCorrupt(f"document {record.id} is missing a required base")
    return DocumentState(record, version, value, deltas)
