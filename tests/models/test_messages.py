"""``to_openai`` / ``from_openai`` round trips, and what ``strip_extensions`` leaves."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from core.harness.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
    from_openai,
    strip_extensions,
    to_openai,
)

texts = st.text(max_size=40)
nonempty = st.text(min_size=1, max_size=40)
json_scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=10)
arguments = st.dictionaries(st.text(max_size=8), json_scalars, max_size=4)
usages = st.builds(
    Usage,
    input=st.integers(0, 10**6),
    output=st.integers(0, 10**6),
    cache_read=st.integers(0, 10**6),
    cache_write=st.integers(0, 10**6),
    cost=st.floats(0, 100, allow_nan=False),
)
tool_calls = st.builds(ToolCall, id=nonempty, name=nonempty, arguments=arguments)


@st.composite
def assistants(draw: st.DrawFn) -> AssistantMessage:
    # The canonical shape the OpenAI format can carry: at most one thinking block (first,
    # non-empty, no signature), at most one non-empty text block, then the tool calls.
    content: list[TextBlock | ThinkingBlock | ToolCall] = []
    if draw(st.booleans()):
        content.append(ThinkingBlock(thinking=draw(nonempty)))
    if draw(st.booleans()):
        content.append(TextBlock(text=draw(nonempty)))
    content.extend(draw(st.lists(tool_calls, max_size=3)))
    return AssistantMessage(
        content=content,
        stop_reason=draw(st.sampled_from(["stop", "tool_use", "length", "error", "aborted"])),
        usage=draw(usages),
        model=draw(st.none() | nonempty),
        error=draw(st.none() | texts),
    )


messages = st.one_of(
    st.builds(UserMessage, content=texts),
    st.builds(SystemMessage, content=texts),
    assistants(),
    st.builds(
        ToolResultMessage,
        tool_call_id=nonempty,
        tool_name=texts,
        content=texts,
        is_error=st.booleans(),
        details=st.none() | arguments,
    ),
)


@given(st.lists(messages, max_size=6))
def test_round_trip_is_lossless(history: list[Message]) -> None:
    wire = to_openai(history)
    assert from_openai(json.loads(json.dumps(wire))) == history


@given(st.lists(messages, max_size=6))
def test_stripped_messages_are_plain_openai(history: list[Message]) -> None:
    stripped = strip_extensions(to_openai(history))
    assert [m["role"] for m in stripped] == [
        {"user": "user", "system": "system", "assistant": "assistant", "tool_result": "tool"}[
            m.role
        ]
        for m in history
    ]
    for m in stripped:
        assert not [k for k in m if k.startswith("perdure_")]
    # What survives stripping still parses, with perdure-only fields at their defaults.
    back = from_openai(stripped)
    assert [type(m) for m in back] == [type(m) for m in history]


def test_openai_shapes_from_providers() -> None:
    parsed = from_openai(
        [
            {"role": "developer", "content": [{"type": "text", "text": "be brief"}]},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "ls", "arguments": '{"path": "."}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "a.py"},
        ]
    )
    assert parsed == [
        SystemMessage(content="be brief"),
        AssistantMessage(
            content=[ToolCall(id="c1", name="ls", arguments={"path": "."})], stop_reason="tool_use"
        ),
        ToolResultMessage(tool_call_id="c1", tool_name="", content="a.py"),
    ]
