"""The OpenAI chat-completions wire format, shared by the litellm and HTTP adapters.

* :func:`request_body` turns a :class:`ModelRequest` into the fields both adapters send
  (messages, tools, ``max_tokens``, ``reasoning_effort``, vetted options);
* :class:`Assembler` folds streamed deltas (already decoded into plain values) into the
  events the harness sees and, at the end, the final :class:`AssistantMessage`;
* :func:`usage_from_openai` reads a chunk's ``usage`` object.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from core.harness.messages import (
    AssistantMessage,
    StopReason,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    Usage,
    strip_extensions,
    to_openai,
)
from core.harness.models import (
    ModelError,
    ModelInfo,
    ModelRequest,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    ToolSpec,
)

__all__ = [
    "DEFAULT_OPTIONS",
    "Assembler",
    "ToolCallPart",
    "check_info",
    "request_body",
    "stop_reason_of",
    "tools_to_openai",
    "usage_from_openai",
]

DEFAULT_OPTIONS = frozenset(
    {
        "temperature",
        "top_p",
        "top_k",
        "stop",
        "seed",
        "presence_penalty",
        "frequency_penalty",
        "logit_bias",
        "tool_choice",
        "parallel_tool_calls",
        "response_format",
        "user",
        "timeout",
    }
)
"""Request options an agent may pin. An allowlist on purpose: options come from agent
configuration, and keys such as ``api_base``, ``api_key`` or ``extra_headers`` would let
whoever configures an agent redirect the operator's credentials. ``n`` is absent because
the adapters assemble exactly one choice."""


def check_info(info: ModelInfo) -> None:
    """Validate an operator-supplied :class:`ModelInfo` (raises ``TypeError``/``ValueError``)."""
    if not isinstance(info, ModelInfo):
        raise TypeError(f"expected a ModelInfo, got {type(info).__name__}")
    if not isinstance(info.id, str) or not info.id.strip():
        raise ValueError(f"ModelInfo.id must be a non-empty string, got {info.id!r}")
    for name in ("context_window", "max_tokens"):
        value = getattr(info, name)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"ModelInfo.{name} must be a positive integer, got {value!r}")


def tools_to_openai(tools: Iterable[ToolSpec]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for tool in tools:
        if not tool.name or tool.name in seen:
            raise ModelError(f"tool names must be unique and non-empty: {tool.name!r}")
        if not isinstance(tool.parameters, dict):
            raise ModelError(f"tool {tool.name!r}: parameters must be a JSON schema object")
        seen.add(tool.name)
        out.append(
            {
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.parameters,
                },
            }
        )
    return out


def request_body(
    request: ModelRequest, info: ModelInfo, allowed_options: frozenset[str]
) -> tuple[dict[str, Any], float | None]:
    """The provider-neutral part of the request, and its ``timeout`` option (seconds).

    The body holds what both adapters send: messages (system messages in place,
    ``perdure_*`` keys stripped), tools, ``max_tokens`` (the request's, capped at the
    model's limit, or the model's limit), ``reasoning_effort`` unless thinking is off,
    and the options. Options outside ``allowed_options`` raise a non-retryable
    :class:`ModelError`; options never override the fields the request itself carries.
    """
    unknown = sorted(set(request.options) - allowed_options)
    if unknown:
        raise ModelError(f"unsupported model options: {', '.join(unknown)}")
    timeout = request.options.get("timeout")
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0
    ):
        raise ModelError(f"the timeout option must be a positive number, got {timeout!r}")
    if request.max_tokens is not None and (
        isinstance(request.max_tokens, bool)
        or not isinstance(request.max_tokens, int)
        or request.max_tokens <= 0
    ):
        raise ModelError(f"max_tokens must be a positive integer, got {request.max_tokens!r}")
    if request.thinking not in ("off", "low", "medium", "high"):
        raise ModelError(f"unknown thinking level {request.thinking!r}")
    body: dict[str, Any] = {k: v for k, v in request.options.items() if k != "timeout"}
    body["messages"] = strip_extensions(to_openai(request.messages))
    if request.tools:
        body["tools"] = tools_to_openai(request.tools)
    body["max_tokens"] = min(request.max_tokens or info.max_tokens, info.max_tokens)
    if request.thinking != "off":
        body["reasoning_effort"] = request.thinking
    return body, (float(timeout) if timeout is not None else None)


_STOP_REASONS: Mapping[str, StopReason] = {
    "stop": "stop",
    "end_turn": "stop",
    "stop_sequence": "stop",
    "eos": "stop",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "tool_use": "tool_use",
    "length": "length",
    "max_tokens": "length",
    "content_filter": "error",
}


def stop_reason_of(finish_reason: str | None, has_tool_calls: bool) -> StopReason:
    """Map a provider ``finish_reason``. A response that called tools is ``tool_use``
    unless it was cut by the length limit (some providers say ``stop`` there)."""
    reason = _STOP_REASONS.get(finish_reason or "", "stop")
    if has_tool_calls and reason == "stop":
        return "tool_use"
    return reason


def usage_from_openai(raw: Mapping[str, Any]) -> Usage:
    """Read an OpenAI ``usage`` object (or litellm's superset of it).

    ``prompt_tokens`` includes cached tokens in OpenAI's convention (litellm normalizes
    Anthropic to it too), so uncached ``input`` is what remains after cache reads and
    writes; :attr:`Usage.total_tokens` then counts every token once.
    """
    details = raw.get("prompt_tokens_details")
    details = details if isinstance(details, Mapping) else {}
    cache_read = _count(raw.get("cache_read_input_tokens")) or _count(details.get("cached_tokens"))
    cache_write = (
        _count(raw.get("cache_creation_input_tokens"))
        or _count(details.get("cache_write_tokens"))
        or _count(details.get("cache_creation_tokens"))
    )
    prompt = _count(raw.get("prompt_tokens"))
    return Usage(
        input=max(0, prompt - cache_read - cache_write),
        output=_count(raw.get("completion_tokens")),
        cache_read=cache_read,
        cache_write=cache_write,
    )


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    return max(0, int(value))


@dataclass(frozen=True, slots=True)
class ToolCallPart:
    """One tool-call fragment of a delta, as decoded from the wire."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass(slots=True)
