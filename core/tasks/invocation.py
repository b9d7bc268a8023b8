"""Invocations: running one task's phases (or its abort handler) after a reservation.

A reservation (the scheduler's, on the line) hands an :class:`Invocation` to
:meth:`Invocations.start`, which runs it as an asyncio task once the reserving commit is
durable. Before each phase a *step* decides what follows
(:func:`core.tasks.decisions.next_step`): the common outcomes, which write nothing, are
decided on committed state without taking the line; a fault or a hand-over is staged on
the line. Task code never runs inside a commit.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Protocol

from core.errors import SessionClosed
from core.records import Aborted, Completing, ErrorInfo, Faulted, Outcome, Pending, Task
from core.session.session import ensure_outside_commit
from core.session.transaction import Tx
from core.tasks.decisions import Mode, Previous, Step, error_info, next_step
from core.tasks.definition import TaskDefinition
from core.tasks.registry import TaskSource
from core.tasks.runtime import Runner, TaskRuntime, _detached
from core.tasks.signal import CancelSignal
from core.telemetry import phase_span

__all__ = ["Driver", "Invocation", "Invocations"]


class Driver(Runner, Protocol):
    """What invocations need of the scheduler that reserves them."""

    @property
    def source(self) -> TaskSource: ...

    @property
    def report(self) -> Callable[[BaseException], None]:
        """Where failures that are no task's outcome go (the host's logger)."""
        ...

    def ended(self, task_id: int, *, healthy: bool) -> None:
        """An invocation of the task ended: something may be runnable. ``healthy``: it
        ended as task code or a cancellation ended it; otherwise its step failed (a
        rejected commit, say), and the task is looked at again only at the next wake-up
        (any commit, timer or invocation end), not at once, which would spin on a
        failure that persists."""
        ...

    async def settle(self, tx: Tx, task: Task, outcome: Outcome) -> None:
        """Stage a scheduler-written outcome (``completing`` while owned work is live)."""
        ...

    def report_once(self, task_id: int, reason: str, defn: object, message: str) -> None:
        """Report ``message`` once per task, reason and definition."""
        ...


@dataclass(slots=True)
class Invocation:
    task_id: int
    mode: Mode
    definition: TaskDefinition
    runtime: TaskRuntime
    signal: CancelSignal
    done: asyncio.Future[None]
    job: asyncio.Task[None] | None = None
    begun: bool = False
    """The job has taken its first step (``_invoke`` runs, so its ``finally`` will)."""
    watched: bool = False
    """A done callback ends the invocation should the job never take that step."""


class Invocations:
    """The invocations of one scheduler, by task id (at most one per task)."""

    def __init__(self, driver: Driver) -> None:
        self.driver = driver
        self.running: dict[int, Invocation] = {}

    def build(
        self, task: Task, definition: TaskDefinition, mode: Mode, *, fresh: bool = False
    ) -> Invocation:
        """The invocation a reservation of ``task`` starts once its commit is durable."""
        signal = CancelSignal()
        return Invocation(
            task_id=task.id,
            mode=mode,
            definition=definition,
            runtime=TaskRuntime(
                self.driver, task.id, task.conversation_id, definition, mode, signal, fresh=fresh
            ),
            signal=signal,
            done=asyncio.get_running_loop().create_future(),
        )

    def start(self, inv: Invocation) -> None:
        self.running[inv.task_id] = inv
        inv.job = asyncio.get_running_loop().create_task(self._invoke(inv))

    def abort_marked(self, task_id: int) -> None:
        """A durable abort mark landed on the task: stop its run invocation."""
        inv = self.running.get(task_id)
        if inv is not None and inv.mode == "run" and not inv.signal.cancelled:
            inv.signal.set("aborted")
            self._cancel(inv)

    def cancel_all(self, reason: str) -> None:
        for inv in list(self.running.values()):
            inv.signal.set(reason)
            self._cancel(inv)

    def _cancel(self, inv: Invocation) -> None:
        job = inv.job
        if job is None:
            return
        job.cancel()
        if not inv.begun and not inv.watched:
            # Cancelled before its first step, the job never runs ``_invoke`` (nor its
            # ``finally``): only then does its end need a done callback. A job that has
            # begun ends through that ``finally``; a done callback on every job cost a
            # loop callback per invocation (two per tool round).
            inv.watched = True
            job.add_done_callback(lambda _job: self._job_done(inv))

    async def join_all(self) -> None:
        while self.running:
            await asyncio.wait([inv.done for inv in self.running.values()])

    def _job_done(self, inv: Invocation) -> None:
        # A job cancelled before its first step (an abort mark landing in the same loop
        # step as the reservation) never runs ``_invoke``'s ``finally``: without this,
        # close() would wait for its ``done`` forever, and nothing would kick the drain
        # that must now reserve the task again (its abort, say).
        if self._ended(inv):
            self.driver.ended(inv.task_id, healthy=True)

    def _ended(self, inv: Invocation) -> bool:
        """The invocation is over (idempotent); whether this call ended it."""
        inv.runtime.ended = True
        ending = self.running.get(inv.task_id) is inv
        if ending:
            del self.running[inv.task_id]
        if not inv.done.done():
            inv.done.set_result(None)
        return ending

    async def _invoke(self, inv: Invocation) -> None:
        inv.begun = True
        healthy = True
        try:
            if inv.mode == "run":
                await self._run(inv)
            else:
                await self._abort(inv)
        except asyncio.CancelledError:
            pass  # we cancelled it (abort or close); the durable state says what is next
        except SessionClosed:
            pass
        except Exception as e:
            # The step itself failed (its commit was rejected, say). The task stays
            # running without an invocation and is reserved again at the next wake-up.
            healthy = False
            self.driver.report(e)
        finally:
            self._ended(inv)
            self.driver.ended(inv.task_id, healthy=healthy)

    async def _run(self, inv: Invocation) -> None:
        session = self.driver.session
        previous: Previous | None = None
        while True:
            task = self._step_without_writes(inv, previous)
            if task is _NEEDS_LINE:
                task = await session.commit(partial(self._step, inv=inv, previous=previous))
            if not isinstance(task, Task):
                return
            checkpoint = task.checkpoint
            assert checkpoint is not None
            phase = str(checkpoint["phase"])
            handler = inv.definition.phases.get(phase)
            error: BaseException | None = None
            try:
                if handler is None:
                    raise LookupError(f"task {task.kind} has no phase {phase!r}")
                ensure_outside_commit(f"phase {phase} of task {task.id}")
                with phase_span(session.telemetry, task, phase):
                    await handler(task, inv.runtime)
            except asyncio.CancelledError as e:
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise
                error = e  # a handler-internal cancellation is a fault, not ours
            except (KeyboardInterrupt, SystemExit):
                raise
            except BaseException as e:  # any escape from task code faults it
                error = e
            previous = (checkpoint, phase, error)

    def _next_step(
        self, inv: Invocation, previous: Previous | None
    ) -> tuple[Task | None, Step, TaskDefinition | None]:
        """The committed record, the step it implies, and the kind's current definition
        (looked up only after a phase: the first step of an invocation runs the one its
        reservation resolved)."""
        rec = self.driver.session.tasks.get(inv.task_id)
        current: TaskDefinition | None = inv.definition
        if rec is not None and previous is not None:
            current = self.driver.source.task(rec.kind)
        step = next_step(
            rec,
            closing=self.driver.closing,
            previous=previous,
            definition=inv.definition,
            current=current,
        )
        return rec, step, current

    def _step_without_writes(self, inv: Invocation, previous: Previous | None) -> object:
        """The step's common outcomes, which write nothing, decided on committed state
        without taking the line: stop (``None``), or continue with the next phase (the
        record). A decision that writes (a fault, a hand-over) or reports is
        :meth:`_step`'s, on the line (``_NEEDS_LINE``). Reading outside the line sees the
        state before or after any commit landing meanwhile, never part of one: the same
        choice a step queued behind it makes."""
        self.driver.session.check_open()  # as the line would refuse: closed or poisoned
        rec, step, _current = self._next_step(inv, previous)
        if step.writes:
            return _NEEDS_LINE
        if step.action == "stop" or rec is None:
            return None
        return _detached(rec)

    async def _step(self, tx: Tx, inv: Invocation, previous: Previous | None) -> Task | None:
        rec, step, current = self._next_step(inv, previous)
        if rec is None or step.action == "stop":
            return None
        if step.action == "fault":
            assert step.error is not None
            await self.driver.settle(tx, rec, Faulted(step.error))
            return None
        if step.action == "hand_over":
            assert rec.checkpoint is not None
            await tx.put_task(rec.evolve(state=Pending(rec.checkpoint)))
            return None
        if step.stray is not None:
            self.driver.report_once(
                rec.id,
                step.stray,
                current,
                f"Task {rec.id}: {step.stray}; it keeps running on its current definition",
            )
        return _detached(rec)

    async def _abort(self, inv: Invocation) -> None:
        session = self.driver.session
        rec = session.tasks.get(inv.task_id)
        if rec is None:
            return
        error: BaseException | None = None
        try:
            if inv.definition.abort is not None:
                ensure_outside_commit(f"the abort handler of task {rec.id}")
                await inv.definition.abort(_detached(rec), inv.runtime)
            else:
                await session.commit(partial(self._abort_by_default, inv.task_id))
        except asyncio.CancelledError:
            raise
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as e:  # any escape from task code faults it
            error = e

        async def step(tx: Tx) -> None:
            now = session.tasks.get(inv.task_id)
            if now is None or isinstance(now.state, Completing) or self.driver.closing:
                return
            if error is not None:
                await self.driver.settle(tx, now, Faulted(error_info(error)))
            else:
                message = f"Abort handler of task {inv.task_id} returned without a terminal outcome"
                await self.driver.settle(tx, now, Faulted(ErrorInfo(message)))

        await session.commit(step)

    async def _abort_by_default(self, task_id: int, tx: Tx) -> None:
        """No abort handler: the scheduler writes ``aborted`` itself, through its
        ``settle``, so ``on_settled`` runs as for any outcome it writes (the harness
        clears what the task noted, such as a compaction's note in ``live``)."""
        now = self.driver.session.tasks.get(task_id)
        if now is None or isinstance(now.state, Completing) or self.driver.closing:
            return
        await self.driver.settle(tx, now, Aborted())


_NEEDS_LINE = object()
"""The step must be decided on the line (see ``Invocations._step_without_writes``)."""
