"""The Storage port: what the session needs from a database, and nothing more.

A Storage keeps five record tables (conversations, entries, tasks, submissions,
documents with their revisions) in one integer id namespace, and applies batches of
writes atomically. It does no semantic validation beyond what keeps its own data
consistent: atomic batches, global id ownership, immutable conversations and entries,
consistent document incarnations, JSON-only values and detached reads.

Contract, for every implementation (the conformance kit in :mod:`core.testing`
checks each point):

* **Ids.** ``mint_id()`` returns ids from one namespace shared by every record type,
  starting at 2 (id 1 is the root conversation) and above every id ever committed; a
  committed id belongs to one record type forever. Minting past :data:`MAX_ID` fails.
  An id minted before a commit returned is never minted again, even after a reopen
  (a record may name one that no record holds: a task kept in memory, see
  ``Tx.leave_unstored``); one minted after the last commit may be.
* **Commits.** ``commit(writes)`` applies every write or none and returns the commit's
  ``seq``, strictly greater than every earlier seq (gaps allowed). Entries are stamped
  with it (``Entry.commit_seq``), document revisions are keyed by it.
* **Failures.** :class:`~core.errors.StorageRejected` means *nothing was written* and the
  caller may go on. Any other exception from ``commit`` is *uncertain*: the batch may or
  may not be durable, and the caller must stop using this storage (the session poisons
  itself) until it is reopened.
* **Durability.** A committed batch is durable when ``commit`` returns — unless the
  storage says it defers (:class:`DeferringStorage`): then it is applied and visible to
  reads at once, and durable once a later ``flush()`` returns.
* **Detachment.** Records passed to ``commit`` and records returned by reads share no
  mutable state with the storage.
* **Scans** take one query record (:class:`TaskQuery` and its siblings: filters, order,
  ``limit``) and a cursor, and return a :class:`Page` of at most ``limit`` records in id order
  (``"asc"`` or ``"desc"``) plus an opaque JSON cursor for the next page, or ``None``
  on the last page. A cursor is only valid for the same scan with the same filters; it
  carries its order, so the next call may omit ``order`` but must not ask for the other
  one (:class:`~core.errors.InvalidCursor`).
* **Close.** After ``close()`` every method raises :class:`~core.errors.StorageClosed`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, Literal, Protocol, TypeAlias, TypeVar, runtime_checkable

from core.jsonvalue import JsonObject, JsonValue
from core.readonly import readonly
from core.records import (
    ConversationRecord,
    DocumentHistory,
    DocumentRecord,
    DocumentScope,
    DocumentState,
    Entry,
    SubmissionRecord,
    SubmissionStatus,
    Task,
    TaskStatus,
)

__all__ = [
    "ConversationQuery",
    "Cursor",
    "DeferringStorage",
    "DocumentChange",
    "DocumentCopy",
    "DocumentCreate",
    "DocumentQuery",
    "DocumentRetire",
    "EntryQuery",
    "Order",
    "Page",
    "SequencedStorage",
    "Storage",
    "SubmissionQuery",
    "TaskQuery",
    "Write",
]

T = TypeVar("T")
Order: TypeAlias = Literal["asc", "desc"]
Cursor: TypeAlias = JsonObject


@readonly
class Page(Generic[T]):
    """One page of a scan: its records and the cursor of the next page (``None``: last)."""

    items: list[T]
    next: Cursor | None


# --------------------------------------------------------------------------- scan queries
#
# A scan's filters, order and page size travel as one frozen record from the caller to
# the adapter (session, wrappers and adapters pass it on untouched); the cursor travels
# beside it because it is the only part that changes from page to page. ``filters()`` is
# what a cursor is bound to: a cursor of one query is refused by a query with others.


@dataclass(frozen=True, slots=True)
class ConversationQuery:
    """Conversations, ascending by id by default; owner filters are conjunctive."""

    owner_conversation_id: int | None = None
    owner_task_id: int | None = None
    order: Order | None = None
    limit: int = 100

    def filters(self) -> JsonObject:
        """The filters a cursor of this query is bound to."""
        return {
            "owner_conversation_id": self.owner_conversation_id,
            "owner_task_id": self.owner_task_id,
        }


@dataclass(frozen=True, slots=True)
class EntryQuery:
    """Entries visible to ``conversation_id`` through its fork ancestry with ids from
    ``min_id`` to ``max_id`` (inclusive, each optional), newest first by default."""

    conversation_id: int
    min_id: int | None = None
    max_id: int | None = None
    order: Order | None = None
    limit: int = 100

    def filters(self) -> JsonObject:
        """The filters a cursor of this query is bound to."""
        return {
            "conversation_id": self.conversation_id,
            "min_id": self.min_id,
            "max_id": self.max_id,
        }


@dataclass(frozen=True, slots=True)
class TaskQuery:
    """Tasks matching every given filter, ascending by id by default."""

    conversation_id: int | None = None
    kind: str | None = None
    status: TaskStatus | None = None
    abort_requested: bool | None = None
    background: bool | None = None
    order: Order | None = None
    limit: int = 100

    def filters(self) -> JsonObject:
        """The filters a cursor of this query is bound to."""
        return {
            "conversation_id": self.conversation_id,
            "kind": self.kind,
            "status": self.status,
            "abort_requested": self.abort_requested,
            "background": self.background,
        }


@dataclass(frozen=True, slots=True)
class SubmissionQuery:
    """Submissions matching every given filter, ascending by id by default."""

    conversation_id: int | None = None
    status: SubmissionStatus | None = None
    order: Order | None = None
    limit: int = 100

    def filters(self) -> JsonObject:
        """The filters a cursor of this query is bound to."""
        return {"conversation_id": self.conversation_id, "status": self.status}


@dataclass(frozen=True, slots=True)
class DocumentQuery:
    """Incarnations of exactly this ``scope`` and ``owner_id`` (``None`` is an owner too,
    not a wildcard) alive at seq ``at`` (``None``: current), optionally of one ``kind``;
    always ascending by id."""

    scope: DocumentScope
    owner_id: int | None = None
    kind: str | None = None
    at: int | None = None
    limit: int = 100

    def filters(self) -> JsonObject:
        """The filters a cursor of this query is bound to."""
        return {"scope": self.scope, "owner_id": self.owner_id, "kind": self.kind, "at": self.at}


# --------------------------------------------------------------------------- document writes


@readonly
class DocumentCreate:
    """Create an incarnation at an address that has no current one; its first revision is
    a base holding ``value`` at ``version``."""

    id: int
    kind: str
    scope: DocumentScope
    owner_id: int | None
    key: str | None
    history: DocumentHistory
    version: int
    value: JsonValue


@readonly
class DocumentCopy:
    """Create an incarnation whose first base is the stored value and version of document
    ``source_id`` at seq ``at`` (``None``: the current value before this batch).

    The source must have the same kind, must not be created, changed or retired in the
    same batch, and must be readable at ``at``.
    """

    id: int
    kind: str
    scope: DocumentScope
    owner_id: int | None
    key: str | None
    history: DocumentHistory
    source_id: int
    at: int | None


@readonly
class DocumentChange:
    """Add a revision: a delta (``ops``, same version as the current one) or, when
    ``ops`` is ``None``, a base holding ``value`` (required for a version change)."""

    id: int
    version: int
    ops: list[JsonValue] | None = None
    value: JsonValue = None


@readonly
class DocumentRetire:
    """End the current incarnation. Applied after every content write of the batch."""

    id: int


Write: TypeAlias = (
    ConversationRecord
    | Entry
    | Task
    | SubmissionRecord
    | DocumentCreate
    | DocumentCopy
    | DocumentChange
    | DocumentRetire
)
"""A table write is the full record itself (tasks and submissions are replaced whole;
conversations and entries are created once)."""


class Storage(Protocol):
    """Durable home of one session.

    The contract shared by every method (ids, commits, failures, detachment, scans,
    close) is in the module docstring; each method states what is its own. Reads see
    every commit that returned before they were called.
    """

    async def mint_id(self) -> int:
        """Reserve a fresh id from the global namespace.

        Returns an id above every id ever committed, every id minted before a commit
        (in this or an earlier opening) and every id minted since the storage was
        opened; it is not durable until a commit writes a record with it.
        Raises :class:`~core.errors.StorageRejected` past :data:`MAX_ID`.
        """
        ...

    async def commit(self, writes: Sequence[Write]) -> int:
        """Apply ``writes`` atomically and return the commit's seq.

        Every write lands or none does. On :class:`~core.errors.StorageRejected` (an id
        owned by another record type, a rewritten conversation or entry, a document
        conflict, a value that is not JSON) nothing was written and the storage stays
        usable. Any other exception leaves the outcome uncertain: the caller stops
        using this storage until it is reopened.
        """
        ...

    async def conversation(self, conversation_id: int) -> ConversationRecord | None:
        """The committed conversation with this id, or ``None`` (also for ids of other
        record types)."""
        ...

    async def conversations(self, conversation_ids: Sequence[int]) -> list[ConversationRecord]:
        """The committed conversations among ``conversation_ids``, ascending by id, read
        together (one snapshot); unknown ids and ids of other record types are left out.
        Opening a session loads every live task's conversation with it: one read,
        not one per conversation."""
        ...

    async def entry(self, entry_id: int) -> Entry | None:
        """The committed entry with this id, or ``None``; visibility is not checked."""
        ...

    async def visible_entry(self, conversation_id: int, entry_id: int) -> Entry | None:
        """The entry if ``conversation_id`` sees it through its fork ancestry, else ``None``.

        Raises :class:`~core.errors.UnknownRecord` for an unknown conversation.
        """
        ...

    async def latest_head(
        self, conversation_id: int, at_or_before: int | None = None
    ) -> Entry | None:
        """The newest head marker visible to the conversation with id ``<= at_or_before``
        (if given), or ``None``. Raises :class:`~core.errors.UnknownRecord` for an unknown
        conversation."""
        ...

    async def task(self, task_id: int) -> Task | None:
        """The task as of the latest commit, or ``None``."""
        ...

    async def submission(self, submission_id: int) -> SubmissionRecord | None:
        """The submission as of the latest commit, or ``None``."""
        ...

    async def submission_by_request(
        self, conversation_id: int, request_id: str
    ) -> SubmissionRecord | None:
        """The submission a conversation accepted under ``request_id``, or ``None``.

        A request id is unique per conversation: a commit that would give a second
        submission of the conversation the same request id is rejected.
        """
        ...

    async def document(self, document_id: int, at: int | None = None) -> DocumentState | None:
        """The document's value at seq ``at`` (``None``: current).

        ``None`` when the incarnation does not exist or is not alive at that point.
        Historical reads of documents that are not ``rewindable`` raise
        :class:`~core.errors.StorageRejected`.
        """
        ...

    async def find_document(
        self,
        kind: str,
        scope: DocumentScope,
        owner_id: int | None = None,
        key: str | None = None,
        at: int | None = None,
    ) -> DocumentRecord | None:
        """The incarnation at this address alive at ``at`` (``None``: the current one)."""
        ...

    async def current_documents(
        self, kind: str, scope: DocumentScope, owner_ids: Sequence[int], key: str | None = None
    ) -> list[DocumentState]:
        """The current incarnations of document ``kind`` at ``(scope, owner, key)`` for
        each of ``owner_ids`` that has one, with their current values, ascending by owner
        id, read together (one snapshot). Opening the harness after a crash notes an
        event in every recovered conversation's document: one read, not two per
        conversation."""
        ...

    async def scan_conversations(
        self, query: ConversationQuery, cursor: Cursor | None = None
    ) -> Page[ConversationRecord]:
        """One page of the conversations ``query`` selects (see :class:`ConversationQuery`)."""
        ...

    async def scan_entries(self, query: EntryQuery, cursor: Cursor | None = None) -> Page[Entry]:
        """One page of the entries ``query`` selects (see :class:`EntryQuery`). Each fork
        ancestor contributes only entries up to the fork point its child recorded.
        Raises :class:`~core.errors.UnknownRecord` for an unknown conversation.
        """
        ...

    async def scan_tasks(self, query: TaskQuery, cursor: Cursor | None = None) -> Page[Task]:
        """One page of the tasks ``query`` selects (see :class:`TaskQuery`)."""
        ...

    async def scan_submissions(
        self, query: SubmissionQuery, cursor: Cursor | None = None
    ) -> Page[SubmissionRecord]:
        """One page of the submissions ``query`` selects (see :class:`SubmissionQuery`)."""
        ...

    async def scan_documents(
        self, query: DocumentQuery, cursor: Cursor | None = None
    ) -> Page[DocumentRecord]:
        """One page of the incarnations ``query`` selects (see :class:`DocumentQuery`)."""
        ...

    async def close(self) -> None:
        """Release resources. Idempotent; every later call raises ``StorageClosed``."""
        ...


@runtime_checkable
class SequencedStorage(Protocol):
    """A storage that can tell the seq of its newest commit without a commit. Optional:
    the session starts its ``last_seq`` from it, so a view read before this process's
    first commit still says which commit it is current as of (watch cursors)."""

    @property
    def seq(self) -> int:
        """The seq of the newest commit (0 when there is none)."""
        ...


@runtime_checkable
class DeferringStorage(Protocol):
    """A storage that may defer making commits durable. Optional: a storage whose
    commits are durable when ``commit`` returns need not implement it.

    A deferred commit is applied (reads see it, later commits build on it) but may be
    lost — with every later commit, never alone — until ``flush()`` makes it durable.
    So nothing may act on it outside the storage until then: the session flushes before
    a tool that is not ``safe`` runs (docs/design.md invariant 4), and the host before it
    answers a client or lets the actor go.
    """

    @property
    def pending(self) -> int:
        """How many commits returned but are not durable yet (0: nothing to flush)."""
        ...

    async def flush(self) -> None:
        """Make every commit that returned durable.

        Returns once they are (at once when none is pending). On
        :class:`~core.errors.StorageRejected` none of them became durable and they stay
        pending: the caller may go on, but must not act as if they were durable. Any
        other exception means they may never be: the caller stops using this storage
        (the session poisons itself) until it is reopened. After ``close()`` it raises
        :class:`~core.errors.StorageClosed`.
        """
        ...
