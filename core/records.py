"""The records perdure stores: conversations, entries, tasks, submissions, documents.

Records are plain, slotted, read-only dataclasses (:mod:`core.readonly`) rather than
pydantic models: the kernel builds and copies them on every commit (twice as cheap to
build as a pydantic model), they take positional arguments and pattern-match cleanly, and
their stored JSON shape is written out here by hand. Untrusted input is validated at the
boundaries instead (:func:`core.jsonvalue.json_copy` for payloads, pydantic for tool
arguments, HTTP bodies and typed documents); ``tests/bench/bench_records.py`` measures both
choices. JSON payload fields (``input``, ``checkpoint``, ``data``, ...) hold values
admitted through ``json_copy``: read-only.

Each record converts to and from a JSON object (``to_json`` / ``*_from_json``); this
module is the only place that knows the stored shape.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any, Literal, TypeAlias, cast

from core.errors import StorageCorrupt
from core.jsonvalue import JsonObject, JsonValue
from core.readonly import readonly

__all__ = [
    "MAX_ID",
    "ROOT_CONVERSATION_ID",
    "Aborted",
    "Completed",
    "Completing",
    "ConversationOwner",
    "ConversationParent",
    "ConversationRecord",
    "DocumentHistory",
    "DocumentRecord",
    "DocumentScope",
    "DocumentState",
    "Entry",
    "ErrorInfo",
    "Failed",
    "Faulted",
    "Orphaned",
    "Outcome",
    "Pending",
    "Running",
    "SubmissionRecord",
    "SubmissionStatus",
    "SubmissionType",
    "Task",
    "TaskState",
    "TaskStatus",
    "Terminal",
    "WaitPolicy",
    "Waiting",
    "conversation_from_json",
    "entry_from_json",
    "outcome_from_json",
    "state_from_json",
    "submission_from_json",
    "task_from_json",
]

ROOT_CONVERSATION_ID = 1
"""Id 1 is reserved for the root conversation; minting starts at 2."""

MAX_ID = 2**53 - 1
"""Ids stay exact as JavaScript numbers (Durable Objects) and JSON doubles."""

_KEEP: Any = object()  # the default of Task.evolve's arguments: the field is kept


# --------------------------------------------------------------------------- conversations


@readonly
class ConversationParent:
    """Fork history: the child sees the parent's entries up to ``at_entry``."""

    conversation_id: int
    at_entry: int


@readonly
class ConversationOwner:
    """The task that owns a sub-agent conversation."""

    conversation_id: int
    task_id: int


@readonly
class ConversationRecord:
    """A stored conversation: its id, and where it came from (a fork's ``parent``, a
    sub-agent's ``owner``). Not the handle callers hold on a conversation, which is
    :class:`core.harness.Conversation`."""

    id: int
    parent: ConversationParent | None = None
    owner: ConversationOwner | None = None

    def to_json(self) -> JsonObject:
        out: JsonObject = {"id": self.id}
        if self.parent is not None:
            out["parent"] = {
                "conversation_id": self.parent.conversation_id,
                "at_entry": self.parent.at_entry,
            }
        if self.owner is not None:
            out["owner"] = {
                "conversation_id": self.owner.conversation_id,
                "task_id": self.owner.task_id,
            }
        return out


def conversation_from_json(o: JsonObject) -> ConversationRecord:
    p = cast("JsonObject | None", o.get("parent"))
    w = cast("JsonObject | None", o.get("owner"))
    return ConversationRecord(
        id=cast(int, o["id"]),
        parent=ConversationParent(cast(int, p["conversation_id"]), cast(int, p["at_entry"]))
        if p is not None
        else None,
        owner=ConversationOwner(cast(int, w["conversation_id"]), cast(int, w["task_id"]))
        if w is not None
        else None,
    )


# --------------------------------------------------------------------------- entries


