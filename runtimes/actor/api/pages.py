"""The wire models of the listing routes (:mod:`runtimes.actor.api.history`): one page of
actors, conversations, submissions or entries, and the cursor that names the next page.

A storage cursor is plain JSON (:mod:`core.storage.scan`); on the wire it travels as one
opaque URL-safe string, signed, so clients pass it back unchanged and can build none:
:class:`CursorCodec` decodes only what it encoded, and answers ``400 invalid_cursor`` to
anything else — the one check every host's listings share.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
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
    "CursorCodec",
    "EntryPage",
    "SubmissionPage",
    "SubmissionSummary",
]

MAX_CURSOR_CHARS = 4096
_TAG_BYTES = 16  # HMAC-SHA256 cut to 128 bits: unforgeable, and the cursor stays short
_KEY_LABEL = b"perdure listing cursor\0"


def _unpadded(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


class CursorCodec:
    """Listing cursors on the wire: ``base64url(tag + JSON)``, where ``tag`` is an
    HMAC-SHA256 of the storage cursor's JSON under a key derived from the API token.

    Only a cursor this API handed out decodes, so a made-up or edited one (an ``after``
    no storage could hold, another scan's position) is refused here, before any actor
    is opened; a cursor of another listing, handed out all the same, is refused by the
    storage's own scan check. A cursor outlives restarts under the same token; a new
    token retires the old cursors (``400 invalid_cursor``: list again from the start).
    """

    def __init__(self, secret: str) -> None:
        # Derived, not the token itself: a cursor never carries a MAC keyed by the token.
        self._key = hashlib.sha256(_KEY_LABEL + secret.encode()).digest()

    def _tag(self, payload: bytes) -> bytes:
        return hmac.new(self._key, payload, hashlib.sha256).digest()[:_TAG_BYTES]

    def encode(self, cursor: JsonObject | None) -> str | None:
        if cursor is None:
            return None
        payload = json.dumps(cursor, separators=(",", ":"), sort_keys=True).encode()
        return _unpadded(self._tag(payload) + payload)

    def decode(self, text: str | None) -> JsonObject | None:
        """The storage cursor a page's ``next`` names; ``400 invalid_cursor`` for anything
        this codec did not encode."""
        if text is None:
            return None
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        except (binascii.Error, ValueError):
            raw = b""
        tag, payload = raw[:_TAG_BYTES], raw[_TAG_BYTES:]
        # Canonical base64 only: two spellings of one cursor would be one forged.
        if payload and _unpadded(raw) == text and hmac.compare_digest(tag, self._tag(payload)):
            value = json.loads(payload)
            if isinstance(value, dict):
                return value
        raise ApiError(400, "invalid_cursor", "not a cursor this API handed out")


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
