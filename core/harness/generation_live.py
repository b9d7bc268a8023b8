"""The generation task's reads of its own state: a copy of its checkpoint, a section
of the conversation's ``live`` document, and whether it runs the current run."""

from __future__ import annotations

from typing import Any

from core.jsonvalue import JsonObject, JsonValue
from core.records import Task
from core.session.documents import DocDefinition, DocHandle
from core.session.session import Session

__all__ = ["checkpoint_copy", "committed_value", "is_current", "live_section"]


async def committed_value(
    session: Session, definition: DocDefinition[Any], owner_id: int
) -> JsonValue:
    """A document's committed value for reading only — shared with the session's cache,
    never to be mutated (no copy: most reads look at one field) —, or a detached copy
    where it must be migrated or does not exist yet."""
    state = await session.current_document(definition, owner_id, None)
    if state is not None and state.version == definition.version:
        return state.value
    return await session.document_value(definition, owner_id)


def checkpoint_copy(task: Task) -> JsonObject:
    cp = task.checkpoint
    assert cp is not None
    return dict(cp)


def live_section(live: DocHandle, key: str) -> JsonObject:
    value = live.value
    if not isinstance(value, dict):
        value = {}
        live.value = value
    section = value.get(key)
    if not isinstance(section, dict):
        section = {}
        value[key] = section
    return section


def is_current(live: DocHandle, task_id: int) -> bool:
    """Whether ``task_id`` is the generation of the conversation's current run."""
    value = live.value
    run = value.get("run") if isinstance(value, dict) else None
    return isinstance(run, dict) and run.get("generation") == task_id
