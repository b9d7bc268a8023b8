"""The wire models of the actor HTTP API (SPEC §10): request bodies, answers, errors.

Requests are validated strictly (no type coercion, unknown fields refused), so a bad
request fails here, before any actor is opened or anything is written.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from core import json_copy
from core.harness import WhenBusy
from core.records import MAX_ID, SubmissionStatus, SubmissionType
from core.records import Submission as SubmissionRecord

__all__ = [
    "AgentChange",
    "AgentState",
    "Answer",
    "ErrorDetail",
    "ErrorResponse",
    "InputSubmission",
    "SubmissionAccepted",
    "SubmissionBody",
    "SubmissionState",
    "TaskGraph",
    "TaskNode",
    "WriteEntry",
    "WriteSubmission",
]

_STRICT = ConfigDict(extra="forbid", strict=True)
# Entries the harness writes itself; a write names an application kind.
_HARNESS_KINDS = frozenset({"user", "assistant", "tool_result"})

ConversationId = Annotated[int, Field(ge=1, le=MAX_ID, description="a conversation id")]
RequestId = Annotated[
    str,
    Field(
        min_length=1,
        max_length=256,
        description="dedupes the submission per conversation, across restarts",
    ),
]


def _plain_json(value: Any) -> Any:
    # core's own definition of JSON: refuses NaN/Infinity (which json.loads accepts).
    return json_copy(value, "value")


class InputSubmission(BaseModel):
    """User input: ``202`` once admitted (placed and a run started, or queued)."""

    model_config = _STRICT

    type: Literal["input"]
    content: str = Field(min_length=1, description="the user's message")
    conversation_id: ConversationId | None = Field(
        None, description="defaults to the root conversation (1), created on first use"
    )
    request_id: RequestId | None = None
    when_busy: WhenBusy = "follow_up"

    @field_validator("content")
    @classmethod
    def _not_blank(cls, content: str) -> str:
        if not content.strip():
            raise ValueError("content must not be blank")
        return content


class WriteEntry(BaseModel):
    """An entry appended without asking for an answer."""

    model_config = _STRICT

    kind: str = Field(min_length=1, max_length=64, description="an application entry kind")
    message: Any = None
    data: Any = None

    @field_validator("kind")
    @classmethod
    def _application_kind(cls, kind: str) -> str:
        if kind in _HARNESS_KINDS:
            raise ValueError(f"{kind!r} entries are written by the harness itself")
        return kind

    @field_validator("message", "data")
    @classmethod
    def _json(cls, value: Any) -> Any:
        return _plain_json(value)


class WriteSubmission(BaseModel):
    """A write: placed at once when the conversation is idle, else at the next boundary."""

    model_config = _STRICT

    type: Literal["write"]
    content: WriteEntry
    conversation_id: ConversationId | None = None
    request_id: RequestId | None = None


SubmissionBody = Annotated[InputSubmission | WriteSubmission, Field(discriminator="type")]


class SubmissionAccepted(BaseModel):
    id: int
    conversation_id: int
    type: SubmissionType
    status: SubmissionStatus

    @classmethod
    def of(cls, record: SubmissionRecord) -> SubmissionAccepted:
        return cls(
            id=record.id,
            conversation_id=record.conversation_id,
            type=record.type,
            status=record.status,
        )


class Answer(BaseModel):
    text: str = Field(description="the answer's text blocks, concatenated")
    entry: dict[str, Any] = Field(description="the answering entry as stored")


class SubmissionState(BaseModel):
    id: int
    conversation_id: int
    type: SubmissionType
    status: SubmissionStatus
    request_id: str | None = None
    entry_id: int | None = Field(None, description="the entry the submission placed")
    answer: Answer | None = None
    reason: str | None = Field(None, description="why an unanswered submission got no answer")
    detail: Any = None


class AgentChange(BaseModel):
    """Agent fields to change; a field set to ``null`` is cleared, an absent one kept."""

    model_config = _STRICT

    model: str | None = None
    thinking: Literal["off", "low", "medium", "high"] | None = None
    tools: list[str] | None = None
    extensions: list[str] | None = None
    instructions: str | None = None
    cwd: str | None = None


class AgentState(BaseModel):
    conversation_id: int
    agent: dict[str, Any] = Field(description="the stored agent document (names only)")


class TaskNode(BaseModel):
    id: int
    kind: str
    conversation_id: int
    state: Literal["running", "ready", "waiting", "completing", "blocked"] = Field(
        description="derived by the scheduler"
    )
    status: Literal["pending", "running", "waiting", "completing", "terminal"] = Field(
        description="as stored"
    )
    owner: int | None = Field(None, description="the owning task (None: its conversation)")
    background: bool
    abort_requested: bool
    waiting_on: list[int] = Field(default_factory=list)
    until: int | None = Field(None, description="a durable deadline, epoch ms")
    blocked_reason: str | None = None


class TaskGraph(BaseModel):
    scheduling: Literal["paused", "running", "closing"]
    tasks: list[TaskNode]


class ErrorDetail(BaseModel):
    code: str
    message: str


class ErrorResponse(BaseModel):
    error: ErrorDetail