@readonly
class Entry:
    """An immutable transcript entry.

    ``head`` makes the entry a head marker: the active context range starts at entry
    ``head``. ``edits`` omit or replace earlier entries in the derived context.
    ``commit_seq`` is stamped by storage with the seq of the commit that wrote it.
    """

    id: int
    conversation_id: int
    kind: str
    message: JsonValue = None
    data: JsonValue = None
    head: int | None = None
    edits: list[JsonValue] | None = None
    by_task_id: int | None = None
    created_at: int | None = None
    commit_seq: int | None = None

    def stamped(self, commit_seq: int) -> Entry:
        """This entry as the commit ``commit_seq`` stores it (``dataclasses.replace``
        without its generic overhead: storage stamps every entry it writes)."""
        return Entry(
            self.id,
            self.conversation_id,
            self.kind,
            self.message,
            self.data,
            self.head,
            self.edits,
            self.by_task_id,
            self.created_at,
            commit_seq,
        )

    def to_json(self) -> JsonObject:
        out: JsonObject = {
            "id": self.id,
            "conversation_id": self.conversation_id,
            "kind": self.kind,
        }
        if self.message is not None:
            out["message"] = self.message
        if self.data is not None:
            out["data"] = self.data
        if self.head is not None:
            out["head"] = self.head
        if self.edits is not None:
            out["edits"] = self.edits
        if self.by_task_id is not None:
            out["by_task_id"] = self.by_task_id
        if self.created_at is not None:
            out["created_at"] = self.created_at
        if self.commit_seq is not None:
            out["commit_seq"] = self.commit_seq
        return out


def entry_from_json(o: JsonObject) -> Entry:
    return Entry(
        id=cast(int, o["id"]),
        conversation_id=cast(int, o["conversation_id"]),
        kind=cast(str, o["kind"]),
        message=o.get("message"),
        data=o.get("data"),
        head=cast("int | None", o.get("head")),
        edits=cast("list[JsonValue] | None", o.get("edits")),
        by_task_id=cast("int | None", o.get("by_task_id")),
        created_at=cast("int | None", o.get("created_at")),
        commit_seq=cast("int | None", o.get("commit_seq")),
    )


# --------------------------------------------------------------------------- outcomes


@readonly
class ErrorInfo:
    message: str
    detail: JsonValue = None

    def to_json(self) -> JsonObject:
        out: JsonObject = {"message": self.message}
        if self.detail is not None:
            out["detail"] = self.detail
        return out


def _error_from_json(o: JsonValue) -> ErrorInfo:
    d = cast(JsonObject, o)
    return ErrorInfo(cast(str, d["message"]), d.get("detail"))


@readonly
class Completed:
    result: JsonValue = None
    kind: Literal["completed"] = field(default="completed", init=False)


@readonly
class Failed:
    error: ErrorInfo
    result: JsonValue = None
    kind: Literal["failed"] = field(default="failed", init=False)


@readonly
class Aborted:
    reason: str | None = None
    result: JsonValue = None
    kind: Literal["aborted"] = field(default="aborted", init=False)


@readonly
class Orphaned:
    """No definition can run the task: ``missing_task``, ``task_too_old``, ``migration_failed``."""

    reason: str
    kind: Literal["orphaned"] = field(default="orphaned", init=False)


@readonly
class Faulted:
    """An uncaught exception, a phase without durable progress, or a bad abort handler."""

    error: ErrorInfo
    kind: Literal["faulted"] = field(default="faulted", init=False)


Outcome: TypeAlias = Completed | Failed | Aborted | Orphaned | Faulted


def outcome_to_json(o: Outcome) -> JsonObject:
    if isinstance(o, Completed):
        return {"kind": "completed", "result": o.result}
    if isinstance(o, Failed):
        return {"kind": "failed", "error": o.error.to_json(), "result": o.result}
    if isinstance(o, Aborted):
        return {"kind": "aborted", "reason": o.reason, "result": o.result}
    if isinstance(o, Orphaned):
        return {"kind": "orphaned", "reason": o.reason}
    return {"kind": "faulted", "error": o.error.to_json()}


def outcome_from_json(o: JsonObject) -> Outcome:
    k = o["kind"]
    if k == "completed":
        return Completed(o.get("result"))
    if k == "failed":
        return Failed(_error_from_json(o["error"]), o.get("result"))
    if k == "aborted":
        return Aborted(cast("str | None", o.get("reason")), o.get("result"))
    if k == "orphaned":
        return Orphaned(cast(str, o["reason"]))
    if k == "faulted":
        return Faulted(_error_from_json(o["error"]))
    raise StorageCorrupt(f"unknown outcome kind {k!r}")


# --------------------------------------------------------------------------- task states

