"""Messages: what conversations hold and models exchange.

Pydantic models (they cross the model and HTTP boundaries, where validation is the
point), stored in entries as JSON (``model_dump(mode="json")``). Conversion to and from
the OpenAI chat format (which litellm speaks) is lossless for everything that format can
carry; perdure-only fields (usage, stop reason, error flags) travel in the same dicts
under ``perdure_*`` keys that OpenAI-compatible servers ignore.
"""

from __future__ import annotations

import json
import math
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from core.errors import InvalidJson
from core.jsonvalue import JsonObject, JsonValue, dumps_spaced, json_check, scrub_json, scrub_text

__all__ = [
    "AssistantMessage",
    "Message",
    "StopReason",
    "SystemMessage",
    "TextBlock",
    "ThinkingBlock",
    "ToolCall",
    "ToolResultMessage",
    "Usage",
    "UserMessage",
    "assistant_text",
    "from_openai",
    "message_chars",
    "message_from_json",
    "message_to_json",
    "servable_message",
    "strip_extensions",
    "to_openai",
]

StopReason: TypeAlias = Literal["stop", "tool_use", "length", "error", "aborted"]


class _Model(BaseModel):
    # defer_build: each model's validator and serializer are built on first use, not at
    # import. A cold isolate (an alarm with nothing due, a read request) may never need
    # them; Pyodide pays ~0.1 s building them all at import otherwise.
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


# Default factories are plain functions, not ``dict``/``list``/``Usage``: building a
# model's schema asks ``inspect.signature`` of each factory, and for a builtin that
# parses its text signature with ``tokenize``, compiling tokenize's large regex (a few
# ms on a cold start, where the first message is parsed: recovery's first request).
def _no_arguments() -> dict[str, Any]:
    return {}


def _no_blocks() -> list[TextBlock | ThinkingBlock | ToolCall]:
    return []


def _zero_usage() -> Usage:
    return Usage()


class TextBlock(_Model):
    type: Literal["text"] = "text"
    text: str


class ThinkingBlock(_Model):
    type: Literal["thinking"] = "thinking"
    thinking: str
    signature: str | None = None


class ToolCall(_Model):
    type: Literal["tool_call"] = "tool_call"
    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=_no_arguments)


