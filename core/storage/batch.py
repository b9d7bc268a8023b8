"""Validation and planning of a commit batch, shared by every Storage adapter.

An adapter hands :func:`plan_commit` a synchronous :class:`BatchView` of its committed
state; the planner checks every storage-level rule, encodes every record once, and
returns a :class:`CommitPlan` the adapter applies verbatim. A rule violation raises
:class:`~core.errors.StorageRejected` before anything is applied, which is what makes
rejection a guarantee of no effect.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from core.errors import StorageRejected
from core.jsonvalue import JsonValue, dumps
from core.records import (
    MAX_ID,
    ROOT_CONVERSATION_ID,
    Completed,
    ConversationRecord,
    DocumentRecord,
    DocumentState,
    Entry,
    Pending,
    Running,
    SubmissionRecord,
    Task,
    TaskState,
    Terminal,
    state_to_json,
)
from core.storage.port import (
    DocumentChange,
    DocumentCopy,
    DocumentCreate,
    DocumentRetire,
    Write,
)

__all__ = ["BatchView", "CommitPlan", "Revision", "kind_text", "plan_commit"]

_OP_VERBS = frozenset(("r", "s", "d", "p"))


class BatchView(Protocol):
    """Committed state as the batch finds it (synchronous: adapters answer it inside
    their transaction, or from memory)."""

    def id_owner(self, record_id: int) -> str | None:
        """The record type that owns ``record_id``, or ``None``."""
        ...

    def submission_for_request(self, conversation_id: int, request_id: str) -> int | None:
        """The id of the conversation's submission with ``request_id``, or ``None``."""
        ...

    def document_record(self, document_id: int) -> DocumentRecord | None:
        """The incarnation record of ``document_id`` (alive or retired), or ``None``."""
        ...

    def document_version(self, document_id: int) -> int | None:
        """The version of the newest revision of a current document."""
        ...

    def current_document(
        self, kind: str, scope: str, owner_id: int | None, key: str | None
    ) -> int | None:
        """The id of the live incarnation at this address, or ``None``."""
        ...

    def document_state(self, document_id: int, at: int | None) -> DocumentState | None:
        """The document's value at seq ``at`` (``None``: current), as
        :meth:`~core.storage.port.Storage.document` defines it."""
        ...


@dataclass(slots=True)
class Revision:
    """One document revision row as a commit writes it."""

    document_id: int
    seq: int
    base: bool
    version: int
    content: str
    """JSON text: the value for a base, the op list for a delta."""


@dataclass(slots=True)
class CommitPlan:
    """What a batch of writes amounts to, checked and serialized, ready for an adapter to
    apply in one transaction."""

    seq: int
    next_id: int
    new_ids: dict[int, str] = field(default_factory=dict)
    conversations: list[tuple[ConversationRecord, str]] = field(default_factory=list)
    entries: list[tuple[Entry, str]] = field(default_factory=list)
    """Entries as staged, with their record's text as stored (stamped with ``seq``)."""
    tasks: dict[int, tuple[Task, str]] = field(default_factory=dict)
    submissions: dict[int, tuple[SubmissionRecord, str]] = field(default_factory=dict)
    created_documents: list[DocumentRecord] = field(default_factory=list)
    revisions: list[Revision] = field(default_factory=list)
    versions: dict[int, int] = field(default_factory=dict)
    """Current version of every document that got a revision."""
    version_changes: dict[int, int] = field(default_factory=dict)
    """Existing documents whose version this batch changes (a base at a new version)."""
    retired: list[DocumentRecord] = field(default_factory=list)
    """Records as they are after retirement (``retired_at == seq``)."""
    rebased_latest: list[int] = field(default_factory=list)
    """``latest`` documents that got a new base: older revisions can go."""
    latest_deltas: list[int] = field(default_factory=list)
    """``latest`` documents that got a delta (none of their older revisions is read at
    a point of its own, so an adapter may fold the delta into the one before it)."""


