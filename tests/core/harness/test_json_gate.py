"""Harness boundaries use the JSON gate: a refused value raises InvalidJson naming its
field and writes nothing (no commit; the conversation stays servable)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from core.errors import InvalidJson
from core.faux import faux_message, faux_tool_call
from core.harness import Harness, Hooks, ToolCall, ToolContext
from core.jsonvalue import dumps
from tests.core.harness.support import MODEL, Rig, echo, entries, extension, tool


def nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


BAD = "x\ud800"
DEEP_FIELD = "content.data" + "[0]" * 64  # the gate stops at the depth limit
Attempt = Callable[[Harness, Any], Awaitable[Any]]

ATTEMPTS: list[tuple[str, Attempt, str]] = [
    ("agent-instructions", lambda h, c: c.configure(instructions=BAD), "instructions"),
    ("agent-model", lambda h, c: c.configure(model="\udc00"), "model"),
    ("agent-cwd", lambda h, c: c.configure(cwd=BAD), "cwd"),
    ("agent-extensions", lambda h, c: c.configure(extensions=["ok", BAD]), "extensions[1]"),
    ("agent-tools", lambda h, c: c.configure(tools=[BAD]), "tools[0]"),
    ("new-conversation", lambda h, c: h.create_conversation(agent={"cwd": BAD}), "cwd"),
    ("write-data", lambda h, c: c.write("note", data={"items": [1, BAD]}), "content.data.items[1]"),
    ("write-data-key", lambda h, c: c.write("note", data={BAD: 1}), "content.data"),
    ("write-255-deep", lambda h, c: c.write("note", data=nested(255)), DEEP_FIELD),
    ("write-1000-deep", lambda h, c: c.write("note", data=nested(1000)), DEEP_FIELD),
    (
        "write-message",
        lambda h, c: c.write("note", message={"role": "user", "content": BAD}),
        "content.message.content",
    ),
    ("write-kind", lambda h, c: c.write(BAD, data=1), "content.kind"),
    ("write-request-id", lambda h, c: c.write("note", data=1, request_id=BAD), "request_id"),
    ("submit-content", lambda h, c: c.submit(BAD), "content"),
    ("reset-handoff", lambda h, c: c.reset(BAD), "handoff"),
    ("compact-instructions", lambda h, c: c.compact(BAD), "instructions"),
]


@pytest.mark.parametrize(
    ("attempt", "field"), [(a, f) for _, a, f in ATTEMPTS], ids=[i for i, _, _ in ATTEMPTS]
)
async def test_refused_values_name_their_field_and_write_nothing(
    tmp_path: Path, attempt: Attempt, field: str
) -> None:
    rig = Rig(tmp_path, "sqlite")
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    commits, seq = rig.commits, h.session.last_seq
    agent, items = await root.agent(), await entries(h)
    with pytest.raises(InvalidJson) as caught:
        await attempt(h, root)
    assert caught.value.field == field
    assert rig.commits == commits and h.session.last_seq == seq
    assert await root.agent() == agent and await entries(h) == items
    dumps(await root.agent())  # still servable
    await h.close()


async def test_hook_arguments_that_are_not_json_fail_the_call_not_the_run(
    tmp_path: Path,
) -> None:
    async def poison(call: ToolCall, ctx: ToolContext) -> Any:
        return {"text": BAD}

    rig = Rig(
        tmp_path,
        steps=[faux_message(faux_tool_call("echo", {"text": "hi"}, id="a")), faux_message("ok")],
    )
    rig.registry.install(extension("guard", tool("echo", echo), hooks=Hooks(before_tool=poison)))
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    record = await (await root.submit("go")).wait()
    assert record.status == "done"
    result = next(e for e in await entries(h) if e.kind == "tool_result")
    assert result.message is not None
    assert "Invalid arguments for tool echo" in result.message["content"]  # type: ignore[index,call-overload]
    assert "arguments.text" in result.message["content"]  # type: ignore[index,call-overload]
    await h.close()


async def test_tool_output_with_lone_surrogates_is_scrubbed_not_lost(tmp_path: Path) -> None:
    async def surrogates(args: Any, ctx: ToolContext) -> str:
        return "name: caf\udce9"  # what os.fsdecode makes of a latin-1 file name

    rig = Rig(
        tmp_path,
        "sqlite",
        steps=[faux_message(faux_tool_call("ls", {"text": ""}, id="a")), faux_message("ok")],
    )
    rig.registry.install(extension("files", tool("ls", surrogates)))
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    record = await (await root.submit("go")).wait()
    assert record.status == "done"
    result = next(e for e in await entries(h) if e.kind == "tool_result")
    assert result.message is not None and result.message["content"] == "name: caf\ufffd"  # type: ignore[index,call-overload]
    await h.close()


async def test_model_output_with_lone_surrogates_is_repaired_not_a_failed_run(
    tmp_path: Path,
) -> None:
    """A provider can stream lone surrogates (JSON escapes of half a pair). The answer is
    outside input the run cannot refuse: it is stored with U+FFFD, streamed partials too."""
    rig = Rig(
        tmp_path,
        "sqlite",
        steps=[
            faux_message(faux_tool_call("echo", {"text": "x\ud800"}, id="a"), "half \udc00"),
            faux_message("done \ud83d"),
        ],
    )
    rig.registry.install(extension("e", tool("echo", echo)))
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    record = await (await root.submit("go")).wait()
    assert record.status == "done", record
    answer = next(e for e in await entries(h) if e.id == record.answer)
    assert answer.message is not None
    assert answer.message["content"][0]["text"] == "done \ufffd"  # type: ignore[index,call-overload]
    stored = dumps([e.message for e in await entries(h)])
    assert "\\ud800" not in stored and "\\udc00" not in stored and "\\ud83d" not in stored
    assert "echo: x\\ufffd" in stored
    assert "\\ud8" not in dumps(await root.view())
    await h.close()
