"""The kit's shared parts: :class:`StorageCase`, :func:`registrar` (each case module's
``_case`` decorator, filling its ``CASES``), and the record builders and helpers the
cases (and :mod:`core.testing.two_phase_conformance`) share.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from core.errors import StorageRejected
from core.jsonvalue import JsonObject, JsonValue, dumps, loads
from core.readonly import readonly
from core.records import ConversationRecord, Entry, Pending, SubmissionRecord, Task
from core.storage.port import DocumentCreate, Storage

__all__ = [
    "CaseFn",
    "StorageCase",
    "_doc",
    "_entry",
    "_rejects",
    "_root",
    "_roundtrip",
    "_sub",
    "_task",
    "registrar",
]


@readonly(slots=False)
class StorageCase:
    name: str
    run: Callable[[Storage], Awaitable[None]]


CaseFn = Callable[[Storage], Awaitable[None]]


def registrar(cases: list[StorageCase]) -> Callable[[CaseFn], CaseFn]:
    """A decorator that appends each case it marks to ``cases`` (a case module's
    ``CASES``), in definition order."""

    def _case(fn: CaseFn) -> CaseFn:
        cases.append(StorageCase(fn.__name__, fn))
        return fn

    return _case


# --------------------------------------------------------------------------- helpers


async def _rejects(
    awaitable: Awaitable[Any], error: type[Exception] = StorageRejected, text: str = ""
) -> None:
    try:
        await awaitable
    except error as e:
        assert text.lower() in str(e).lower(), f"expected {text!r} in {e!r}"
        return
    raise AssertionError(f"expected {error.__name__} ({text!r}), nothing was raised")


def _task(
    task_id: int,
    conversation_id: int = 1,
    *,
    phase: str = "start",
    kind: str = "test.task",
    **fields: Any,
) -> Task:
    return Task(
        id=task_id,
        conversation_id=conversation_id,
        kind=kind,
        version=1,
        input={"value": task_id},
        state=fields.pop("state", Pending({"phase": phase})),
        **fields,
    )


def _entry(entry_id: int, conversation_id: int = 1, **fields: Any) -> Entry:
    return Entry(id=entry_id, conversation_id=conversation_id, kind="custom", **fields)


def _sub(submission_id: int, conversation_id: int = 1, **fields: Any) -> SubmissionRecord:
    fields.setdefault("type", "input")
    fields.setdefault("status", "queued")
    return SubmissionRecord(id=submission_id, conversation_id=conversation_id, **fields)


def _doc(
    doc_id: int,
    kind: str = "test.doc",
    *,
    scope: Any = "conversation",
    owner_id: int | None = 1,
    key: str | None = None,
    history: Any = "rewindable",
    version: int = 1,
    value: JsonValue = None,
) -> DocumentCreate:
    return DocumentCreate(doc_id, kind, scope, owner_id, key, history, version, value)


async def _root(storage: Storage) -> None:
    await storage.commit([ConversationRecord(1)])


def _roundtrip(cursor: JsonObject | None) -> JsonObject | None:
    """Cursors are opaque JSON: they must survive a trip through a client."""
    return None if cursor is None else loads(dumps(cursor))