class Usage(_Model):
    """Tokens and cost (USD) of one model response; summed into the ``usage`` document."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    cost: float = 0.0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input=self.input + other.input,
            output=self.output + other.output,
            cache_read=self.cache_read + other.cache_read,
            cache_write=self.cache_write + other.cache_write,
            cost=self.cost + other.cost,
        )

    @property
    def total_tokens(self) -> int:
        return self.input + self.output + self.cache_read + self.cache_write


class UserMessage(_Model):
    role: Literal["user"] = "user"
    content: str


class SystemMessage(_Model):
    role: Literal["system"] = "system"
    content: str


class AssistantMessage(_Model):
    role: Literal["assistant"] = "assistant"
    content: list[Annotated[TextBlock | ThinkingBlock | ToolCall, Field(discriminator="type")]] = (
        Field(default_factory=_no_blocks)
    )
    stop_reason: StopReason = "stop"
    usage: Usage = Field(default_factory=_zero_usage)
    model: str | None = None
    error: str | None = None

    @property
    def tool_calls(self) -> list[ToolCall]:
        return [b for b in self.content if isinstance(b, ToolCall)]

    @property
    def text(self) -> str:
        return assistant_text(self)


class ToolResultMessage(_Model):
    role: Literal["tool_result"] = "tool_result"
    tool_call_id: str
    tool_name: str
    content: str
    is_error: bool = False
    details: Any = None  # JSON (the recursive JsonValue alias is opaque to pydantic)


Message: TypeAlias = Annotated[
    UserMessage | SystemMessage | AssistantMessage | ToolResultMessage,
    Field(discriminator="role"),
]
_MESSAGE: TypeAdapter[Message] = TypeAdapter(Message, config=ConfigDict(defer_build=True))


def message_to_json(message: Message) -> JsonObject:
    out: JsonObject = message.model_dump(mode="json")
    return out


def message_from_json(value: JsonValue) -> Message:
    return _MESSAGE.validate_python(value)


def servable_message(message: AssistantMessage) -> AssistantMessage:
    """``message`` with lone surrogates replaced by U+FFFD: a model's answer is outside
    input that must still be stored and served back, so it is repaired rather than
    refused. The result's JSON round trip is exact (the harness keeps it as its entry's
    parsed message): it is ``message`` itself when every string is clean and every
    argument a plain JSON value (the common case, checked without serializing),
    otherwise the message rebuilt from its repaired JSON."""
    if _plain(message):
        return message
    return AssistantMessage.model_validate(scrub_json(message_to_json(message)))


def _plain(message: AssistantMessage) -> bool:
    """Whether ``message`` holds only clean strings, finite usage and plain JSON tool
    arguments (exactly what its JSON form says, read back)."""
    texts: list[str | None] = [message.model, message.error]
    for block in message.content:
        if isinstance(block, TextBlock):
            texts.append(block.text)
        elif isinstance(block, ThinkingBlock):
            texts += (block.thinking, block.signature)
        else:
            texts += (block.id, block.name)
            try:
                json_check(block.arguments, "arguments")  # a check: no copy is kept
            except InvalidJson:
                return False
    for text in texts:
        if text is not None and not text.isascii() and scrub_text(text) != text:
            return False
    usage = message.usage
    return math.isfinite(usage.cost) and all(
        type(n) is int for n in (usage.input, usage.output, usage.cache_read, usage.cache_write)
    )


def message_chars(message: Message) -> int:
    """The characters a message puts into a request: text, thinking, tool names and
    arguments (the basis of token estimates)."""
    if not isinstance(message, AssistantMessage):
        return len(message.content)
    total = 0
    for block in message.content:
        if isinstance(block, TextBlock):
            total += len(block.text)
        elif isinstance(block, ThinkingBlock):
            total += len(block.thinking)
        else:
            total += len(block.name) + len(dumps_spaced(block.arguments))
    return total


def assistant_text(message: AssistantMessage) -> str:
    return "".join(b.text for b in message.content if isinstance(b, TextBlock))


# --------------------------------------------------------------------------- OpenAI format


def to_openai(messages: list[Message]) -> list[dict[str, Any]]:
    """The OpenAI chat format (``role`` system/user/assistant/tool)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if isinstance(m, SystemMessage | UserMessage):
            out.append({"role": m.role, "content": m.content})
        elif isinstance(m, AssistantMessage):
            text = assistant_text(m)
            item: dict[str, Any] = {"role": "assistant", "content": text or None}
            thinking = "".join(b.thinking for b in m.content if isinstance(b, ThinkingBlock))
            if thinking:
                item["reasoning_content"] = thinking
            calls = m.tool_calls
            if calls:
                item["tool_calls"] = [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
                    }
                    for c in calls
                ]
            item["perdure_stop_reason"] = m.stop_reason
            item["perdure_usage"] = m.usage.model_dump()
            if m.model is not None:
                item["perdure_model"] = m.model
            if m.error is not None:
                item["perdure_error"] = m.error
            out.append(item)
        else:
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": m.tool_call_id,
                    "name": m.tool_name,
                    "content": m.content,
                    "perdure_is_error": m.is_error,
                    "perdure_details": m.details,
                }
            )
    return out


def strip_extensions(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Drop the ``perdure_*`` keys (for providers that reject unknown keys)."""
    return [{k: v for k, v in m.items() if not k.startswith("perdure_")} for m in messages]


def from_openai(messages: list[dict[str, Any]]) -> list[Message]:
    """Parse the OpenAI chat format (as produced by :func:`to_openai` or a provider)."""
    out: list[Message] = []
    for m in messages:
        role = m.get("role")
        if role in ("system", "developer"):
            out.append(SystemMessage(content=_text_of(m.get("content"))))
        elif role == "user":
            out.append(UserMessage(content=_text_of(m.get("content"))))
        elif role == "assistant":
            blocks: list[TextBlock | ThinkingBlock | ToolCall] = []
            if m.get("reasoning_content"):
                blocks.append(ThinkingBlock(thinking=str(m["reasoning_content"])))
            text = _text_of(m.get("content"))
            if text:
                blocks.append(TextBlock(text=text))
            for call in m.get("tool_calls") or []:
                fn = call.get("function") or {}
                raw = fn.get("arguments") or "{}"
                args = json.loads(raw) if isinstance(raw, str) else raw
                blocks.append(ToolCall(id=str(call["id"]), name=str(fn["name"]), arguments=args))
            out.append(
                AssistantMessage(
                    content=blocks,
                    stop_reason=m.get("perdure_stop_reason")
                    or ("tool_use" if m.get("tool_calls") else "stop"),
                    usage=Usage(**(m.get("perdure_usage") or {})),
                    model=m.get("perdure_model"),
                    error=m.get("perdure_error"),
                )
            )
        elif role == "tool":
            out.append(
                ToolResultMessage(
                    tool_call_id=str(m["tool_call_id"]),
                    tool_name=str(m.get("name") or ""),
                    content=_text_of(m.get("content")),
                    is_error=bool(m.get("perdure_is_error", False)),
                    details=m.get("perdure_details"),
                )
            )
        else:
            raise ValueError(f"unknown message role {role!r}")
    return out


def _text_of(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    raise ValueError(f"unsupported message content {content!r}")
