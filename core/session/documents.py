"""Document definitions and the handles a transaction hands out.

A document is a JSON value with a lifecycle: opened in a transaction (at its initial
value when none exists; a ``latest`` one is created only by a commit that leaves it at
another value, since a missing document reads as its initial value), changed in the
same commits as entries and tasks, stored as a full base or as a delta of JSON ops
between bases, retired explicitly (or with its task).
:func:`define_doc` declares one kind.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, Literal, TypeAlias, TypeVar

from pydantic import BaseModel, ValidationError

from core.errors import DocumentError
from core.jsonvalue import JsonValue, json_copy
from core.readonly import readonly
from core.records import DocumentHistory, DocumentRecord, DocumentScope

__all__ = [
    "DEFAULT_DELTAS_PER_BASE",
    "DocDefinition",
    "DocHandle",
    "ForkPolicy",
    "define_doc",
]

M = TypeVar("M", bound=BaseModel)
ForkPolicy: TypeAlias = Literal["current", "as_of", "initial"]

DEFAULT_DELTAS_PER_BASE = 32
"""Without a ``checkpoint_when``, a document writes a fresh base after this many deltas,
which bounds both the replay work of a read and the rows a ``latest`` document keeps."""


def _default_checkpoint_when(
    value: JsonValue, ops: list[JsonValue], deltas_since_base: int
) -> bool:
    return deltas_since_base >= DEFAULT_DELTAS_PER_BASE


@readonly(eq=False, slots=False)
class DocDefinition(Generic[M]):
    """One document kind. Use :func:`define_doc` to build it.

    ``checkpoint_when(value, ops, deltas_since_base)`` decides, for a non-empty change,
    whether to store the new value as a base (``True``) or the ops as a delta.
    ``deltas_since_base`` counts the deltas already stored after the newest base.
    Creations and version changes are always bases.
    """

    kind: str
    scope: DocumentScope
    history: DocumentHistory
    fork: ForkPolicy
    version: int
    initial: Callable[[], JsonValue]
    migrate: Callable[[JsonValue, int], JsonValue] | None
    checkpoint_when: Callable[[JsonValue, list[JsonValue], int], bool]
    model: type[M] | None = None

    def validate(self, value: JsonValue) -> JsonValue:
        """Check ``value`` against the definition's model (if any); return the JSON to store."""
        if self.model is None:
            return value
        try:
            return json_copy(self.model.model_validate(value).model_dump(mode="json"))
        except ValidationError as e:
            raise DocumentError(f"document {self.kind!r} fails its model: {e}") from None

    def upgrade(self, value: JsonValue, from_version: int) -> JsonValue:
        """Migrate a value stored by an older version of this definition."""
        if from_version > self.version:
            raise DocumentError(
                f"document {self.kind!r} is stored at version {from_version}, newer than this "
                f"definition ({self.version})"
            )
        if from_version == self.version:
            return value
        if self.migrate is None:
            raise DocumentError(
                f"document {self.kind!r} has no migration from version {from_version}"
            )
        return json_copy(self.migrate(value, from_version), f"migrated {self.kind!r}")


def define_doc(
    kind: str,
    *,
    scope: DocumentScope = "conversation",
    history: DocumentHistory = "latest",
    fork: ForkPolicy = "current",
    version: int = 1,
    initial: Callable[[], JsonValue] | None = None,
    migrate: Callable[[JsonValue, int], JsonValue] | None = None,
    checkpoint_when: Callable[[JsonValue, list[JsonValue], int], bool] | None = None,
    model: type[M] | None = None,
) -> DocDefinition[M]:
    """Declare a document kind.

    ``initial()`` gives the value of a new incarnation (default: the model's defaults,
    or ``None``). Only conversation documents may be ``rewindable`` and only those
    support historical reads and the ``as_of`` fork policy.
    """
    if not kind or not isinstance(kind, str):
        raise DocumentError("a document kind is a non-empty string")
    if scope not in ("session", "conversation", "task"):
        raise DocumentError(f"unknown document scope {scope!r}")
    if history not in ("latest", "rewindable"):
        raise DocumentError(f"unknown document history {history!r}")
    if history == "rewindable" and scope != "conversation":
        raise DocumentError("only conversation documents can be rewindable")
    if fork not in ("current", "as_of", "initial"):
        raise DocumentError(f"unknown fork policy {fork!r}")
    if fork == "as_of" and history != "rewindable":
        raise DocumentError("the as_of fork policy needs a rewindable document")
    if type(version) is not int or version < 1:
        raise DocumentError(f"document versions are positive integers, got {version!r}")
    if initial is None:
        if model is not None:
            bound = model

            def initial() -> JsonValue:
                return json_copy(bound().model_dump(mode="json"))
        else:

            def initial() -> JsonValue:
                return None

    return DocDefinition(
        kind=kind,
        scope=scope,
        history=history,
        fork=fork,
        version=version,
        initial=initial,
        migrate=migrate,
        checkpoint_when=checkpoint_when or _default_checkpoint_when,
        model=model,
    )


class DocHandle:
    """A document as one transaction sees it.

    ``value`` is a private, mutable copy: change it in place or assign a new value;
    when the transaction commits, the difference to the stored value becomes one
    revision. ``retire()`` ends the incarnation in the same commit. ``original`` is the
    committed value it started from, shared with the session's cache: never mutated
    (the commit diffs against it and shares its unchanged parts with the new value).
    """

    __slots__ = (
        "_retired",
        "created",
        "definition",
        "deltas_since_base",
        "original",
        "record",
        "stored_version",
        "value",
    )

    def __init__(
        self,
        definition: DocDefinition[Any],
        record: DocumentRecord,
        stored_version: int,
        original: JsonValue,
        value: JsonValue,
        deltas_since_base: int,
        created: bool,
    ) -> None:
        self.definition = definition
        self.record = record
        self.stored_version = stored_version
        self.original = original
        self.value = value
        self.deltas_since_base = deltas_since_base
        self.created = created
        self._retired = False

    @property
    def id(self) -> int:
        return self.record.id

    @property
    def retired(self) -> bool:
        return self._retired

    def set(self, value: JsonValue) -> None:
        self.value = value

    def retire(self) -> None:
        self._retired = True
