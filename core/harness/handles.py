"""Handles as the harness's tasks and tools see them: what they call on a conversation.

Protocols, so the modules that use a handle (:mod:`~core.harness.reminders`,
:mod:`~core.harness.subagents`, :mod:`~core.harness.tools`) need not import the
``Conversation`` and ``Submission`` classes of :mod:`~core.harness.harness`, which
imports them. Those classes satisfy these protocols (checked statically there).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from core.jsonvalue import JsonValue

if TYPE_CHECKING:
    from core.harness.messages import Usage
    from core.records import SubmissionRecord

__all__ = ["ConversationHandle", "SubmissionHandle"]


class SubmissionHandle(Protocol):
    """A submission as a task sees it (:class:`~core.harness.harness.Submission`)."""

    @property
    def id(self) -> int:
        """The submission's id (stable across restarts)."""
        ...

    async def wait(self, timeout: float | None = None) -> SubmissionRecord:
        """The record once it is settled (``done`` or ``unanswered``); resumes scheduling.
        Raises ``TimeoutError`` after ``timeout`` seconds of the clock, and the session's
        closing or poisoning error if it can no longer settle here. Writes nothing."""
        ...


class ConversationHandle(Protocol):
    """A conversation as a task sees it (:class:`~core.harness.harness.Conversation`)."""

    @property
    def id(self) -> int:
        """The conversation's id."""
        ...

    async def submit(self, content: str, *, request_id: str | None = None) -> SubmissionHandle:
        """Submit user input (``follow_up`` when busy), in one commit. A ``request_id``
        seen before in this conversation returns the original submission and writes
        nothing, across restarts. Refused input raises ``InvalidInput``, writing nothing."""
        ...

    async def write(
        self,
        kind: str = "custom",
        *,
        message: JsonValue = None,
        data: JsonValue = None,
        request_id: str | None = None,
    ) -> SubmissionHandle:
        """Append an entry without asking for an answer (at once when idle, else at the
        next boundary); idempotent by ``request_id`` like :meth:`submit`."""
        ...

    async def usage(self, *, include_owned: bool = False) -> Usage:
        """Token usage of this conversation (plus owned conversations, recursively, with
        ``include_owned``). Reads only."""
        ...
