"""The wire models of the listing routes (:mod:`runtimes.actor.api.history`): one page of
actors, conversations, submissions or entries, and the cursor that names the next page.

A storage cursor is plain JSON (:mod:`core.storage.scan`); on the wire it travels as one
opaque URL-safe string, so clients pass it back unchanged and never build one.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from pydantic import BaseModel, Field

from core import JsonObject
from core.records import SubmissionRecord, SubmissionStatus, SubmissionType
from runtimes.actor.api.errors import ApiError

__all__ = [
    "ActorPage",
    "ActorSummary",
    "ConversationPage",
    "ConversationSummary",
    "EntryPage",
    "SubmissionPage",
    "SubmissionSummary",
    "decode_cursor",
    "encode_cursor",
]

MAX_CURSOR_CHARS = 4096


def encode_cursor(cursor: JsonObject | None) -> str | None:
    if cursor is None:
        return None
    raw = json.dumps(cursor, separators=(",", ":"), sort_keys=True).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(text: str | None) -> JsonObject | None:
    """The storage cursor a page's ``next`` names; ``400 invalid_cursor`` for anything
    else (the storage refuses a well-formed cursor of another scan the same way)."""
    if text is None:
        return None
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        value = json.loads(raw)
    except (binascii.Error, ValueError):
        value = None
    if not isinstance(value, dict):
        raise ApiError(400, "invalid_cursor", "not a cursor this API handed out")
    return value


class ActorSummary(BaseModel):
    id: str = Field(description="the actor's id (its conversation tree)")


class ActorPage(BaseModel):
    actors: list[ActorSummary] = Field(description="ascending by id")
    next_after: str | None = Field(
        description="pass as ``after`` for the next page; null on the last page"
    )


class ConversationSummary(BaseModel):
    id: int
    parent: dict[str, int] | None = Field(
        None, description="a fork's origin: {conversation_id, at_entry}"
    )
    owner: dict[str, int] | None = Field(
        None, description="a sub-agent's owner: {conversation_id, task_id}"
    )


class ConversationPage(BaseModel):
    conversations: list[ConversationSummary] = Field(description="ascending by id")
    next: str | None = Field(description="the next page's cursor; null on the last page")


class SubmissionSummary(BaseModel):
    id: int
    conversation_id: int
    type: SubmissionType
    status: SubmissionStatus = Field(
        description="input: queued → placed → done | unanswered; write: queued → done | unanswered"
    )
    request_id: str | None = None
    entry_id: int | None = Field(None, description="the entry the submission placed")
    answer_entry: int | None = Field(None, description="the answering entry (done inputs)")
    reason: str | None = Field(None, description="why an unanswered submission got no answer")
    created_at: int | None = Field(None, description="when it was admitted, epoch ms")

    @classmethod
    def of(cls, record: SubmissionRecord) -> SubmissionSummary:
        return cls(
            id=record.id,
            conversation_id=record.conversation_id,
            type=record.type,
            status=record.status,
            request_id=record.request_id,
            entry_id=record.entry,
            answer_entry=record.answer,
            reason=record.reason,
            created_at=record.created_at,
        )


class SubmissionPage(BaseModel):
    submissions: list[SubmissionSummary]
    next: str | None = Field(description="the next page's cursor; null on the last page")


class EntryPage(BaseModel):
    entries: list[dict[str, Any]] = Field(
        description="entries as stored (kind, message, data, created_at epoch ms, ...), "
        "through the conversation's fork ancestry"
    )
    next: str | None = Field(description="the next page's cursor; null on the last page")
