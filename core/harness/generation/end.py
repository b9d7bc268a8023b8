"""How a generation's run ends without an answer: a failed request (``_fail_run``), and
an abort, fault or orphaning (``_end_run``, ``settle_generation``) that keeps the committed
partial as an aborted entry and settles the run's inputs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.harness.builtin_documents import LIVE
from core.harness.generation.live import _is_current, _live_section
from core.harness.messages import AssistantMessage, message_from_json, message_to_json
from core.harness.runs import add_usage, final_boundary, settle_run, withdraw_inputs
from core.records import Aborted, ErrorInfo, Failed, Faulted, Orphaned, Task
from core.session.transaction import Tx
from core.tasks.runtime import TaskRuntime

if TYPE_CHECKING:
    from core.harness.services import HarnessServices

__all__ = ["settle_generation"]


async def _fail_run(
    h: HarnessServices,
    rt: TaskRuntime,
    reason: str,
    detail: str,
    message: AssistantMessage | None = None,
) -> None:
    conv = rt.conversation_id

    async def fail(tx: Tx, current: Task) -> Failed:
        if message is not None:
            await tx.append_entry(
                conv, "assistant", message=message_to_json(message), by_task_id=current.id
            )
            await add_usage(tx, conv, message.usage, model=message.model)
        live = await tx.doc(LIVE, conv)
        if _is_current(live, current.id):
            await settle_run(tx, conv, live, reason=reason, detail=detail)
            # Queued input still gets its turn: a failed run must not strand it.
            await final_boundary(tx, conv, h.settings)
        return Failed(ErrorInfo(detail, {"reason": reason}))

    await rt.commit(fail)


async def _end_run(
    h: HarnessServices, tx: Tx, task: Task, *, reason: str, detail: str | None = None
) -> None:
    """End the run of a generation that did not answer: keep its committed partial as an
    aborted assistant entry, settle the run's inputs unanswered."""
    conv = task.conversation_id
    live = await tx.doc(LIVE, conv)
    gen = _live_section(live, "generation")
    partial = gen.get("partial") if gen.get("task") == task.id else None
    if isinstance(partial, dict):
        message = message_from_json(partial)
        await tx.append_entry(
            conv, "assistant", message=message_to_json(message), by_task_id=task.id
        )
    if _is_current(live, task.id):
        await settle_run(tx, conv, live, reason=reason, detail=detail)
        if h.cancelled(conv, tx):
            # The conversation's owner is being aborted: queued input goes with it.
            await withdraw_inputs(tx, conv)
        await final_boundary(tx, conv, h.settings)


async def settle_generation(h: HarnessServices, tx: Tx, task: Task) -> None:
    """Scheduler-written outcome of a generation (fault, orphan): clean its run up."""
    outcome = task.outcome
    if isinstance(outcome, Faulted):
        await _end_run(h, tx, task, reason="faulted", detail=outcome.error.message)
    elif isinstance(outcome, Orphaned):
        await _end_run(h, tx, task, reason=outcome.reason)
    elif isinstance(outcome, Aborted):
        await _end_run(h, tx, task, reason="aborted")
