"""The answers of the actor API as the client returns them (pydantic models).

They mirror the host's response schemas (``runtimes/actor/api``; the OpenAPI document at
``/openapi.json``) field for field — ``tests/client/test_models.py`` holds them to it —
but are the client's own: importing the client does not import the server (FastAPI, the
harness), and a field a newer host adds is ignored rather than refused.
"""

from __future__ import annotations

from typing import Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict

__all__ = [
    "SETTLED",
    "Aborted",
    "Accepted",
    "AgentState",
    "Answer",
    "ApprovalDecision",
    "Approvals",
    "CompactionStarted",
    "ConversationSummary",
    "ConversationView",
    "Forked",
    "Frame",
    "MintedToken",
    "PendingApproval",
    "ReminderSet",
    "Status",
    "SubmissionState",
    "SubmissionSummary",
    "Timer",
    "TimerCancelled",
    "Timers",
]

Status: TypeAlias = Literal["queued", "placed", "done", "unanswered", "mailed"]
"""A submission's status: input ``queued`` → ``placed`` → ``done`` | ``unanswered``;
a write ``queued`` → ``done`` | ``unanswered``; ``mailed``: accepted outside the actor's
storage, its id not known yet (AWS: in the actor's mailbox for the invocation that holds
the actor; the local host: a new actor's first input in its admission journal)."""
SETTLED: frozenset[str] = frozenset({"done", "unanswered"})
"""The statuses a submission ends in."""


class _Wire(BaseModel):
    # A newer host may add fields: ignored, not refused.
    model_config = ConfigDict(extra="ignore", frozen=True)


class Accepted(_Wire):
    """The ``202`` every host answers a submission with. ``id`` is ``None`` only while
    ``status`` is ``mailed``; then the submission is found by ``request_id``."""

    id: int | None
    conversation_id: int
    type: Literal["input", "write"]
    status: Status
    request_id: str | None


class Answer(_Wire):
    text: str
    """The answer's text blocks, concatenated."""
    entry: dict[str, Any]
    """The answering entry as stored."""


class SubmissionState(_Wire):
    """A submission's status; once settled, its answer or why it got none."""

    id: int | None
    conversation_id: int
    type: Literal["input", "write"]
    status: Status
    request_id: str | None = None
    entry_id: int | None = None
    answer: Answer | None = None
    reason: str | None = None
    detail: Any = None

    @property
    def settled(self) -> bool:
        return self.status in SETTLED


class SubmissionSummary(_Wire):
    """One item of a conversation's submission listing."""

    id: int
    conversation_id: int
    type: Literal["input", "write"]
    status: Status
    request_id: str | None = None
    entry_id: int | None = None
    answer_entry: int | None = None
    reason: str | None = None
    created_at: int | None = None


class ConversationSummary(_Wire):
    """One item of an actor's conversation listing: the root, a fork (``parent``:
    ``{conversation_id, at_entry}``) or a sub-agent (``owner``: ``{conversation_id,
    task_id}``)."""

    id: int
    parent: dict[str, int] | None = None
    owner: dict[str, int] | None = None


class ConversationView(_Wire):
    """The committed view: the active entries and the current documents."""

    conversation: dict[str, Any]
    entries: list[dict[str, Any]]
    docs: dict[str, Any]


class Frame(_Wire):
    """One frame of a watch, the same over SSE and the long poll: ``view`` and
    ``replace`` carry the whole view (``value``), ``delta`` the ops of one commit
    (``ops``), ``end`` (SSE only) why the host ended the stream (``reason``)."""

    type: Literal["view", "replace", "delta", "end"]
    seq: int | None = None
    value: dict[str, Any] | None = None
    ops: list[Any] | None = None
    reason: str | None = None


class Aborted(_Wire):
    aborted: int
    """How many tasks were marked; the conversation is idle now."""


class CompactionStarted(_Wire):
    task: int


class Forked(_Wire):
    conversation_id: int


class AgentState(_Wire):
    conversation_id: int
    agent: dict[str, Any]


class ReminderSet(_Wire):
    task: int
    """The reminder's timer task (``cancel_reminder`` takes it)."""
    at: int
    """When it fires, epoch milliseconds."""
    at_iso: str


class Timer(_Wire):
    task: int
    kind: str
    conversation_id: int
    at: int
    at_iso: str
    message: str | None = None


class Timers(_Wire):
    timers: list[Timer]
    next_wake: int | None


class PendingApproval(_Wire):
    """A tool call waiting for a decision; ``id`` is what :meth:`ActorClient.decide`
    takes."""

    id: int
    conversation_id: int
    tool: str
    call_id: str
    arguments: dict[str, Any]
    asked_at: int
    asked_at_iso: str
    expires_at: int | None = None
    expires_at_iso: str | None = None


class Approvals(_Wire):
    approvals: list[PendingApproval]


class ApprovalDecision(_Wire):
    id: int
    decision: Literal["approve", "deny"]
    by: Literal["person"]
    decided_at: int
    decided_at_iso: str
    note: str | None = None
    request_id: str | None = None
    tool: str
    call_id: str
    asked_at: int
    expires_at: int | None = None


class TimerCancelled(_Wire):
    task: int
    cancelled: bool = True


class MintedToken(_Wire):
    """A scoped token (send it as ``Authorization: Bearer <token>``) and what it grants."""

    token: str
    actor: str
    conversation_id: int | None
    rights: Literal["read", "submit", "admin"]
    expires_at: int
    """Epoch seconds."""
    expires_at_iso: str
