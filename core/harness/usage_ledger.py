"""The conversation's usage ledger, kept in its ``live`` document (docs/design.md §
Data model).

The ledger — ``total``, per model (``models``), per tool (``tools``) and the compaction
counts (``compactions``) — is kept in ``live["usage"]``. A run's end folds the run's
usage (``live``'s ``run.usage``) into it in the ``live`` write that commit makes anyway:
a document of its own cost a ``documents`` row and a revision on a conversation's first
run and a revision on each later one (issue 36). Readers see it as before: the view
presents it as the ``usage`` document and ``live`` without it (:func:`present`), and the
watch moves its changes there (:func:`view_ops`).

It is kept as one JSON text, not as a JSON object: every commit that writes ``live``
(several per tool round) copies, checks and diffs the whole value, and an object's
twenty-odd leaves made a later run's tool round cost 8% more instructions, a string
0.2% (docs/performance.md, "The rows a round writes"). It is decoded only where it is
read or changed (:func:`change_ledger`: a few times per run).

Actors written before kept the ledger in a ``usage`` document of its own
(:data:`LEGACY_USAGE`). It is read as the ledger while ``live`` holds none, and the
ledger's first change starts from it (:func:`change_ledger`); it is never written again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from core.harness.builtin_documents import LIVE
from core.jsonvalue import JsonObject, JsonValue, copy_admitted, dumps, loads
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


def _decoded(live: JsonValue) -> JsonObject | None:
    """The ledger a ``live`` value keeps (a fresh object), or ``None`` if it keeps none."""
    text = live.get(KEY) if isinstance(live, dict) else None
    if not isinstance(text, str):
        return None
    value = loads(text)
    return value if isinstance(value, dict) else None


async def change_ledger(tx: Tx, conversation_id: int, change: Callable[[JsonObject], None]) -> None:
    """Change the conversation's ledger in ``tx``: ``change`` edits it in place and it is
    kept in ``live`` again. The first change starts from the conversation's legacy
    ``usage`` document if it has one, else from an empty ledger."""
    live = await tx.doc(LIVE, conversation_id)
    value = live.value
    if not isinstance(value, dict):
        value = {}
        live.value = value
    current = _decoded(value)
    if current is None:
        legacy = await tx.session.current_document(LEGACY_USAGE, conversation_id, None)
        start = copy_admitted(legacy.value) if legacy is not None else None
        current = start if isinstance(start, dict) else empty_ledger()
    change(current)
    value[KEY] = dumps(current)


async def ledger_value(session: Session, conversation_id: int, live: JsonValue) -> JsonObject:
    """The committed ledger (a detached value), given the conversation's committed
    ``live`` value (the caller has it: every reader adds the current run's usage)."""
    current = _decoded(live)
    if current is not None:
        return current
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
    current = _decoded(live)
    if current is not None:
        docs[LIVE.kind] = without_ledger(live)
        docs[KEY] = current
    elif not isinstance(docs.get(KEY), dict):
        docs[KEY] = empty_ledger()


def view_ops(
    ops: list[JsonValue] | None, value: JsonValue, base: list[JsonValue]
) -> list[JsonValue]:
    """The view's ops for one commit's change to ``live``: its ``ops`` (``None``: the
    whole new ``value``), with ``base`` the path of the view's documents. The ledger's
    change becomes its new value at ``base + ["usage"]``, the rest goes to
    ``base + ["live"]``."""
    live_path, usage_path = [*base, LIVE.kind], [*base, KEY]
    ledger = _decoded(value)
    if ops is None:
        return _whole(value, ledger, live_path, usage_path)
    out: list[JsonValue] = []
    for op in ops:
        assert isinstance(op, list)
        path = op[1]
        if op[0] == "r" or path == []:
            out.extend(_whole(op[-1], _decoded(op[-1]), live_path, usage_path))
        elif isinstance(path, list) and path[0] == KEY:
            out.append(["s", usage_path, ledger if ledger is not None else empty_ledger()])
        else:
            assert isinstance(path, list)
            out.append([op[0], [*live_path, *path], *op[2:]])
    return out


def _whole(
    value: JsonValue,
    ledger: JsonObject | None,
    live_path: list[JsonValue],
    usage_path: list[JsonValue],
) -> list[JsonValue]:
    if ledger is None:
        return [["s", live_path, value]]  # no ledger in it yet: the view's usage stands
    return [["s", live_path, without_ledger(value)], ["s", usage_path, ledger]]
