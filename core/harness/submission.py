"""Submissions as callers hold them, and the checks an admission makes before writing.

:class:`Submission` is a stateless handle (reacquire it with
:meth:`~core.harness.harness.Harness.submission` after a restart); it reaches the
harness through :class:`SubmissionOwner`, so this module does not import
:mod:`~core.harness.harness` (which imports it). The checks (:func:`write_draft`,
:func:`check_request_id`, :func:`seen_request`) run before an admission's first write,
so a refused request leaves nothing behind.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import field
from typing import TYPE_CHECKING, Literal, Protocol

from pydantic import ValidationError

from core.errors import ConversationBusy, InvalidInput, RequestIdConflict, UnknownRecord
from core.harness.builtin_documents import INBOX, LIVE
from core.harness.events import note_event
from core.harness.messages import (
    AssistantMessage,
    UserMessage,
    assistant_text,
    message_from_json,
    message_to_json,
)
from core.harness.runs import (
    final_boundary,
    inbox_items,
    is_running,
    new_submission,
    place_input,
    queue_item,
    start_run,
    withdraw_summary,
)
from core.jsonvalue import JsonObject, JsonValue, check_text, json_copy, json_equal
from core.readonly import readonly
from core.records import Entry, SubmissionRecord
from core.session.session import Session
from core.session.transaction import Tx

if TYPE_CHECKING:
    from core.harness.settings import HarnessSettings

__all__ = [
    "HARNESS_KINDS",
    "Answer",
    "Reminder",
    "Submission",
    "SubmissionOwner",
    "admit_input",
    "check_request_id",
    "seen_request",
    "write_draft",
]


class SubmissionOwner(Protocol):
    """What a :class:`Submission` handle uses of the harness that made it."""

    @property
    def session(self) -> Session:
        """The open session (submissions and entries are read from its storage)."""
        ...

    async def wait_submission(self, submission_id: int, timeout: float | None) -> SubmissionRecord:
        """The record once ``done`` or ``unanswered`` (resumes scheduling). Raises
        ``UnknownRecord`` for an unknown id, ``TimeoutError`` after ``timeout`` seconds of
        the clock, the closing/poisoning error if it can no longer settle. Writes nothing."""
        ...

    async def abort_task(
        self, task_id: int, *, scope: str = "task", **fields: JsonValue
    ) -> Literal["marked", "terminal", "orphaned"]:
        """Mark ``task_id`` (a run's generation) for abort, in its own commit, which
        notes an ``abort`` event with ``scope`` and ``fields``."""
        ...


@readonly(slots=False)
class Answer:
    """A submission's answer: the assistant entry and its text (empty when the message
    has no text blocks)."""

    text: str
    entry: Entry


@readonly(slots=False)
class Reminder:
    """A reminder set with :meth:`Conversation.remind`: its timer task and due time."""

    task: int
    at: int


@readonly(slots=False)
class Submission:
    """A handle on one submission. ``record``: the submission as the call that returned
    the handle committed or read it (a snapshot: :meth:`status` reads it again)."""

    harness: SubmissionOwner
    id: int
    conversation_id: int
    record: SubmissionRecord | None = field(default=None, compare=False, repr=False)

    async def status(self) -> SubmissionRecord:
        record = await self.harness.session.storage.submission(self.id)
        if record is None:
            raise UnknownRecord(f"Unknown submission {self.id}")
        return record

    async def answer(self, record: SubmissionRecord | None = None) -> Answer | None:
        """The answer of the submission (from ``record`` if given, else its stored
        state), or ``None`` while it has none (not settled, unanswered, or a write)."""
        if record is None:
            record = await self.status()
        if record.answer is None:
            return None
        entry = await self.harness.session.storage.entry(record.answer)
        if entry is None:
            return None
        text = ""
        if entry.message is not None:
            message = message_from_json(entry.message)
            text = assistant_text(message) if isinstance(message, AssistantMessage) else ""
        return Answer(text=text, entry=entry)

    async def wait(self, timeout: float | None = None) -> SubmissionRecord:
        """Wait until the submission is ``done`` or ``unanswered`` (enables scheduling).

        ``timeout`` is in seconds of the harness clock. Cancelling the wait (or timing
        out) never cancels the work.
        """
        return await self.harness.wait_submission(self.id, timeout)

    async def abort(self) -> Literal["aborted", "settled", "not_found"]:
        """Withdraw a queued submission, or abort the run a placed input belongs to."""
        h = self.harness

        async def withdraw(tx: Tx) -> tuple[str, int | None]:
            record = await tx.submission(self.id)
            if record is None:
                return "not_found", None
            if record.status in ("done", "unanswered"):
                return "settled", None
            if record.status == "placed":
                live = await tx.doc(LIVE, record.conversation_id)
                run = live.value.get("run") if isinstance(live.value, dict) else None
                generation = run.get("generation") if isinstance(run, dict) else None
                return "aborted", generation if isinstance(generation, int) else None
            inbox = await tx.doc(INBOX, record.conversation_id)
            withdraw_summary(await tx.doc(LIVE, record.conversation_id), self.id)
            if isinstance(inbox.value, dict):
                inbox.value["items"] = [
                    i
                    for i in inbox_items(inbox.value)
                    if isinstance(i, dict) and i.get("id") != self.id
                ]
            tx.put_submission(
                SubmissionRecord(
                    id=record.id,
                    conversation_id=record.conversation_id,
                    type=record.type,
                    status="unanswered",
                    request_id=record.request_id,
                    reason="aborted",
                    created_at=record.created_at,
                )
            )
            await note_event(
                tx,
                record.conversation_id,
                "abort",
                scope="submission",
                submission=self.id,
                withdrawn=True,
                tasks=0,
            )
            return "aborted", None

        result, generation = await h.session.commit(withdraw)
        if generation is not None:
            await h.abort_task(generation, scope="submission", submission=self.id)
        return result  # type: ignore[return-value]


async def admit_input(
    tx: Tx,
    conversation_id: int,
    content: str,
    *,
    request_id: str | None,
    when_busy: Literal["follow_up", "steer", "reject"],
    settings: HarnessSettings,
    before_write: Callable[[Tx], Awaitable[None]] | None = None,
) -> SubmissionRecord:
    """Inside a commit: admit user input (see :meth:`Conversation.submit`). A known
    ``request_id`` returns the original before anything is written; otherwise an idle
    conversation gets the input placed and a run started, a busy one queues it (or
    refuses it under ``reject``). ``before_write`` runs after the dedupe's reads, before
    the first write (a deferred root is created there). A recurring schedule admits its
    occurrence here, in the commit that also moves it to its next occurrence."""
    existing = await seen_request(tx, conversation_id, request_id, "input", {"content": content})
    if existing is not None:
        return existing
    if before_write is not None:
        await before_write(tx)
    live = await tx.doc(LIVE, conversation_id)
    inbox = await tx.doc(INBOX, conversation_id)
    running = is_running(live.value)
    queued = bool(inbox_items(inbox.value))
    if running and when_busy == "reject":
        raise ConversationBusy(f"conversation {conversation_id} is busy")
    record = await new_submission(tx, conversation_id, "input", request_id)
    if not running and not queued:
        placed = await place_input(tx, record, content)
        await start_run(tx, conversation_id, [placed])
        return placed
    if when_busy == "reject":
        raise ConversationBusy(f"conversation {conversation_id} has queued input")
    tx.put_submission(record)
    queue_item(inbox, record, {"content": content, "when_busy": when_busy})
    if not running:  # idle with leftovers of a failed run: place in order now
        await final_boundary(tx, conversation_id, settings)
    return record


async def seen_request(
    tx: Tx,
    conversation_id: int,
    request_id: str | None,
    kind: Literal["input", "write"],
    payload: JsonObject,
) -> SubmissionRecord | None:
    """The submission a request id already names in this conversation (read first, before
    any write: the dedupe must not depend on anything the admission changes).

    ``payload`` is what this request submits (``{"content"}`` for an input, the write's
    draft for a write): a retry carries the same, so a request id naming other content is
    a client's mistake, refused with :class:`RequestIdConflict` rather than answered with
    a submission it did not make. When the original's content is no longer kept (withdrawn
    before it was placed), the original is returned."""
    if request_id is None:
        return None
    existing = await tx.submission_by_request(conversation_id, request_id)
    if existing is None:
        return None
    if existing.type != kind:
        raise RequestIdConflict(
            f"Request {request_id} already identifies a submission of type {existing.type}"
        )
    original = await _original_payload(tx, existing)
    if original is not None and not json_equal(original, _comparable(kind, payload)):
        raise RequestIdConflict(
            f"Request {request_id} already identifies submission {existing.id} "
            "with different content"
        )
    return existing


def _comparable(kind: Literal["input", "write"], payload: JsonObject) -> JsonObject:
    if kind == "input":
        content = payload.get("content")
        return {"message": message_to_json(UserMessage(content=str(content)))}
    return {name: payload.get(name) for name in ("kind", "message", "data")}


async def _original_payload(tx: Tx, record: SubmissionRecord) -> JsonObject | None:
    """What ``record`` submitted, in :func:`_comparable`'s form: from its placed entry, or
    from its inbox item while queued; ``None`` when neither is there any more."""
    if record.entry is not None:
        entry = await tx.entry(record.entry)
        if entry is None:
            return None
        if record.type == "input":
            return {"message": entry.message}
        return {"kind": entry.kind, "message": entry.message, "data": entry.data}
    inbox = await tx.doc(INBOX, record.conversation_id)
    for item in inbox_items(inbox.value):
        if isinstance(item, dict) and item.get("id") == record.id:
            if record.type == "input":
                return _comparable("input", {"content": item.get("content")})
            draft = item.get("entry")
            return _comparable("write", draft) if isinstance(draft, dict) else None
    return None


_MAX_KIND_CHARS = 256
HARNESS_KINDS = frozenset({"user", "assistant", "tool_result", "system", "compaction", "reset"})
"""Entry kinds the harness writes itself; an application write names another kind."""


def write_draft(kind: str, *, message: JsonValue = None, data: JsonValue = None) -> JsonObject:
    """The entry a write appends, checked without touching storage (so a host can refuse
    a bad write before it opens, let alone creates, the actor): ``kind`` an application
    kind (not one of :data:`HARNESS_KINDS`), ``message`` (if given) a valid message,
    ``data`` plain JSON. Raises :class:`InvalidInput` naming the field."""
    if not isinstance(kind, str) or not kind or kind in HARNESS_KINDS:
        raise InvalidInput(
            f"a write entry needs an application kind, not {kind!r}", field="content.kind"
        )
    draft: JsonObject = {"kind": check_text(kind, "content.kind", max_chars=_MAX_KIND_CHARS)}
    if message is not None:
        draft["message"] = valid_message(message)
    if data is not None:
        draft["data"] = json_copy(data, "content.data")
    return draft


def valid_message(message: JsonValue) -> JsonObject:
    """A write's message, checked to be one the context can hold."""
    try:
        return message_to_json(message_from_json(json_copy(message, "content.message")))
    except ValidationError as e:
        raise InvalidInput(
            f"a write message must be a valid message: {e}", field="content.message"
        ) from None


def check_request_id(request_id: str | None) -> None:
    if request_id is not None and (
        not isinstance(request_id, str) or not 1 <= len(request_id) <= 256
    ):
        raise InvalidInput("a request id is a string of 1 to 256 characters", field="request_id")
    if request_id is not None:
        check_text(request_id, "request_id")
