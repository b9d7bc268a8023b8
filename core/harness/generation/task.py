"""The generation task: one model request of a run, and what follows from its answer.

Phases (checkpoint ``phase``):

``prepare``  land a compaction summary queued for this run (this point is the
             post-tools boundary the run just passed); resolve the agent, render the
             system prompt and record what changed as a ``system`` entry, pin the
             model, thinking level and the context ``cutoff``; decide compaction: a
             context too big to send first waits for a compaction — the one already
             summarizing, or one the generation owns (``compacted`` marks that it
             did) —, a context in the background band starts a conversation-owned
             compaction in the pin commit (unless one is in flight). A pin that
             would write nothing but the ``request`` checkpoint (the common case: no
             prompt change, no compaction) is not committed: the request is sent in
             this same phase from the checkpoint held in memory, and its response
             commit below is the phase's durable progress (invariant 5). The stored
             phase stays ``prepare`` meanwhile, so a crash prepares again.
``request``  stream from the model, committing partial output to ``live`` (throttled,
             and only once the response has streamed for a while or grown: a short
             response commits no partial); then one commit classifies the response:
             * an answer → assistant entry, the run's inputs ``done``, the final boundary
               (which may start the next run);
             * tool calls → assistant entry, one tool task per call (owned by this task),
               and ``waiting`` on them (``tools``);
             * a deferred response → ``waiting{until}`` then ``poll``;
             * a context overflow → an owned compaction, then ``prepare`` again; a
               second overflow (``overflowed``) is an ordinary error;
             * a retryable error → ``waiting{until}`` with exponential backoff, then
               ``retry``; otherwise the run's inputs end ``unanswered``.
``retry``    resend the request with the pinned model and options.
``poll``     fetch a deferred response.
``tools``    after the tool round: the post-tools boundary (steers join the run, a
             queued compaction summary lands) and, in the same commit, the next model
             round of the same task (``round`` one more) — already prepared, unless the
             boundary moved the context's start (then it prepares against the new range).

This module is the task definition; each job lives beside it in this package (see its
docstring).

A crash at any point resumes at the last checkpoint: an interrupted request is sent again
(prepared again first if its pin was held in memory; its committed partial stays in
``live`` and is not replayed), a backoff or poll time is kept, and a tool round waits
for its tool tasks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

from core.harness.builtin_documents import LIVE
from core.harness.generation.end import _end_run
from core.harness.generation.hand_over import _tools_phase
from core.harness.generation.live import _checkpoint_copy, _live_section
from core.harness.generation.prepare import _prepare_phase
from core.harness.generation.request import _poll_phase, _request_phase, _send_request
from core.harness.runs import GENERATION
from core.jsonvalue import JsonObject
from core.records import Aborted, Task
from core.session.transaction import Tx
from core.tasks.definition import TaskDefinition, define_task
from core.tasks.runtime import TaskRuntime
from core.telemetry import phase_span

if TYPE_CHECKING:
    from core.harness.services import HarnessServices

__all__ = ["generation_task"]


def generation_task(services: Callable[[], HarnessServices]) -> TaskDefinition:
    async def prepare(task: Task, rt: TaskRuntime) -> None:
        if rt.fresh:
            # A turn that an input's commit has just started (a request is waiting for
            # its answer) gives the loop back twice before it reads anything: on a
            # storage that answers without suspending (a Durable Object's) the request's
            # answer still takes turns of the loop (the ASGI bridge's future, then the
            # handler's task that workerd awaits). A resumed task has no such request,
            # and yielding there would put a recovery's first phase after every resumed
            # task's preparation (docs/performance.md, "Records are read-only").
            await asyncio.sleep(0)
            await asyncio.sleep(0)
        h = services()
        pinned = await _prepare_phase(h, task, rt)
        if pinned is not None:
            # Pinned without a commit: send it now. The response's commit (an answer, a
            # tool round, a wait) is this phase's durable progress; its span is the
            # ``request`` phase's, as when the pin is committed.
            with phase_span(h.session.telemetry, task, "request"):
                await _send_request(h, rt, pinned)

    async def request(task: Task, rt: TaskRuntime) -> None:
        await _request_phase(services(), task, rt)

    async def retry(task: Task, rt: TaskRuntime) -> None:
        cp = _checkpoint_copy(task)

        async def resend(tx: Tx, current: Task) -> JsonObject:
            live = await tx.doc(LIVE, rt.conversation_id)
            gen = _live_section(live, "generation")
            gen.pop("retry", None)
            return {**cp, "phase": "request"}

        await rt.commit(resend)

    async def poll(task: Task, rt: TaskRuntime) -> None:
        await _poll_phase(services(), task, rt)

    async def tools(task: Task, rt: TaskRuntime) -> None:
        await _tools_phase(services(), task, rt)

    async def abort(task: Task, rt: TaskRuntime) -> None:
        h = services()
        cp = task.checkpoint or {}
        if cp.get("phase") == "poll":
            try:
                await h.models.cancel_deferred(str(cp.get("model")), cp.get("handle"))
            except Exception as e:  # the run ends aborted either way
                h.report(e)

        async def settle(tx: Tx, current: Task) -> Aborted:
            await _end_run(h, tx, current, reason="aborted")
            return Aborted("aborted")

        await rt.commit(settle)

    return define_task(
        GENERATION,
        phases={
            "prepare": prepare,
            "request": request,
            "retry": retry,
            "poll": poll,
            "tools": tools,
        },
        initial=lambda _input: {"phase": "prepare", "attempt": 1},
        abort=abort,
    )
