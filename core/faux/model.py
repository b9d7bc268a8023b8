"""FauxModel: a scripted :class:`~core.harness.Models` adapter for tests and demos.

Each request consumes the next *step* of the script:

* an :class:`AssistantMessage` (build it with :func:`faux_text`, :func:`faux_tool_call`,
  :func:`faux_message`) — streamed as deltas, then returned;
* a :class:`FauxReply` — a message plus streaming behaviour: fail after some tokens,
  answer deferred, block until cancelled;
* a :class:`ModelError` — raised at once (``retryable`` / ``context_overflow`` as given);
* a function ``(request, state) -> step`` (sync or async) — decides per request, e.g.
  to look at the messages it was sent or to block on an event.

The model records every request it receives (``state.requests``, unless
``record_requests=False``, for long runs) and counts calls. Once the script runs out,
``fallback`` (if given) answers every further request.
Text streams in tokens of ``token_size`` characters; with ``tokens_per_second`` and a
``sleep`` function it streams at that rate (the core never sleeps on its own: tests
pass ``asyncio.sleep``). Unpaced, it yields to the event loop once per content block,
as a network read delivers a burst of events, not once per token.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import operator
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, TypeAlias, cast

from core.harness.messages import (
    AssistantMessage,
    Message,
    StopReason,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    Usage,
    message_chars,
)
from core.harness.models import (
    Deferred,
    ModelError,
    ModelInfo,
    ModelRequest,
    StreamDone,
    StreamEvent,
    StreamStart,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
)
from core.jsonvalue import JsonObject, JsonValue
from core.readonly import readonly
from core.tasks.signal import CancelSignal

__all__ = [
    "FAUX_MODEL",
    "FauxModel",
    "FauxReply",
    "FauxState",
    "FauxStep",
    "faux_block",
    "faux_deferred",
    "faux_error",
    "faux_message",
    "faux_text",
    "faux_tool_call",
]

FAUX_MODEL = ModelInfo("faux/faux-1", context_window=128_000, max_tokens=16_384)


@readonly(slots=False)
class FauxReply:
    """A scripted response with streaming behaviour.

    ``fail_after``: raise ``error`` after streaming that many tokens (a mid-stream failure).
    ``deferred``: answer with a :class:`Deferred` and become ready after that many
    ``fetch`` calls have said "not yet". ``block``: stream nothing and wait for the cancel
    signal (a request that hangs until aborted).
    """

    message: AssistantMessage | None = None
    fail_after: int | None = None
    error: ModelError | None = None
    deferred: int | None = None
    poll_after_ms: int = 5000
    block: bool = False


FauxStep: TypeAlias = (
    AssistantMessage
    | FauxReply
    | ModelError
    | Callable[[ModelRequest, "FauxState"], "FauxStep | Awaitable[FauxStep]"]
)


@dataclass
class FauxState:
    call_count: int = 0
    requests: list[ModelRequest] = field(default_factory=list)
    deferred_fetches: int = 0
    cancelled_deferred: list[JsonValue] = field(default_factory=list)


def faux_text(text: str) -> TextBlock:
    return TextBlock(text=text)


def faux_tool_call(
    name: str, arguments: JsonObject | None = None, *, id: str | None = None
) -> ToolCall:
    return ToolCall(id=id or f"call_{name}", name=name, arguments=dict(arguments or {}))


def faux_message(
    *blocks: TextBlock | ThinkingBlock | ToolCall | str,
    stop_reason: StopReason | None = None,
    usage: Usage | None = None,
) -> AssistantMessage:
    """An assistant message from blocks (strings become text blocks)."""
    content = [TextBlock(text=b) if isinstance(b, str) else b for b in blocks]
    if stop_reason is None:
        stop_reason = "tool_use" if any(isinstance(b, ToolCall) for b in content) else "stop"
    return AssistantMessage(content=content, stop_reason=stop_reason, usage=usage or Usage())


def faux_error(message: str, *, retryable: bool = False, overflow: bool = False) -> ModelError:
    return ModelError(message, retryable=retryable, context_overflow=overflow)


def faux_deferred(
    message: AssistantMessage, *, pending: int = 1, poll_after_ms: int = 5000
) -> FauxReply:
    return FauxReply(message, deferred=pending, poll_after_ms=poll_after_ms)


def faux_block() -> FauxReply:
    return FauxReply(block=True)


class FauxModel:
    """Implements :class:`~core.harness.models.Models` from a script of steps."""

    def __init__(
        self,
        steps: Iterable[FauxStep] = (),
        *,
        models: Iterable[ModelInfo] = (FAUX_MODEL,),
        token_size: int = 3,
        tokens_per_second: float | None = None,
        sleep: Callable[[float], Awaitable[None]] | None = None,
        fallback: FauxStep | None = None,
        record_requests: bool = True,
    ) -> None:
        self._steps: list[FauxStep] = list(steps)
        self._fallback = fallback
        self._record = record_requests
        self._models = {m.id: m for m in models}
        self.token_size = max(1, token_size)
        self.tokens_per_second = tokens_per_second
        self._sleep = sleep
        self.state = FauxState()
        self._deferred: dict[int, tuple[FauxReply, int]] = {}
        self._estimator = _Estimator()

    def respond(self, *steps: FauxStep) -> None:
        """Append steps to the script."""
        self._steps.extend(steps)

    @property
    def pending(self) -> int:
        """How many scripted steps are left."""
        return len(self._steps)

    def info(self, model_id: str) -> ModelInfo | None:
        return self._models.get(model_id)

    def stream(self, request: ModelRequest, signal: CancelSignal) -> AsyncIterator[StreamEvent]:
        return self._respond(signal, request=request)

    def fetch(
        self, model_id: str, handle: JsonValue, signal: CancelSignal
    ) -> AsyncIterator[StreamEvent]:
        return self._respond(signal, polled=(model_id, handle))

    async def _respond(
        self,
        signal: CancelSignal,
        *,
        request: ModelRequest | None = None,
        polled: tuple[str, JsonValue] | None = None,
    ) -> AsyncIterator[StreamEvent]:
        """What ``stream(request)`` or ``fetch(*polled)`` yields: one async generator,
        its script's bursts iterated in place (a nested generator would cost a second
        resumption per event)."""
        if polled is None:
            assert request is not None
            self.state.call_count += 1
            if self._record:
                self.state.requests.append(request)
            step = await self._next_step(request)
            yield StreamStart(request.model)
            if isinstance(step, ModelError):
                raise step
            reply = step if isinstance(step, FauxReply) else FauxReply(cast(AssistantMessage, step))
            if reply.block:
                await signal.wait()
                return
            if reply.deferred is not None:
                handle = len(self._deferred) + 1
                self._deferred[handle] = (reply, reply.deferred)
                yield Deferred({"id": handle}, reply.poll_after_ms)
                return
        else:
            model_id, polled_handle = polled
            self.state.deferred_fetches += 1
            key = polled_handle.get("id") if isinstance(polled_handle, dict) else None
            if not isinstance(key, int) or key not in self._deferred:
                raise ModelError(f"unknown deferred response {polled_handle!r}")
            deferred, left = self._deferred[key]
            if left > 0:
                self._deferred[key] = (deferred, left - 1)
                yield Deferred(polled_handle, deferred.poll_after_ms)
                return
            del self._deferred[key]
            yield StreamStart(model_id)
            request = self.state.requests[-1] if self.state.requests else None
            reply = FauxReply(deferred.message)
        paced = bool(self.tokens_per_second and self._sleep is not None)
        for burst, waits in self._bursts(request, reply):
            for n, event in enumerate(burst):
                if waits and (n == 0 or paced) and not await self._pace(signal):
                    return
                yield event

    async def cancel_deferred(self, model_id: str, handle: JsonValue) -> None:
        self.state.cancelled_deferred.append(handle)
        key = handle.get("id") if isinstance(handle, dict) else None
        if isinstance(key, int):
            self._deferred.pop(key, None)

    async def _next_step(self, request: ModelRequest) -> FauxStep:
        if self._steps:
            step = self._steps.pop(0)
        elif self._fallback is not None:
            step = self._fallback
        else:
            raise ModelError("FauxModel has no scripted response left")
        while callable(step) and not isinstance(step, AssistantMessage | FauxReply | ModelError):
            produced = step(request, self.state)
            step = await produced if inspect.isawaitable(produced) else produced
        return step

    def _bursts(
        self, request: ModelRequest | None, reply: FauxReply
    ) -> Iterator[tuple[list[StreamEvent], bool]]:
        """The reply's events in bursts, each with whether the stream waits for it: one
        per content block (its deltas, ``token_size`` characters each), then the final
        message (sent with the last block, no wait). Raises the scripted failure once
        ``fail_after`` tokens have gone out (after the burst that reached it)."""
        message = reply.message or faux_message("")
        left = reply.fail_after  # tokens before the failure
        for index, block in enumerate(message.content):
            pieces: list[StreamEvent]
            if isinstance(block, TextBlock):
                pieces = [TextDelta(t) for t in self._tokens(block.text)]
            elif isinstance(block, ThinkingBlock):
                pieces = [ThinkingDelta(t) for t in self._tokens(block.thinking)]
            else:
                args = json.dumps(block.arguments)
                pieces = [ToolCallDelta(index, block.id, block.name, "")]
                pieces += [ToolCallDelta(index, arguments=t) for t in self._tokens(args)]
            if left is not None and len(pieces) >= left:
                if left:
                    yield pieces[:left], True
                raise reply.error or ModelError("faux stream failed")
            if left is not None:
                left -= len(pieces)
            if pieces:
                yield pieces, True
        usage = message.usage
        if usage == Usage():
            usage = self._estimator.usage(request, message)
        done = message.model_copy(
            update={"usage": usage, "model": message.model or (request.model if request else None)}
        )
        yield [StreamDone(done)], False

    async def _pace(self, signal: CancelSignal) -> bool:
        """Wait before the next event (paced: a token's time; unpaced: one hop to the
        loop, as the next network read would be); whether the stream goes on."""
        rate, sleep = self.tokens_per_second, self._sleep
        if rate and sleep is not None:
            await sleep(1 / rate)
        else:
            await _yield()
        return not signal.cancelled

    def _tokens(self, text: str) -> list[str]:
        size = self.token_size
        return [text[i : i + size] for i in range(0, len(text), size)] or []


async def _yield() -> None:
    """Let other coroutines run (a zero-time checkpoint that reads no clock)."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[None] = loop.create_future()
    loop.call_soon(_resolve, fut)
    await fut


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():  # cancelled meanwhile (the stream was aborted mid-token)
        fut.set_result(None)


