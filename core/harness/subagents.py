"""Sub-agents: conversations owned by a task, with their own agent.

* :func:`subagent_tool` — a foreground, replay-safe tool: it runs a task in a child
  conversation owned by the tool call's task and returns the child's answer. After a
  crash the rerun finds its child again by owner task id and resubmits with the request
  id ``subagent:<task id>``, so there is exactly one child and exactly one input,
  whatever happens.
* :func:`background_subagent_tool` — starts a background task that runs the child and,
  when it has answered, reports back to the parent conversation with a write deduplicated
  by ``report:<task id>``. The parent can go idle meanwhile.

A child's usage is accounted to the child; the parent sees it through
``Conversation.usage(include_owned=True)`` and in the tool result's details.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from pydantic import BaseModel, Field

from core.harness.builtin_documents import AGENT
from core.harness.messages import TextBlock, message_from_json
from core.harness.registry import Extension, ToolDefinition, define_extension, define_tool
from core.harness.tools import ToolContext, ToolResult, harness_of
from core.jsonvalue import JsonObject, json_copy
from core.records import Completed, Task
from core.session.transaction import Tx
from core.storage.port import ConversationQuery
from core.tasks.definition import define_task
from core.tasks.runtime import TaskRuntime

if TYPE_CHECKING:
    from core.harness.handles import ConversationHandle
    from core.harness.tools import ToolServices

__all__ = [
    "SUBAGENT_TASK",
    "SubagentArgs",
    "background_subagent_tool",
    "owned_conversation",
    "subagent_extension",
    "subagent_tool",
]

SUBAGENT_TASK = "perdure.subagent"


class SubagentArgs(BaseModel):
    task: str = Field(min_length=1, description="what the sub-agent should do, in full")


async def owned_conversation(
    harness: ToolServices, owner_task_id: int, agent: JsonObject | None = None
) -> ConversationHandle:
    """The conversation owned by ``owner_task_id``, created on first use: it starts as a
    copy of the owner conversation's agent, then ``agent`` is applied on top."""
    found = await harness.session.storage.scan_conversations(
        ConversationQuery(owner_task_id=owner_task_id, limit=1)
    )
    if found.items:
        return await harness.conversation(found.items[0].id)

    async def create(tx: Tx) -> int:
        owner = tx.staged_task(owner_task_id)
        conv = await tx.create_conversation(owner_task_id=owner_task_id)
        parent_agent = (
            await harness.session.document_value(AGENT, owner.conversation_id) if owner else {}
        )
        doc = await tx.doc(AGENT, conv.id)
        doc.value = harness.configured_agent(parent_agent, agent or {})
        return conv.id

    return await harness.conversation(await harness.session.commit(create))


async def _answer_text(harness: ToolServices, entry_id: int | None) -> str:
    if entry_id is None:
        return ""
    entry = await harness.session.storage.entry(entry_id)
    if entry is None or entry.message is None:
        return ""
    message = message_from_json(entry.message)
    return "".join(b.text for b in getattr(message, "content", []) if isinstance(b, TextBlock))


def subagent_tool(
    name: str = "subagent",
    *,
    description: str = "Hand a self-contained task to a sub-agent and get its answer.",
    agent: JsonObject | None = None,
) -> ToolDefinition:
    """A replay-safe tool that runs a task in a child conversation (see the module doc)."""
    overrides = json_copy(agent or {})

    async def execute(args: SubagentArgs, ctx: ToolContext) -> ToolResult:
        child = await owned_conversation(ctx.harness, ctx.task_id, cast(JsonObject, overrides))
        submission = await child.submit(args.task, request_id=f"subagent:{ctx.task_id}")
        record = await submission.wait()
        usage = (await child.usage()).model_dump()
        details: JsonObject = {"conversation_id": child.id, "usage": usage}
        if record.status != "done":
            return ToolResult(
                f"[error] The sub-agent did not answer ({record.reason}: {record.detail})",
                is_error=True,
                details=details,
            )
        return ToolResult(await _answer_text(ctx.harness, record.answer), details=details)

    return define_tool(
        name, description=description, parameters=SubagentArgs, execute=execute, replay="safe"
    )


def background_subagent_tool(
    name: str = "background_subagent",
    *,
    description: str = (
        "Start a sub-agent on a task in the background; it reports back when done."
    ),
    agent: JsonObject | None = None,
) -> ToolDefinition:
    """Starts a :data:`SUBAGENT_TASK` in the background, in the tool's result commit."""
    overrides = json_copy(agent or {})

    async def execute(args: SubagentArgs, ctx: ToolContext) -> ToolResult:
        conversation = ctx.conversation_id

        async def start(tx: Tx) -> None:
            await tx.create_task(
                SUBAGENT_TASK,
                {"task": args.task, "agent": overrides},
                conversation_id=conversation,
                background=True,
            )

        return ToolResult("The sub-agent started; it will report back here.", apply=start)

    return define_tool(
        name, description=description, parameters=SubagentArgs, execute=execute, replay="safe"
    )


def subagent_extension() -> Extension:
    """The sub-agent tools and the background task they use, as one extension."""

    async def run(task: Task, rt: TaskRuntime) -> None:
        h = harness_of(rt)
        value = task.input if isinstance(task.input, dict) else {}
        agent = value.get("agent")
        child = await owned_conversation(h, task.id, agent if isinstance(agent, dict) else None)
        submission = await child.submit(str(value.get("task")), request_id=f"subagent:{task.id}")
        record = await submission.wait()
        text = await _answer_text(h, record.answer)
        parent = await h.conversation(task.conversation_id)
        await parent.write(
            "subagent_report",
            data={
                "conversation_id": child.id,
                "status": record.status,
                "answer": text,
                "reason": record.reason,
            },
            request_id=f"report:{task.id}",
        )
        await rt.commit(lambda tx, current: Completed({"conversation_id": child.id}))

    return define_extension(
        "subagents",
        tools=[subagent_tool(), background_subagent_tool()],
        tasks=[define_task(SUBAGENT_TASK, phases={"run": run})],
    )