def plan_commit(writes: Sequence[Write], view: BatchView, seq: int, next_id: int) -> CommitPlan:
    plan = CommitPlan(seq=seq, next_id=next_id)
    records: dict[int, DocumentRecord] = {}  # documents touched by the batch
    created_here: set[int] = set()
    touched_sources: set[int] = set()
    copies: list[DocumentCopy] = []
    retires: list[DocumentRetire] = []
    requests: dict[tuple[int, str], int] = {}
    content_written: set[int] = set()

    def one_content_write(doc_id: int) -> None:
        # Revisions are keyed by (document, seq): one content write per document per
        # commit. The session folds every change of a commit into one revision.
        if doc_id in content_written:
            raise StorageRejected(f"document {doc_id} has two content writes in one commit")
        content_written.add(doc_id)

    def own(record_id: object, kind: str, *, replaceable: bool) -> None:
        if type(record_id) is not int or not 1 <= record_id <= MAX_ID:
            raise StorageRejected(f"{kind} id {record_id!r} is not an integer in 1..{MAX_ID}")
        if record_id == ROOT_CONVERSATION_ID and kind != "conversation":
            raise StorageRejected(f"ID 1 is reserved for the root conversation, not a {kind}")
        owner = plan.new_ids.get(record_id) or view.id_owner(record_id)
        if owner is not None and (owner != kind or not replaceable):
            raise StorageRejected(f"ID {record_id} already belongs to {owner}")
        if owner is None:
            plan.new_ids[record_id] = kind
        plan.next_id = max(plan.next_id, record_id + 1)

    def document(doc_id: int) -> DocumentRecord:
        rec = records.get(doc_id)
        if rec is None:
            rec = view.document_record(doc_id)
            if rec is None:
                raise StorageRejected(f"unknown document {doc_id}")
            records[doc_id] = rec
        if rec.retired_at is not None:
            raise StorageRejected(f"document {doc_id} is retired")
        return rec

    def version_of(doc_id: int) -> int:
        v = plan.versions.get(doc_id)
        if v is None:
            v = view.document_version(doc_id)
            if v is None:
                raise StorageRejected(f"document {doc_id} has no stored revision")
        return v

    def incarnate(w: DocumentCreate | DocumentCopy) -> DocumentRecord:
        _check_document_shape(w)
        own(w.id, "document", replaceable=False)
        one_content_write(w.id)
        rec = DocumentRecord(w.id, w.kind, w.scope, w.owner_id, w.key, w.history, seq, None)
        records[w.id] = rec
        created_here.add(w.id)
        plan.created_documents.append(rec)
        return rec

    for w in writes:
        if isinstance(w, Entry):
            own(w.id, "entry", replaceable=False)
            # Stamped in its JSON form: ``commit_seq`` is the last key, as ``to_json`` of
            # ``w.stamped(seq)`` writes it, without building that entry.
            record = w.to_json()
            record["commit_seq"] = seq
            plan.entries.append((w, _encode(record, f"entry {w.id}")))
        elif isinstance(w, Task):
            own(w.id, "task", replaceable=True)
            plan.tasks[w.id] = (w, _task_text(w))
        elif isinstance(w, SubmissionRecord):
            own(w.id, "submission", replaceable=True)
            if w.request_id is not None:
                key = (w.conversation_id, w.request_id)
                holder = requests.get(key)
                if holder is None:
                    holder = view.submission_for_request(*key)
                if holder is not None and holder != w.id:
                    raise StorageRejected(
                        f"request id {w.request_id!r} already identifies submission {holder}"
                    )
                requests[key] = w.id
            plan.submissions[w.id] = (w, _encode(w.to_json(), f"submission {w.id}"))
        elif isinstance(w, ConversationRecord):
            own(w.id, "conversation", replaceable=False)
            plan.conversations.append((w, _encode(w.to_json(), f"conversation {w.id}")))
        elif isinstance(w, DocumentCreate):
            incarnate(w)
            _check_version(w.version)
            plan.revisions.append(
                Revision(w.id, seq, True, w.version, _encode(w.value, f"document {w.id}"))
            )
            plan.versions[w.id] = w.version
        elif isinstance(w, DocumentCopy):
            copies.append(w)
            incarnate(w)
        elif isinstance(w, DocumentChange):
            rec = document(w.id)
            one_content_write(w.id)
            touched_sources.add(w.id)
            _check_version(w.version)
            if w.ops is None:
                content = _encode(w.value, f"document {w.id}")
                if rec.history == "latest":
                    plan.rebased_latest.append(w.id)
            else:
                if w.version != version_of(w.id):
                    raise StorageRejected(
                        f"document {w.id}: a version transition requires a base, not a delta"
                    )
                _check_ops(w.ops, w.id)
                content = _encode(w.ops, f"document {w.id}")
                if rec.history == "latest":
                    plan.latest_deltas.append(w.id)
            if w.ops is None and w.id not in created_here and w.version != version_of(w.id):
                plan.version_changes[w.id] = w.version
            plan.revisions.append(Revision(w.id, seq, w.ops is None, w.version, content))
            plan.versions[w.id] = w.version
        elif isinstance(w, DocumentRetire):
            document(w.id)
            retires.append(w)
            touched_sources.add(w.id)
        else:
            raise StorageRejected(f"not a storage write: {type(w).__name__}")

    # Copies read committed pre-batch state; a source the batch also writes would make
    # "the value at that point" ambiguous.
    for c in copies:
        if c.source_id in touched_sources or c.source_id in created_here:
            raise StorageRejected(
                f"document {c.source_id} is both copied and written in one commit"
            )
        src = view.document_record(c.source_id)
        if src is None:
            raise StorageRejected(f"unknown document {c.source_id}")
        if src.kind != c.kind:
            raise StorageRejected(f"cannot copy a {src.kind!r} document into a {c.kind!r} one")
        state = view.document_state(c.source_id, c.at)
        if state is None:
            raise StorageRejected(f"document {c.source_id} is not alive at {c.at!r}")
        plan.revisions.append(
            Revision(c.id, seq, True, state.version, _encode(state.value, f"document {c.id}"))
        )
        plan.versions[c.id] = state.version

    retired_ids: set[int] = set()
    for r in retires:
        if r.id in retired_ids:
            raise StorageRejected(f"document {r.id} is retired twice in one commit")
        retired_ids.add(r.id)
        rec = replace(records[r.id], retired_at=seq)
        records[r.id] = rec
        plan.retired.append(rec)

    # At most one current incarnation per address once the batch is applied. Counted by
    # address, not pairwise: an open-time commit creates one document per conversation
    # (hundreds), and comparing every pair made that commit quadratic.
    created_at: dict[tuple[str, str, int | None, str | None], int] = {}
    for rec in plan.created_documents:
        if rec.id not in retired_ids:
            address = (rec.kind, rec.scope, rec.owner_id, rec.key)
            created_at[address] = created_at.get(address, 0) + 1
    for rec in plan.created_documents:
        if rec.id in retired_ids:
            continue
        holder = view.current_document(rec.kind, rec.scope, rec.owner_id, rec.key)
        clash = holder is not None and holder not in retired_ids
        clash = clash or created_at[(rec.kind, rec.scope, rec.owner_id, rec.key)] > 1
        if clash:
            raise StorageRejected(
                f"document address ({rec.kind!r}, {rec.scope}, {rec.owner_id}, {rec.key!r}) "
                "already has a current incarnation"
            )
    return plan