class _Estimator:
    """About four characters per token: enough for threshold decisions in tests.

    Requests of one conversation repeat the previous request plus a few messages, so the
    count of the shared prefix is reused (by identity) instead of recounted. One model
    may answer many conversations in turn (at 1,000 conversations answered at once, one
    shared slot recounted every request's whole transcript), so each conversation's last
    request is kept apart, by its first message: the same object in each of its
    requests until a compaction replaces it. That message is held weakly and the rest
    of the request only as long as it lives, so a conversation's earlier transcript is
    not kept alive by the model once its harness dropped it.
    """

    def __init__(self) -> None:
        # id(first message) -> (that message, weakly; the rest of the request; counts)
        self._last: dict[int, tuple[weakref.ref[Message], list[Message], list[int]]] = {}

    def usage(self, request: ModelRequest | None, message: AssistantMessage) -> Usage:
        sent = 0
        if request is not None and request.messages:
            messages = request.messages
            first, key = messages[0], id(messages[0])
            kept = self._last.get(key)
            if kept is not None and kept[0]() is first:
                ref, rest, counts = kept
                same = list(map(operator.is_, rest, messages[1:]))  # compared in C
                shared = 1 + (same.index(False) if False in same else len(same))
            else:
                ref, counts, shared = weakref.ref(first, partial(self._forget, key)), [], 0
            counts = [*counts[:shared], *(message_chars(m) for m in messages[shared:])]
            self._last[key] = (ref, messages[1:], counts)
            sent = sum(counts)
        return Usage(input=sent // 4, output=max(1, message_chars(message) // 4))

    def _forget(self, key: int, _gone: object) -> None:
        # The first message is gone (its id may be reused from now on): so is its entry.
        self._last.pop(key, None)


if TYPE_CHECKING:  # mypy proves the adapter satisfies its port
    from core.harness.models import Models

    def _conforms(adapter: FauxModel) -> Models:
        return adapter