class _CallSlot:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class Assembler:
    """Accumulates one streamed response.

    ``delta(...)`` returns the events to yield for one chunk (empty fragments produce
    none); ``finish(...)`` builds the final message. Tool calls are keyed by their
    ``index``; a call's id and name may arrive in any fragment, arguments are joined in
    order. Arguments that do not parse as a JSON object become ``{}``: the tool's own
    validation then reports the problem to the model, which is how a truncated call
    (``stop_reason="length"``) gets corrected.
    """

    def __init__(self) -> None:
        self._text: list[str] = []
        self._thinking: list[str] = []
        self._signature: str | None = None
        self._calls: dict[int, _CallSlot] = {}
        self.finish_reason: str | None = None
        self.usage: Usage | None = None

    def delta(
        self,
        *,
        text: str | None = None,
        thinking: str | None = None,
        tool_calls: Iterable[ToolCallPart] = (),
    ) -> list[StreamEvent]:
        events: list[StreamEvent] = []
        if thinking:
            self._thinking.append(thinking)
            events.append(ThinkingDelta(thinking))
        if text:
            self._text.append(text)
            events.append(TextDelta(text))
        for part in tool_calls:
            if isinstance(part.index, bool) or not isinstance(part.index, int) or part.index < 0:
                raise ModelError(f"malformed tool call delta index {part.index!r}")
            slot = self._calls.setdefault(part.index, _CallSlot())
            new_id = part.id if part.id and not slot.id else None
            new_name = part.name if part.name and not slot.name else None
            if new_id:
                slot.id = new_id
            if new_name:
                slot.name = new_name
            if part.arguments:
                slot.arguments.append(part.arguments)
            if new_id or new_name or part.arguments:
                events.append(ToolCallDelta(part.index, new_id, new_name, part.arguments))
        return events

    def thinking_signature(self, signature: str) -> None:
        self._signature = signature

    def finish(self, model: str) -> AssistantMessage:
        content: list[TextBlock | ThinkingBlock | ToolCall] = []
        if self._thinking:
            content.append(
                ThinkingBlock(thinking="".join(self._thinking), signature=self._signature)
            )
        if self._text:
            content.append(TextBlock(text="".join(self._text)))
        for index in sorted(self._calls):
            slot = self._calls[index]
            if not slot.name:
                raise ModelError(f"tool call {index} arrived without a name", retryable=True)
            content.append(
                ToolCall(
                    id=slot.id or f"call_{index}",
                    name=slot.name,
                    arguments=_arguments("".join(slot.arguments)),
                )
            )
        reason = stop_reason_of(self.finish_reason, bool(self._calls))
        return AssistantMessage(
            content=content,
            stop_reason=reason,
            usage=self.usage or Usage(),
            model=model,
            error=f"finish_reason={self.finish_reason}" if reason == "error" else None,
        )


def _arguments(raw: str) -> dict[str, Any]:
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