def _field(value: object) -> str:
    # An exact int encodes as its repr (what the JSON encoder writes); anything else,
    # True and False included, goes through the encoder.
    return str(value) if type(value) is int else dumps(value)  # type: ignore[arg-type]


def _flag(value: object) -> str:
    # Each call of the C encoder costs as much as a short record (~5k instructions):
    # the two flags of every task are spelled here instead.
    if value is False:
        return "false"
    return "true" if value is True else dumps(value)  # type: ignore[arg-type]


_kind_texts: dict[str, str] = {}


def kind_text(kind: str) -> str:
    """``dumps(kind)`` for a task kind, remembered: a commit encodes the kinds of its
    tasks for their records and their indexed ``kind`` column, and there are few."""
    text = _kind_texts.get(kind)
    if text is None:
        text = dumps(kind)
        if type(kind) is str and len(_kind_texts) < 1024:
            _kind_texts[kind] = text
    return text


def _value_text(value: JsonValue) -> str:
    # An empty object (a task without input, a result without fields) needs no encoder.
    return "{}" if type(value) is dict and not value else dumps(value)


def _state_text(state: TaskState) -> str:
    # Running, Pending and a Terminal completion are nearly every task write: their
    # constant parts are spelled out, one encoder call for the value they carry.
    if type(state) is Running:
        return f'{{"status":"running","checkpoint":{_value_text(state.checkpoint)}}}'
    if type(state) is Pending:
        return f'{{"status":"pending","checkpoint":{_value_text(state.checkpoint)}}}'
    if type(state) is Terminal and type(state.outcome) is Completed:
        result = _value_text(state.outcome.result)
        return f'{{"status":"terminal","outcome":{{"kind":"completed","result":{result}}}}}'
    return dumps(state_to_json(state))


