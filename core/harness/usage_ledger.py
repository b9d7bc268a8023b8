"""The conversation's usage ledger, kept in its ``live`` document (docs/design.md §
Data model).

The ledger — ``total``, per model (``models``), per tool (``tools``) and the compaction
counts (``compactions``) — is ``live["usage"]``, a JSON object. It rides in ``live``
because a run's end writes ``live`` anyway: it folds the run's usage (``live``'s
``run.usage``) in with that write, where a document of its own cost a ``documents`` row
and a revision on a conversation's first run and a revision on each later one (issue
36). Readers see it as before: the view presents it as the ``usage`` document and
``live`` without it (:func:`present`), and the watch moves ``live``'s changes to it
there (:func:`view_ops`).

Actors written before kept the ledger in a ``usage`` document of its own
(:data:`LEGACY_USAGE`). It is read as the ledger while ``live`` holds none, and the
ledger's first change starts from it (:func:`change_ledger`); it is never written again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from core.harness.builtin_documents import LIVE
from core.jsonvalue import JsonObject, JsonValue, copy_admitted
from core.session.documents import DocDefinition, define_doc
from core.session.session import Session
from core.session.transaction import Tx

__all__ = [
    "KEY",
    "LEGACY_USAGE",
    "change_ledger",
    "empty_ledger",
    "ledger_value",
    "present",
    "view_ops",
    "without_ledger",
]

KEY = "usage"
"""Where ``live`` keeps the ledger, and the name the view presents it under."""


def empty_ledger() -> JsonObject:
    """The ledger of a conversation that has used nothing (the shape readers expect)."""
    return {"total": {}, "models": {}, "tools": {}}


LEGACY_USAGE: DocDefinition[Any] = define_doc(
    "usage", scope="conversation", fork="initial", initial=empty_ledger
)
"""The ledger's document in actors written before it moved into ``live``: read only."""


def _kept(live: JsonValue) -> JsonObject | None:
    """The ledger a ``live`` value keeps (the object itself), or ``None`` if it keeps none."""
    current = live.get(KEY) if isinstance(live, dict) else None
    return current if isinstance(current, dict) else None


async def change_ledger(tx: Tx, conversation_id: int, change: Callable[[JsonObject], None]) -> None:
    """Change the conversation's ledger in ``tx``: ``change`` edits ``live["usage"]`` in
    place. The first change starts from the conversation's legacy ``usage`` document if
    it has one, else from an empty ledger."""
    live = await tx.doc(LIVE, conversation_id)
    value = live.value
    if not isinstance(value, dict):
        value = {}
        live.value = value
    current = _kept(value)
    if current is None:
        legacy = await tx.session.current_document(LEGACY_USAGE, conversation_id, None)
        start = copy_admitted(legacy.value) if legacy is not None else None
        current = start if isinstance(start, dict) else empty_ledger()
        value[KEY] = current
    change(current)


async def ledger_value(session: Session, conversation_id: int, live: JsonValue) -> JsonObject:
    """A detached copy of the committed ledger, given the conversation's committed
    ``live`` value (the caller has it: every reader adds the current run's usage)."""
    current = _kept(live)
    if current is not None:
        return {k: copy_admitted(v) for k, v in current.items()}
    legacy = await session.document_value(LEGACY_USAGE, conversation_id)
    return legacy if isinstance(legacy, dict) else empty_ledger()


def without_ledger(live: JsonValue) -> JsonValue:
    """A ``live`` value as readers know it: without the ledger (the same value when it
    has none)."""
    if isinstance(live, dict) and KEY in live:
        return {k: v for k, v in live.items() if k != KEY}
    return live


def present(docs: JsonObject) -> None:
    """Rewrite a view's documents as readers know them: ``live`` without the ledger and
    the ledger as the ``usage`` document (a legacy one stands while ``live`` has none,
    else an empty ledger)."""
    live = docs.get(LIVE.kind)
    current = _kept(live)
    if current is not None:
        docs[LIVE.kind] = without_ledger(live)
        docs[KEY] = current
    elif not isinstance(docs.get(KEY), dict):
        docs[KEY] = empty_ledger()


def view_ops(
    ops: list[JsonValue] | None, value: JsonValue, base: list[JsonValue]
) -> list[JsonValue]:
    """The view's ops for one commit's change to ``live``: its ``ops`` (``None``: the
    whole new ``value``), with ``base`` the path of the view's documents. What touches the
    ledger goes to ``base + ["usage"]``, the rest to ``base + ["live"]``."""
    live_path, usage_path = [*base, LIVE.kind], [*base, KEY]
    if ops is None:
        return _whole(value, live_path, usage_path)
    out: list[JsonValue] = []
    for op in ops:
        assert isinstance(op, list)
        verb, path = op[0], op[1]
        if verb == "r" or path == []:
            out.extend(_whole(op[-1], live_path, usage_path))
            continue
        assert isinstance(path, list)
        if path[0] != KEY:
            out.append([verb, [*live_path, *path], *op[2:]])
        elif len(path) > 1:
            out.append([verb, [*usage_path, *path[1:]], *op[2:]])
        else:  # the whole ledger set (its first write) or, never written, removed
            out.append(["s", usage_path, op[2] if verb == "s" else empty_ledger()])
    return out


def _whole(
    value: JsonValue, live_path: list[JsonValue], usage_path: list[JsonValue]
) -> list[JsonValue]:
    current = _kept(value)
    if current is None:
        return [["s", live_path, value]]  # no ledger in it yet: the view's usage stands
    return [["s", live_path, without_ledger(value)], ["s", usage_path, current]]
