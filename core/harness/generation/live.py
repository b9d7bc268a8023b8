"""What the generation and tool tasks share: a copy of a checkpoint, a section of the
conversation's ``live`` document, whether a generation runs the current run,
documents read without copying them (committed, or as a commit stages them), and
entries appended with the messages the harness built for them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from core.harness.messages import Message, message_to_json
from core.jsonvalue import JsonObject, JsonValue
from core.records import Entry, Task
from core.session.documents import DocDefinition, DocHandle
from core.session.session import Session
from core.session.transaction import Tx

if TYPE_CHECKING:
    from core.harness.services import HarnessServices

__all__ = ["append_message", "staged_value"]


async def _committed_value(
    session: Session, definition: DocDefinition[Any], owner_id: int
) -> JsonValue:
    """A document's committed value for reading only — shared with the session's cache,
    never to be mutated (no copy: most reads look at one field) —, or a detached copy
    where it must be migrated or does not exist yet."""
    state = await session.current_document(definition, owner_id, None)
    if state is not None and state.version == definition.version:
        return state.value
    return await session.document_value(definition, owner_id)


async def staged_value(tx: Tx, definition: DocDefinition[Any], owner_id: int) -> JsonValue:
    """Inside a commit: a document's value as ``tx`` sees it, for reading only (never to
    be mutated). Unlike ``tx.doc`` it opens no handle when the commit has none, so a
    document only looked at is neither copied nor compared at commit."""
    handle = tx.docs.get((definition.kind, definition.scope, owner_id, None))
    if handle is not None:
        return handle.value
    state = await tx.session.current_document(definition, owner_id, None)
    if state is not None and state.version == definition.version:
        return state.value
    if state is None:  # not created yet (an inbox nothing was queued in): its initial value
        return definition.initial()  # a fresh value, only read: no copy, no check
    return (await tx.doc(definition, owner_id)).value


def _checkpoint_copy(task: Task) -> JsonObject:
    cp = task.checkpoint
    assert cp is not None
    return dict(cp)


def _round(cp: JsonObject) -> int:
    """Which model round of its run a generation's checkpoint is at (1 when unnoted).

    One generation task goes on through every round of its run (see ``hand_over``):
    the round tells them apart, and each checkpoint of a later round carries it."""
    value = cp.get("round")
    return value if type(value) is int else 1


def _with_round(checkpoint: JsonObject, round_: int) -> JsonObject:
    """``checkpoint`` noting ``round_`` (the first round's checkpoints leave it out)."""
    if round_ > 1:
        checkpoint["round"] = round_
    return checkpoint


def _live_section(live: DocHandle, key: str) -> JsonObject:
    value = live.value
    if not isinstance(value, dict):
        value = {}
        live.value = value
    section = value.get(key)
    if not isinstance(section, dict):
        section = {}
        value[key] = section
    return section


def _is_current(live: DocHandle, task_id: int) -> bool:
    """Whether ``task_id`` is the generation of the conversation's current run."""
    value = live.value
    run = value.get("run") if isinstance(value, dict) else None
    return isinstance(run, dict) and run.get("generation") == task_id


async def append_message(
    h: HarnessServices,
    tx: Tx,
    conversation_id: int,
    kind: str,
    message: Message,
    *,
    data: JsonValue = None,
    by_task_id: int | None = None,
) -> Entry:
    """Inside a commit: append an entry holding ``message``, a message whose JSON round
    trip is exact (built by the harness from JSON values, or a model's answer made
    servable). The context range takes the object itself once the commit lands: the
    harness does not validate again what it built. ``message_to_json`` builds a fresh
    value, and ``data`` is built for this entry by every caller: both are handed over,
    checked as JSON but not copied."""
    entry = await tx.append_entry(
        conversation_id,
        kind,
        message=message_to_json(message),
        data=data,
        by_task_id=by_task_id,
        owned=True,
    )
    h.built_message(entry, message)
    return entry