TaskStatus: TypeAlias = Literal["pending", "running", "waiting", "completing", "terminal"]
WaitPolicy: TypeAlias = Literal["all_settled", "fail_fast"]


@readonly
class Pending:
    """Runnable. Written only by open-time reconciliation and definition handover."""

    checkpoint: JsonObject
    status: Literal["pending"] = field(default="pending", init=False)


@readonly
class Running:
    """Reserved by one invocation."""

    checkpoint: JsonObject
    status: Literal["running"] = field(default="running", init=False)


@readonly
class Waiting:
    """Ready when every task in ``on`` is terminal (or one failed, under ``fail_fast``)
    and the clock has reached ``until`` (epoch ms). Holds no invocation."""

    checkpoint: JsonObject
    on: tuple[int, ...] = ()
    policy: WaitPolicy = "all_settled"
    until: int | None = None
    status: Literal["waiting"] = field(default="waiting", init=False)


@readonly
class Completing:
    """Outcome decided; ordinary owned work is still draining."""

    outcome: Outcome
    status: Literal["completing"] = field(default="completing", init=False)


@readonly
class Terminal:
    outcome: Outcome
    status: Literal["terminal"] = field(default="terminal", init=False)


TaskState: TypeAlias = Pending | Running | Waiting | Completing | Terminal


def state_to_json(s: TaskState) -> JsonObject:
    if isinstance(s, Waiting):
        out: JsonObject = {
            "status": "waiting",
            "checkpoint": s.checkpoint,
            "on": list(s.on),
            "policy": s.policy,
        }
        if s.until is not None:
            out["until"] = s.until
        return out
    if isinstance(s, Completing | Terminal):
        return {"status": s.status, "outcome": outcome_to_json(s.outcome)}
    return {"status": s.status, "checkpoint": s.checkpoint}


def state_from_json(o: JsonObject) -> TaskState:
    st = o["status"]
    if st == "pending":
        return Pending(cast(JsonObject, o["checkpoint"]))
    if st == "running":
        return Running(cast(JsonObject, o["checkpoint"]))
    if st == "waiting":
        return Waiting(
            cast(JsonObject, o["checkpoint"]),
            tuple(cast("list[int]", o["on"])),
            cast(WaitPolicy, o["policy"]),
            cast("int | None", o.get("until")),
        )
    if st == "completing":
        return Completing(outcome_from_json(cast(JsonObject, o["outcome"])))
    if st == "terminal":
        return Terminal(outcome_from_json(cast(JsonObject, o["outcome"])))
    raise StorageCorrupt(f"unknown task status {st!r}")


# --------------------------------------------------------------------------- tasks


@readonly
class Task:
    """A task record. Every write replaces the whole record.

    ``owner`` is the owning task id, or ``None`` for a task owned by its conversation.
    ``memos`` survive checkpoints, handover and reopen and vanish once the task is
    completing or terminal.
    """

    id: int
    conversation_id: int
    kind: str
    version: int
    input: JsonValue
    state: TaskState
    owner: int | None = None
    background: bool = False
    abort_requested: bool = False
    started_at: int | None = None
    ended_at: int | None = None
    memos: dict[str, JsonValue] = field(default_factory=dict)

    @property
    def status(self) -> TaskStatus:
        return self.state.status

    @property
    def checkpoint(self) -> JsonObject | None:
        s = self.state
        return None if isinstance(s, Completing | Terminal) else s.checkpoint

    @property
    def outcome(self) -> Outcome | None:
        s = self.state
        return s.outcome if isinstance(s, Completing | Terminal) else None

    @property
    def live(self) -> bool:
        return not isinstance(self.state, Terminal)

    def evolve(
        self,
        *,
        version: int = _KEEP,
        input: JsonValue = _KEEP,
        state: TaskState = _KEEP,
        abort_requested: bool = _KEEP,
        started_at: int | None = _KEEP,
        ended_at: int | None = _KEEP,
        memos: dict[str, JsonValue] = _KEEP,
    ) -> Task:
        """A copy with the given fields replaced (``dataclasses.replace``, minus its cost)."""
        return Task(
            self.id,
            self.conversation_id,
            self.kind,
            self.version if version is _KEEP else version,
            self.input if input is _KEEP else input,
            self.state if state is _KEEP else state,
            self.owner,
            self.background,
            self.abort_requested if abort_requested is _KEEP else abort_requested,
            self.started_at if started_at is _KEEP else started_at,
            self.ended_at if ended_at is _KEEP else ended_at,
            self.memos if memos is _KEEP else memos,
        )

    def to_json(self) -> JsonObject:
        out: JsonObject = {
            "id": self.id,
            "conversation_id": self.conversation_id,
            "kind": self.kind,
            "version": self.version,
            "input": self.input,
            "state": state_to_json(self.state),
            "background": self.background,
            "abort_requested": self.abort_requested,
        }
        if self.owner is not None:
            out["owner"] = self.owner
        if self.started_at is not None:
            out["started_at"] = self.started_at
        if self.ended_at is not None:
            out["ended_at"] = self.ended_at
        if self.memos:
            out["memos"] = self.memos
        return out