def _task_text(task: Task) -> str:
    """``dumps(task.to_json())``, the same text, without building the dict or encoding
    its constant keys on every commit (a commit writes several task records, and the
    encoder makes a new string of each key every time). Keys, their order and the
    optional ones are ``Task.to_json``'s; a payload that is not JSON is rejected."""
    try:
        text = (
            f'{{"id":{_field(task.id)},"conversation_id":{_field(task.conversation_id)},'
            f'"kind":{kind_text(task.kind)},"version":{_field(task.version)},'
            f'"input":{_value_text(task.input)},"state":{_state_text(task.state)},'
            f'"background":{_flag(task.background)},'
            f'"abort_requested":{_flag(task.abort_requested)}'
        )
        if task.owner is not None:
            text += f',"owner":{_field(task.owner)}'
        if task.started_at is not None:
            text += f',"started_at":{_field(task.started_at)}'
        if task.ended_at is not None:
            text += f',"ended_at":{_field(task.ended_at)}'
        if task.memos:
            text += f',"memos":{dumps(task.memos)}'
        return text + "}"
    except (TypeError, ValueError, RecursionError) as e:
        raise StorageRejected(f"task {task.id} is not plain JSON: {e}") from None


def _encode(value: JsonValue, where: str) -> str:
    try:
        return dumps(value)
    except (TypeError, ValueError, RecursionError) as e:  # RecursionError: a cycle
        raise StorageRejected(f"{where} is not plain JSON: {e}") from None


def _check_version(version: object) -> None:
    if type(version) is not int or version < 1:
        raise StorageRejected(f"document version must be a positive integer, got {version!r}")


def _check_document_shape(w: DocumentCreate | DocumentCopy) -> None:
    if type(w.kind) is not str or not w.kind:
        raise StorageRejected("document kind must be a non-empty string")
    if w.key is not None and type(w.key) is not str:
        raise StorageRejected("document key must be a string or None")
    if w.scope == "session":
        if w.owner_id is not None:
            raise StorageRejected("session documents have no owner")
    elif w.scope in ("conversation", "task"):
        if type(w.owner_id) is not int:
            raise StorageRejected(f"{w.scope} documents need an owner id")
    else:
        raise StorageRejected(f"unknown document scope {w.scope!r}")
    if w.history not in ("latest", "rewindable"):
        raise StorageRejected(f"unknown document history {w.history!r}")
    if w.history == "rewindable" and w.scope != "conversation":
        raise StorageRejected("only conversation documents can be rewindable")


def _check_ops(ops: object, doc_id: int) -> None:
    if type(ops) is not list:
        raise StorageRejected(f"document {doc_id}: ops must be a list")
    for op in ops:
        if type(op) is not list or not op or op[0] not in _OP_VERBS:
            raise StorageRejected(f"document {doc_id}: unknown op verb in {op!r}")
