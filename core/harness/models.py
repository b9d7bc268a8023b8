"""The Models port: how the harness asks a language model for a response.

An adapter (the scripted :class:`core.faux.FauxModel`, the litellm adapter on CPython
hosts, an OpenAI-compatible HTTP client on Workers) implements :class:`Models`:

* ``info(model_id)`` describes a model (context window, output limit) or returns
  ``None`` when the model is not available — the harness answers ``no_model``;
* ``stream(request, signal)`` yields :data:`StreamEvent` s: a :class:`StreamStart`, any
  number of deltas, then exactly one :class:`StreamDone` carrying the final message, or
  a :class:`Deferred` when the provider answers later. Failures are raised as
  :class:`ModelError` (``retryable`` and ``context_overflow`` drive the generation's
  retry and compaction decisions). The stream must stop promptly once ``signal`` fires;
* ``fetch(model_id, handle, signal)`` polls a deferred response: it yields the same
  events, or another :class:`Deferred` while the response is not ready;
  ``cancel_deferred`` gives up on one.

Adapters never touch storage; the harness commits what the stream produced.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import field
from typing import Literal, Protocol, TypeAlias

from core.harness.messages import AssistantMessage, Message
from core.jsonvalue import JsonObject, JsonValue
from core.readonly import readonly
from core.tasks.signal import CancelSignal

__all__ = [
    "Deferred",
    "ModelError",
    "ModelInfo",
    "ModelRequest",
    "Models",
    "StreamDone",
    "StreamEvent",
    "StreamStart",
    "TextDelta",
    "ThinkingDelta",
    "ThinkingLevel",
    "ToolCallDelta",
    "ToolSpec",
]

ThinkingLevel: TypeAlias = Literal["off", "low", "medium", "high"]


@readonly
class ModelInfo:
    """``id`` is the name agents store, e.g. ``"openai/gpt-4o-mini"`` or ``"faux/faux-1"``."""

    id: str
    context_window: int
    max_tokens: int
    supports_tools: bool = True


@readonly
class ToolSpec:
    """A tool as the model sees it: ``parameters`` is a JSON schema object."""

    name: str
    description: str
    parameters: JsonObject


@readonly
class ModelRequest:
    """One request: the model id, the messages to send, and the tools it may call."""

    model: str
    messages: list[Message]
    tools: list[ToolSpec] = field(default_factory=list)
    thinking: ThinkingLevel = "off"
    max_tokens: int | None = None
    options: JsonObject = field(default_factory=dict)
    """Provider options pinned at preparation (temperature, timeout, ...)."""
    allow_deferred: bool = True


@readonly
class StreamStart:
    """The provider accepted the request; ``model`` is the model that answers."""

    model: str


@readonly
class TextDelta:
    """More answer text, to append to what came before.

    An adapter makes one delta event per streamed token, which is why the events are
    ``@readonly`` records, not frozen ones: a frozen dataclass's constructor costs more
    than twice as much.
    """

    text: str


@readonly
class ThinkingDelta:
    """More reasoning text, to append to what came before."""

    text: str


@readonly
class ToolCallDelta:
    """Part of the ``index``-th tool call: its id and name arrive first, arguments in pieces."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@readonly
class StreamDone:
    """The response is complete; ``message`` is authoritative over the deltas."""

    message: AssistantMessage


@readonly
class Deferred:
    """The provider will answer later: poll ``fetch`` with ``handle`` after ``poll_after_ms``."""

    handle: JsonValue
    poll_after_ms: int = 5000


StreamEvent: TypeAlias = (
    StreamStart | TextDelta | ThinkingDelta | ToolCallDelta | StreamDone | Deferred
)


class ModelError(Exception):
    """A failed model request.

    ``retryable``: worth retrying after a backoff (rate limits, overload, timeouts, 5xx).
    ``context_overflow``: the request did not fit the model's context window.
    ``retry_after_ms``: the provider's own hint, when it gave one.
    """

    def __init__(
        self,
        message: str,
        *,
        retryable: bool = False,
        context_overflow: bool = False,
        retry_after_ms: int | None = None,
    ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.context_overflow = context_overflow
        self.retry_after_ms = retry_after_ms


class Models(Protocol):
    """Language models as the harness sees them (the whole port is summed up in the
    module docstring). Adapters never touch storage and keep no per-conversation state:
    everything a request needs is in the :class:`ModelRequest`."""

    def info(self, model_id: str) -> ModelInfo | None:
        """Describe ``model_id``, or return ``None`` when it is not available.

        Synchronous and cheap: the harness calls it while preparing every request and
        when an agent is configured. ``None`` makes the generation answer ``no_model``.
        """
        ...

    def stream(self, request: ModelRequest, signal: CancelSignal) -> AsyncIterator[StreamEvent]:
        """Send ``request`` and yield its events.

        Yields one :class:`StreamStart`, any number of text, thinking and tool-call
        deltas, then exactly one :class:`StreamDone` with the final message, or a
        :class:`Deferred` (only when ``request.allow_deferred``) and nothing after it.
        Raises :class:`ModelError` on failure; its ``retryable`` and
        ``context_overflow`` flags decide whether the harness retries or compacts.
        Once ``signal`` fires the iterator stops promptly (raising or returning); a
        request abandoned that way may still be billed by the provider.
        """
        ...

    def fetch(
        self, model_id: str, handle: JsonValue, signal: CancelSignal
    ) -> AsyncIterator[StreamEvent]:
        """Poll a deferred response by the ``handle`` a :class:`Deferred` carried.

        Yields what :meth:`stream` would have yielded, or another :class:`Deferred`
        while the provider is not done. Safe to repeat: the harness polls again after
        a restart. Raises :class:`ModelError` as :meth:`stream` does.
        """
        ...

    async def cancel_deferred(self, model_id: str, handle: JsonValue) -> None:
        """Give up on a deferred response. Best effort and idempotent: an unknown or
        already finished handle is not an error."""
        ...