def task_from_json(o: JsonObject) -> Task:
    return Task(
        id=cast(int, o["id"]),
        conversation_id=cast(int, o["conversation_id"]),
        kind=cast(str, o["kind"]),
        version=cast(int, o["version"]),
        input=o.get("input"),
        state=state_from_json(cast(JsonObject, o["state"])),
        owner=cast("int | None", o.get("owner")),
        background=bool(o.get("background", False)),
        abort_requested=bool(o.get("abort_requested", False)),
        started_at=cast("int | None", o.get("started_at")),
        ended_at=cast("int | None", o.get("ended_at")),
        memos=cast("dict[str, JsonValue]", o.get("memos") or {}),
    )


# --------------------------------------------------------------------------- submissions

SubmissionType: TypeAlias = Literal["input", "write"]
SubmissionStatus: TypeAlias = Literal["queued", "placed", "done", "unanswered"]


@readonly
class SubmissionRecord:
    """An accepted input or write. input: queued → placed → done | unanswered;
    write: queued → done | unanswered. ``entry`` is the placed entry, ``answer`` the
    answering entry."""

    id: int
    conversation_id: int
    type: SubmissionType
    status: SubmissionStatus
    request_id: str | None = None
    entry: int | None = None
    answer: int | None = None
    reason: str | None = None
    detail: JsonValue = None
    created_at: int | None = None

    def to_json(self) -> JsonObject:
        out: JsonObject = {
            "id": self.id,
            "conversation_id": self.conversation_id,
            "type": self.type,
            "status": self.status,
        }
        for name in ("request_id", "entry", "answer", "reason", "detail", "created_at"):
            v = getattr(self, name)
            if v is not None:
                out[name] = v
        return out


def submission_from_json(o: JsonObject) -> SubmissionRecord:
    return SubmissionRecord(
        id=cast(int, o["id"]),
        conversation_id=cast(int, o["conversation_id"]),
        type=cast(SubmissionType, o["type"]),
        status=cast(SubmissionStatus, o["status"]),
        request_id=cast("str | None", o.get("request_id")),
        entry=cast("int | None", o.get("entry")),
        answer=cast("int | None", o.get("answer")),
        reason=cast("str | None", o.get("reason")),
        detail=o.get("detail"),
        created_at=cast("int | None", o.get("created_at")),
    )


# --------------------------------------------------------------------------- documents

DocumentScope: TypeAlias = Literal["session", "conversation", "task"]
DocumentHistory: TypeAlias = Literal["latest", "rewindable"]


@readonly
class DocumentRecord:
    """One incarnation of a document: alive for ``created_at <= seq < retired_at``.

    The address is ``(kind, scope, owner_id, key)``: ``owner_id`` is the conversation id
    for conversation documents, the task id for task documents and ``None`` for session
    documents; ``key`` tells family members apart. At most one incarnation per address
    is current. ``history="rewindable"`` keeps every revision for historical reads;
    ``"latest"`` keeps only what the current value needs.
    """

    id: int
    kind: str
    scope: DocumentScope
    owner_id: int | None = None
    key: str | None = None
    history: DocumentHistory = "latest"
    created_at: int = 0
    retired_at: int | None = None

    def alive_at(self, seq: int) -> bool:
        return self.created_at <= seq and (self.retired_at is None or seq < self.retired_at)


@readonly
class DocumentState:
    """A document's value at one point: its stored ``version`` and how many deltas
    follow the newest base (the input of base decisions)."""

    record: DocumentRecord
    version: int
    value: JsonValue
    deltas_since_base: int
