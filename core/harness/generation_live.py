"""The generation task's reads of its own state: a copy of its checkpoint, a section
of the conversation's ``live`` document, and whether it runs the current run."""

from __future__ import annotations

from core.jsonvalue import JsonObject
from core.records import Task
from core.session.documents import DocHandle

__all__ = ["checkpoint_copy", "is_current", "live_section"]


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
