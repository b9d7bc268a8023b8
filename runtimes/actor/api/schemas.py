"""The wire models of the actor HTTP API (docs/design.md § The HTTP API): request bodies,
answers, errors.

Requests are validated strictly (no type coercion, unknown fields refused), so a bad
request fails here, before any actor is opened or anything is written.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    WrapValidator,
    field_validator,
    model_validator,
)

from core import JsonValue, json_copy
from core.harness import HARNESS_KINDS, MAX_DELAY_S, MAX_REMINDER_CHARS, Message, WhenBusy
from core.harness.messages import message_to_json
from core.records import MAX_ID, SubmissionRecord, SubmissionStatus, SubmissionType

__all__ = [
    "AbortBody",
    "Aborted",
    "AgentChange",
    "AgentState",
    "Answer",
    "CompactBody",
    "CompactionStarted",
    "ConversationView",
    "ErrorDetail",
    "ErrorResponse",
    "ForkBody",
    "Forked",
    "InputSubmission",
    "ReminderBody",
    "ReminderSet",
    "ResetBody",
    "SubmissionAccepted",
    "SubmissionBody",
    "SubmissionState",
    "TaskGraph",
    "TaskNode",
    "Timer",
    "TimerCancelled",
    "Timers",
    "WriteEntry",
    "WriteSubmission",
]

_STRICT = ConfigDict(extra="forbid", strict=True)

STATUSES = (
    "input: `queued` (waiting behind the conversation's current work) → `placed` (its "
    "user entry is in the transcript; the answer is being made) → `done` (answered) or "
    "`unanswered` (`reason`: e.g. aborted, no_model, model_error). write: `queued` (until "
    "the next boundary) → `done` (its entry appended) or `unanswered` (e.g. stale). "
    "`mailed` (AWS and the local host): accepted outside the actor's storage, not admitted "
    "yet — on AWS in the actor's mailbox for the invocation that holds it, on the local "
    "host in its admission journal while other actors' files are being opened; it has no "
    "id yet: poll it by request id."
)
ID_OR_MAILED = (
    "the submission's id; `null` only while it is `mailed` (AWS: it arrived while another "
    "invocation held the actor; the local host: a new actor's first input accepted into "
    "its admission journal): poll it by request id, "
    "`GET .../conversations/{cid}/submissions/by-request?request_id=`"
)
WHEN_BUSY = (
    "what to do when the conversation is busy: `follow_up` (default) queues the input and "
    "answers it after the current run; `steer` places it into the current run after its "
    "tool round; `reject` refuses it with 409 conversation_busy, writing nothing"
)
# Text that is not blank (JSON Schema patterns search, so one non-space is enough).
_NOT_BLANK = r"\S"


def _whole_number(value: Any) -> Any:
    """JSON Schema calls ``5.0`` an integer; so does the API (``5.5`` stays refused)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


WHOLE = BeforeValidator(_whole_number)
"""Put after an integer field's constraints (``Annotated[int, Field(...), WHOLE]``, so
the schema keeps them as ``minimum``/``maximum``): a whole-number float (``5.0``) is
accepted as that integer; booleans and strings stay refused (strict)."""

ConversationId = Annotated[int, Field(ge=1, le=MAX_ID, description="a conversation id"), WHOLE]
RequestId = Annotated[
    str,
    Field(
        min_length=1,
        max_length=256,
        description="dedupes the submission per conversation, across restarts: a retry "
        "with the same content answers the original; other content under a known id is "
        "refused 422 request_id_conflict (nothing is written)",
    ),
]


_MESSAGE = TypeAdapter(Message)


def _strict_message(value: Any, _lax: Any) -> Any:
    # Strict like the rest of the request (``is_error: 0`` is not a boolean); a model's
    # own config would coerce, and a tagged union takes no ``strict`` constraint.
    return _MESSAGE.validate_python(value, strict=True)


def _plain_json(value: Any) -> Any:
    # core's own definition of JSON: refuses NaN/Infinity (which json.loads accepts).
    return json_copy(value, "value")


class InputSubmission(BaseModel):
    """User input: ``202`` once admitted (placed and a run started, or queued)."""

    model_config = _STRICT

    type: Literal["input"]
    content: str = Field(min_length=1, pattern=_NOT_BLANK, description="the user's message")
    conversation_id: ConversationId | None = Field(
        None, description="defaults to the root conversation (1), created on first use"
    )
    request_id: RequestId | None = None
    when_busy: WhenBusy = Field(
        "follow_up",
        description=WHEN_BUSY,
    )

    @field_validator("content")
    @classmethod
    def _not_blank(cls, content: str) -> str:
        if not content.strip():
            raise ValueError("content must not be blank")
        return content


class WriteEntry(BaseModel):
    """An entry appended without asking for an answer."""

    model_config = _STRICT

    kind: str = Field(
        min_length=1,
        max_length=64,
        description="an application entry kind (not one the harness writes itself)",
        json_schema_extra={"not": {"enum": list(sorted(HARNESS_KINDS))}},
    )
    message: Annotated[Message, WrapValidator(_strict_message)] | None = Field(
        None, description="a message that joins the context"
    )
    data: Any = None

    @field_validator("kind")
    @classmethod
    def _application_kind(cls, kind: str) -> str:
        if kind in HARNESS_KINDS:
            raise ValueError(f"{kind!r} entries are written by the harness itself")
        return kind

    def message_json(self) -> JsonValue:
        """The message as the core takes it (plain JSON), or ``None``."""
        return None if self.message is None else message_to_json(self.message)

    @field_validator("data")
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
    """The answer to a submission on every host (docs/design.md § The HTTP API)."""

    id: int | None = Field(description=ID_OR_MAILED)
    conversation_id: int
    type: SubmissionType
    status: SubmissionStatus | Literal["mailed"] = Field(description=STATUSES)
    request_id: str | None = Field(description="the request id it was admitted (or mailed) under")

    @classmethod
    def of(cls, record: SubmissionRecord) -> SubmissionAccepted:
        return cls(
            id=record.id,
            conversation_id=record.conversation_id,
            type=record.type,
            status=record.status,
            request_id=record.request_id,
        )


class Answer(BaseModel):
    text: str = Field(description="the answer's text blocks, concatenated")
    entry: dict[str, Any] = Field(description="the answering entry as stored")


class SubmissionState(BaseModel):
    id: int | None = Field(description=ID_OR_MAILED)
    conversation_id: int
    type: SubmissionType
    status: SubmissionStatus | Literal["mailed"] = Field(description=STATUSES)
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
    until_iso: str | None = Field(None, description="``until`` as ISO-8601 (UTC)")
    blocked_reason: str | None = None
    started_at: int | None = Field(None, description="when the task was created, epoch ms")
    started_at_iso: str | None = Field(None, description="``started_at`` as ISO-8601 (UTC)")
    tool: str | None = Field(None, description="a tool task's tool name")
    arguments: dict[str, Any] | None = Field(None, description="a tool task's arguments")
    phase: str | None = Field(None, description="the checkpointed phase")
    attempt: int | None = Field(
        None, description="the phase's attempt (a tool call resumed after a crash: 2 or more)"
    )
    replay: str | None = Field(
        None, description="a tool task's recovery after a crash: safe, recoverable, unsafe"
    )


class TaskGraph(BaseModel):
    scheduling: Literal["paused", "running", "closing"]
    tasks: list[TaskNode]


class ConversationView(BaseModel):
    """The committed view of a conversation, as its watch's first frame carries it."""

    conversation: dict[str, Any] = Field(description="the conversation record")
    entries: list[dict[str, Any]] = Field(description="the active entries, oldest first")
    docs: dict[str, Any] = Field(
        description="current documents by name (kind, or kind/key); agent, live, inbox and "
        "usage always (at their initial values until first stored)"
    )


class AbortBody(BaseModel):
    """Abort the conversation's foreground work; ``background`` too with ``true``."""

    model_config = _STRICT

    background: bool = False


class Aborted(BaseModel):
    aborted: int = Field(description="how many tasks were marked; the conversation is idle now")


class ForkBody(BaseModel):
    """Fork at ``at_entry`` (an entry visible in the conversation), optionally changing
    the child's agent (same fields as ``PATCH .../agent``)."""

    model_config = _STRICT

    at_entry: Annotated[
        int, Field(ge=1, le=MAX_ID, description="the last entry the fork sees"), WHOLE
    ]
    agent: AgentChange | None = None


class Forked(BaseModel):
    conversation_id: int = Field(description="the new conversation")


class CompactBody(BaseModel):
    model_config = _STRICT

    instructions: str | None = Field(
        None, min_length=1, max_length=20_000, description="extra focus for the summary"
    )


class CompactionStarted(BaseModel):
    task: int = Field(description="the compaction task (see GET .../tasks)")


class ResetBody(BaseModel):
    """Start a new context range; the model then sees only ``handoff`` and what follows."""

    model_config = _STRICT

    handoff: str | None = Field(None, min_length=1, description="what the new range starts with")
    request_id: RequestId | None = None


class ReminderBody(BaseModel):
    """Exactly one of ``at`` (epoch milliseconds; a past time fires at once) and ``after``
    (seconds from now)."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        # What _one_time enforces, stated in the schema: exactly one of the two is given
        # (as a number; null counts as absent).
        json_schema_extra={
            "oneOf": [
                {"required": ["at"], "properties": {"at": {"type": "integer"}}},
                {"required": ["after"], "properties": {"after": {"type": "number"}}},
            ]
        },
    )

    message: str = Field(min_length=1, max_length=MAX_REMINDER_CHARS, pattern=_NOT_BLANK)
    at: Annotated[int, Field(ge=0), WHOLE] | None = Field(
        None, description="when, in epoch milliseconds"
    )
    after: float | None = Field(None, gt=0, le=MAX_DELAY_S, description="when, in seconds from now")

    @field_validator("message")
    @classmethod
    def _not_blank(cls, message: str) -> str:
        if not message.strip():
            raise ValueError("message must not be blank")
        return message

    @model_validator(mode="after")
    def _one_time(self) -> ReminderBody:
        if (self.at is None) == (self.after is None):
            raise ValueError("give exactly one of 'at' and 'after'")
        return self


class ReminderSet(BaseModel):
    task: int = Field(description="the reminder's timer task; DELETE /timers/{task} cancels it")
    at: int = Field(description="when it fires, epoch ms")
    at_iso: str = Field(description="``at`` as ISO-8601 (UTC), for people")


class Timer(BaseModel):
    task: int
    kind: str = Field(
        description="perdure.reminder, perdure.schedule (its next occurrence), or the "
        "harness's own waits (retry, poll)"
    )
    conversation_id: int
    at: int = Field(description="epoch ms")
    at_iso: str = Field(description="``at`` as ISO-8601 (UTC), for people")
    message: str | None = Field(None, description="a reminder's or a schedule's message")


class Timers(BaseModel):
    timers: list[Timer] = Field(description="live tasks waiting for a time, soonest first")
    next_wake: int | None = Field(
        description="when the actor must run next (epoch ms; now when work is runnable), "
        "or null when nothing is due"
    )


class TimerCancelled(BaseModel):
    task: int
    cancelled: bool = True


class ErrorDetail(BaseModel):
    code: str
    message: str


class ErrorResponse(BaseModel):
    error: ErrorDetail
