"""The scheduler: reserves runnable tasks and runs their phases, driven by commits.

No polling. Every commit that touches a task, every registry change, every invocation
end and every due timer *kicks* one coalesced drain, scheduled on the loop (never
nested inside a commit listener). A drain is one commit that

1. derives what ownership implies: abort marks below owners with cancellation intent,
   marks on the remaining members of a failed ``fail_fast`` wait, and ``completing``
   tasks whose owned work has drained becoming terminal;
2. reserves every runnable task (status → ``running``) and starts one invocation each.

Before each phase a *step*, on the line, decides:

1. the task is not running → stop;
2. closing → stop (checkpoint and marks stay for the next open);
3. abort mark → end the run (an abort invocation runs the ``abort`` handler later,
   once the task's owned work is terminal: abort runs bottom-up);
4. the previous phase raised → ``faulted``;
5. the checkpoint changed → continue, or hand over (``pending``) to a replacement
   definition that can take the task;
6. the checkpoint did not change → ``faulted``: "returned without durable progress".

Definition resolution at reservation: missing → blocked ``missing_task``; older than
the record → blocked ``task_too_old``; newer → ``migrate`` (committed with the
reservation), failing → blocked ``migration_failed``. Blocked is derived, never
stored; only an abort ends it (→ ``orphaned``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Literal

from core.clock import Clock, TimerHandle
from core.errors import SessionClosed, StorageRejected, TaskNotFound, copy_error
from core.jsonvalue import JsonObject, JsonValue, json_copy, json_equal
from core.records import (
    Aborted,
    Completed,
    Completing,
    ErrorInfo,
    Faulted,
    Orphaned,
    Outcome,
    Pending,
    Running,
    Task,
    Terminal,
    Waiting,
)
from core.session.session import CommitEvent, Session, ensure_outside_commit
from core.session.transaction import Tx
from core.tasks.definition import TaskDefinition
from core.tasks.quiet import quiet
from core.tasks.registry import TaskSource
from core.tasks.runtime import TaskRuntime, _detached
from core.tasks.signal import CancelSignal

__all__ = ["Inspection", "Scheduler", "SettleHook", "TaskView"]

SettleHook = Callable[[Tx, Task], Awaitable[None]]
"""Called in the commit where the *scheduler* settles a task (fault, orphan, default
abort, completing → terminal), with the record as staged."""

Mode = Literal["run", "abort"]


@dataclass(slots=True)
class _Invocation:
    task_id: int
    mode: Mode
    definition: TaskDefinition
    runtime: TaskRuntime
    signal: CancelSignal
    done: asyncio.Future[None]
    job: asyncio.Task[None] | None = None


@dataclass(frozen=True, slots=True)
class _Resolution:
    definition: TaskDefinition | None
    blocked: str | None = None
    migrated: tuple[JsonValue, JsonObject] | None = None


@dataclass(frozen=True, slots=True)
class TaskView:
    """A live task as :meth:`Scheduler.inspect` derives it, without running task code.

    ``state``: ``running`` (an invocation holds it), ``ready`` (with ``migrates``),
    ``waiting`` (on tasks and/or a time), ``completing``, or ``blocked`` with a reason.
    """

    record: Task
    state: Literal["running", "ready", "waiting", "completing", "blocked"]
    reason: str | None = None
    migrates: bool = False
    waiting_on: tuple[int, ...] = ()
    until: int | None = None


@dataclass(frozen=True, slots=True)
class Inspection:
    scheduling: Literal["paused", "running", "closing"]
    tasks: list[TaskView] = field(default_factory=list)


class Scheduler:
    """Runs the tasks of one session: construct it, await its ``open`` method, then call
    ``resume``."""

    def __init__(
        self,
        session: Session,
        source: TaskSource,
        clock: Clock,
        *,
        report: Callable[[BaseException], None] | None = None,
    ) -> None:
        self.session = session
        self.source = source
        self.clock = clock
        self.report = report or session.report
        self.settle_hooks: list[SettleHook] = []
        self.reconcile_hooks: list[Callable[[Tx, list[Task]], Awaitable[None]]] = []
        """Run inside the open-time reconciliation commit with the tasks a crash left
        ``running`` (the harness notes what it is about to recover)."""
        self.harness: object = None
        """What task code reaches through ``TaskRuntime.harness`` (the harness sets itself)."""
        self.closing = False
        self._enabled = False
        self._dirty = False
        self._draining = False
        self._drain_job: asyncio.Task[None] | None = None
        self._invocations: dict[int, _Invocation] = {}
        self._outcomes: dict[int, Outcome] = {}
        self._failed_migrations: set[tuple[int, int]] = set()
        self._reported: set[tuple[int, str, int]] = set()
        self._timer: TimerHandle | None = None
        self._timer_at: int | None = None
        self._task_waiters: dict[int, list[asyncio.Future[Task]]] = {}
        self._idle_waiters: list[asyncio.Future[None]] = []
        self._unsubscribe = [session.subscribe(self._on_commit), source.subscribe(self.kick)]
        session.before_commit.append(self._reserve_eagerly)
        session.poison_listeners.append(self._fail_waiters)

    # ------------------------------------------------------------------ lifecycle

    async def open(self) -> None:
        """Open-time reconciliation, in one commit: ``running`` → ``pending`` (a crash left
        them; checkpoint, memos and abort mark are kept), then the derived marks and
        finalizations a crash may have left unapplied. Runs no task code."""
        await self._prefetch_outcomes()

        async def reconcile(tx: Tx) -> None:
            interrupted = [t for t in self.session.tasks.values() if isinstance(t.state, Running)]
            for hook in self.reconcile_hooks:  # before the writes: a hook may read tables
                await hook(tx, interrupted)
            for task in interrupted:
                assert isinstance(task.state, Running)
                await tx.put_task(task.evolve(state=Pending(task.state.checkpoint)))
            await self._derive(tx)

        await self.session.commit(reconcile)

    def _fail_waiters(self, error: BaseException) -> None:
        """Closed or poisoned: no task will settle in this session any more."""
        for task_futures in self._task_waiters.values():
            for fut in task_futures:
                if not fut.done():
                    fut.set_exception(copy_error(error))
        for idle in self._idle_waiters:
            if not idle.done():
                idle.set_exception(copy_error(error))
        self._task_waiters.clear()
        self._idle_waiters.clear()

    def resume(self) -> None:
        """Enable scheduling (idempotent)."""
        if self.closing:
            raise SessionClosed("the scheduler is closed")
        self._enabled = True
        self.kick()

    @property
    def enabled(self) -> bool:
        return self._enabled

    def kick(self) -> None:
        """Ask for a drain; coalesced with any drain already scheduled or running."""
        self._dirty = True
        if self._draining or not self._enabled or self.closing:
            return
        self._draining = True
        self._drain_job = asyncio.get_running_loop().create_task(self._drain())

    async def close(self) -> None:
        """Stop without writing outcomes: cancel every invocation and join it."""
        if self.closing:
            await self._join_all()
            return
        self.closing = True
        self._cancel_timer()
        self._fail_waiters(SessionClosed("the harness is closed"))
        for inv in list(self._invocations.values()):
            inv.signal.set("closing")
            if inv.job is not None:
                inv.job.cancel()
        await self._join_all()
        if self._drain_job is not None and not self._drain_job.done():
            await asyncio.wait([self._drain_job])
        for unsubscribe in self._unsubscribe:
            unsubscribe()
        if self._reserve_eagerly in self.session.before_commit:
            self.session.before_commit.remove(self._reserve_eagerly)

    async def _join_all(self) -> None:
        while self._invocations:
            await asyncio.wait([inv.done for inv in self._invocations.values()])

    # ------------------------------------------------------------------ drains

    async def _drain(self) -> None:
        try:
            while self._dirty and self._enabled and not self.closing:
                self._dirty = False
                if quiet(self.session.tasks, self._invocations, self._ready, self.clock.now()):
                    continue  # most kicks: a commit whose successors were reserved eagerly
                await self._prefetch_outcomes()
                try:
                    reservations = await self.session.commit(self._reserve)
                except StorageRejected as e:
                    # Retried on the next wake-up (any commit, timer or invocation end).
                    self.report(e)
                    break
                for inv in reservations:
                    self._start(inv)
        except SessionClosed:
            pass
        except Exception as e:
            self.report(e)
        finally:
            self._draining = False
            if not self.closing:
                self._arm_timer()
                if self._dirty and self._enabled:
                    self.kick()

    async def _reserve(self, tx: Tx) -> list[_Invocation]:
        now = tx.now()
        await self._derive(tx)
        view = self._view(tx)
        owned = self._owned(view, tx)
        out: list[_Invocation] = []
        for task in sorted(view.values(), key=lambda t: t.id):
            state = task.state
            # A running task without an invocation is one whose run ended at an abort mark
            # (or failed to record its step): it is reserved again like any other.
            if task.id in self._invocations or isinstance(state, Completing):
                continue
            mode: Mode
            if task.abort_requested:
                if task.id in owned:
                    continue  # children abort first
                mode = "abort"
            else:
                if isinstance(state, Waiting) and not self._ready(task, now, view):
                    continue
                mode = "run"
            res = self._resolve(task, run_migrations=True)
            if res.definition is None:
                if mode == "abort":
                    await self._settle(tx, task, Orphaned(res.blocked or "missing_task"))
                continue
            out.append(await self._reservation(tx, task, res, mode, now))
        return out

    async def _reservation(
        self, tx: Tx, task: Task, res: _Resolution, mode: Mode, now: int, *, fresh: bool = False
    ) -> _Invocation:
        """Stage ``running`` (with a migrated input and checkpoint) and build the
        invocation that starts once the commit is durable; ``fresh``: the task is
        created by this very commit, so no invocation can have run it before."""
        assert res.definition is not None
        checkpoint = task.checkpoint
        assert checkpoint is not None
        value = task.input
        if res.migrated is not None:
            value, checkpoint = res.migrated
        reserved = task.evolve(
            input=value,
            version=res.definition.version,
            state=Running(checkpoint),
            started_at=task.started_at if task.started_at is not None else now,
        )
        await tx.put_task(reserved)
        signal = CancelSignal()
        return _Invocation(
            task_id=task.id,
            mode=mode,
            definition=res.definition,
            runtime=TaskRuntime(
                self, task.id, task.conversation_id, res.definition, mode, signal, fresh=fresh
            ),
            signal=signal,
            done=asyncio.get_running_loop().create_future(),
        )

    async def _reserve_eagerly(self, tx: Tx) -> None:
        """Reserve, in the commit that makes them runnable, the tasks it creates and the
        waiters whose last awaited task it settles — one commit instead of two for every
        child task and every resumed waiter. Anything unusual (abort marks, migrations,
        blocked tasks, timers) is left to the next drain."""
        if not self._enabled or self.closing:
            return
        view = self._view(tx)
        settled = {t.id for t in tx.tasks.values() if isinstance(t.state, Terminal)}
        candidates = [t for t in tx.tasks.values() if t.id in view]
        if settled:
            # Committed waiters from the session's index; the view's (maybe staged) record decides.
            for waiter_id in sorted({w for s in settled for w in self.session.waiting_on(s)}):
                t = view.get(waiter_id)
                if t and isinstance(t.state, Waiting) and settled.intersection(t.state.on):
                    candidates.append(t)
        now = tx.now()
        started: list[_Invocation] = []
        for task in candidates:
            current = view.get(task.id)
            if (
                current is None
                or current.id in self._invocations
                or current.abort_requested
                or not isinstance(current.state, Waiting | Pending)
                or (isinstance(current.state, Waiting) and not self._ready(current, now, view))
                or any(inv.task_id == current.id for inv in started)
            ):
                continue
            res = self._resolve(current, run_migrations=False)
            if res.definition is None or res.definition.version != current.version:
                continue
            fresh = current.id not in self.session.tasks  # created by this commit
            started.append(await self._reservation(tx, current, res, "run", now, fresh=fresh))
            view = self._view(tx)
        if started:

            def start_all() -> None:
                for inv in started:
                    self._start(inv)

            tx.after_commit.append(start_all)

    async def _derive(self, tx: Tx) -> None:
        """Stage what ownership implies (see the module docstring, drain step 1)."""
        view = self._view(tx)
        for task in sorted(view.values(), key=lambda t: t.id):
            if task.abort_requested or task.background:
                continue
            if any(_cancel_intent(o) for o in self.session.owners(task, tx.tasks)):
                await tx.put_task(task.evolve(abort_requested=True))
        view = self._view(tx)
        for waiter in list(view.values()):
            state = waiter.state
            if not isinstance(state, Waiting) or state.policy != "fail_fast":
                continue
            if waiter.abort_requested or not any(self._failed(m, view) for m in state.on):
                continue
            for member in state.on:
                other = view.get(member)
                if other is not None and not other.abort_requested:
                    await tx.put_task(other.evolve(abort_requested=True))
        # Finalize held outcomes bottom-up until nothing changes.
        changed = True
        while changed:
            changed = False
            view = self._view(tx)
            owned = self._owned(view, tx)
            for task in view.values():
                if isinstance(task.state, Completing) and task.id not in owned:
                    await self._settle(tx, task, task.state.outcome)
                    changed = True

    async def _settle(self, tx: Tx, task: Task, outcome: Outcome) -> None:
        """Write a scheduler outcome: ``completing`` if owned work is live, else terminal."""
        state = tx.settle_state(task, outcome)
        ended = tx.now() if isinstance(state, Terminal) else task.ended_at
        staged = await tx.put_task(task.evolve(state=state, ended_at=ended))
        if isinstance(state, Terminal):
            for hook in self.settle_hooks:
                await hook(tx, staged)

    # ------------------------------------------------------------------ invocations

    def _start(self, inv: _Invocation) -> None:
        self._invocations[inv.task_id] = inv
        inv.job = asyncio.get_running_loop().create_task(self._invoke(inv))
        # A job cancelled before its first step never runs ``_invoke``'s ``finally``:
        # without this callback close() would wait for its ``done`` forever.
        inv.job.add_done_callback(lambda _job: self._ended(inv))

    def _ended(self, inv: _Invocation) -> None:
        """The invocation is over (idempotent)."""
        inv.runtime.ended = True
        if self._invocations.get(inv.task_id) is inv:
            del self._invocations[inv.task_id]
        if not inv.done.done():
            inv.done.set_result(None)

    async def _invoke(self, inv: _Invocation) -> None:
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
            # running without an invocation and is reserved again at the next wake-up —
            # not at once, which would spin on a failure that persists.
            healthy = False
            self.report(e)
        finally:
            self._ended(inv)
            if healthy:
                self.kick()

    async def _run(self, inv: _Invocation) -> None:
        previous: tuple[JsonObject, str, BaseException | None] | None = None
        while True:
            task = self._step_without_writes(inv, previous)
            if isinstance(task, _NeedsLine):
                task = await self.session.commit(partial(self._step, inv=inv, previous=previous))
            if task is None:
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
                attributes: dict[str, str | int | float | bool] = {
                    "perdure.task.id": task.id,
                    "perdure.task.kind": task.kind,
                }
                if task.owner is not None:
                    attributes["perdure.task.owner"] = task.owner
                span = self.session.telemetry.span(f"{task.kind} {phase}", attributes)
                with span:
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

    def _step_without_writes(
        self,
        inv: _Invocation,
        previous: tuple[JsonObject, str, BaseException | None] | None,
    ) -> Task | _NeedsLine | None:
        """The step's common outcomes, which write nothing, decided on committed state
        without taking the line: stop, or continue with the next phase. A decision that
        writes (a fault, a hand-over) is :meth:`_step`'s, on the line (``_NEEDS_LINE``).
        Reading outside the line sees the state before or after any commit landing
        meanwhile, never part of one: the same choice a step queued behind it makes."""
        self.session.check_open()  # as the line would refuse: closed or poisoned
        rec = self.session.tasks.get(inv.task_id)
        if rec is None or not isinstance(rec.state, Running) or self.closing:
            return None
        if rec.abort_requested:
            return None
        if previous is not None:
            checkpoint, _phase, error = previous
            if error is not None or json_equal(rec.state.checkpoint, checkpoint):
                return _NEEDS_LINE
            if self.source.task(rec.kind) is not inv.definition:
                return _NEEDS_LINE
        return _detached(rec)

    async def _step(
        self,
        tx: Tx,
        inv: _Invocation,
        previous: tuple[JsonObject, str, BaseException | None] | None,
    ) -> Task | None:
        rec = self.session.tasks.get(inv.task_id)
        if rec is None or not isinstance(rec.state, Running) or self.closing:
            return None
        if rec.abort_requested:
            return None
        if previous is not None:
            checkpoint, phase, error = previous
            if error is not None:
                await self._settle(tx, rec, Faulted(_error_info(error)))
                return None
            if json_equal(rec.state.checkpoint, checkpoint):
                message = f"Task {rec.kind} phase {phase} returned without durable progress"
                await self._settle(tx, rec, Faulted(ErrorInfo(message)))
                return None
            current = self.source.task(rec.kind)
            if current is not inv.definition:
                if current is not None and current.can_take(rec.version):
                    await tx.put_task(rec.evolve(state=Pending(rec.state.checkpoint)))
                    return None
                reason = "missing_task" if current is None else "incompatible_task"
                self._report_once(
                    rec.id,
                    reason,
                    current,
                    f"Task {rec.id}: {reason}; it keeps running on its current definition",
                )
        return _detached(rec)

    async def _abort(self, inv: _Invocation) -> None:
        rec = self.session.tasks.get(inv.task_id)
        if rec is None:
            return
        error: BaseException | None = None
        try:
            if inv.definition.abort is not None:
                ensure_outside_commit(f"the abort handler of task {rec.id}")
                await inv.definition.abort(_detached(rec), inv.runtime)
            else:
                await self.session.commit(partial(self._abort_by_default, inv.task_id))
        except asyncio.CancelledError:
            raise
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as e:  # any escape from task code faults it
            error = e

        async def step(tx: Tx) -> None:
            now = self.session.tasks.get(inv.task_id)
            if now is None or isinstance(now.state, Completing) or self.closing:
                return
            if error is not None:
                await self._settle(tx, now, Faulted(_error_info(error)))
            else:
                message = f"Abort handler of task {inv.task_id} returned without a terminal outcome"
                await self._settle(tx, now, Faulted(ErrorInfo(message)))

        await self.session.commit(step)

    async def _abort_by_default(self, task_id: int, tx: Tx) -> None:
        """No abort handler: the scheduler writes ``aborted`` itself, through
        :meth:`_settle`, so the settle hooks run as for any outcome it writes (the
        harness clears what the task noted, such as a compaction's note in ``live``)."""
        now = self.session.tasks.get(task_id)
        if now is None or isinstance(now.state, Completing) or self.closing:
            return
        await self._settle(tx, now, Aborted())

    # ------------------------------------------------------------------ commits in

    def _on_commit(self, event: CommitEvent) -> None:
        if not event.tasks:
            return
        for task in event.tasks:
            if isinstance(task.state, Terminal):
                self._outcomes[task.id] = task.state.outcome
                for fut in self._task_waiters.pop(task.id, []):
                    if not fut.done():
                        fut.set_result(task)
            if task.abort_requested:
                inv = self._invocations.get(task.id)
                if inv is not None and inv.mode == "run" and not inv.signal.cancelled:
                    inv.signal.set("aborted")
                    if inv.job is not None:
                        inv.job.cancel()
        if self._idle_waiters and self.idle():
            for idle in self._idle_waiters:
                if not idle.done():
                    idle.set_result(None)
            self._idle_waiters.clear()
        self.kick()

    # ------------------------------------------------------------------ public API

    async def wait_for_task(self, task_id: int) -> Task:
        """Wait until the task is terminal and return its record. Enables scheduling.

        Cancelling this wait cancels only the wait, never the task.
        """
        rec = self.session.tasks.get(task_id)
        if rec is None:
            stored = await self.session.task(task_id)
            if stored is None:
                raise TaskNotFound(f"Task {task_id} does not exist")
            if isinstance(stored.state, Terminal):
                return stored
        if self.closing:
            raise SessionClosed("the harness is closed")
        self.session.check_open()  # poisoned: it would never settle here
        fut: asyncio.Future[Task] = asyncio.get_running_loop().create_future()
        self._task_waiters.setdefault(task_id, []).append(fut)
        self.resume()
        try:
            return await fut
        finally:
            waiters = self._task_waiters.get(task_id)
            if waiters and fut in waiters:
                waiters.remove(fut)

    def idle(self) -> bool:
        """No live foreground work: every live task is background or below a background owner."""
        return not any(self._foreground(t) for t in self.session.tasks.values())

    def _foreground(self, task: Task) -> bool:
        return not task.background and not any(o.background for o in self.session.owners(task))

    async def wait_for_idle(self) -> None:
        """Wait until :meth:`idle`. Enables scheduling; cancelling only cancels the wait."""
        if self.idle():
            return
        if self.closing:
            raise SessionClosed("the harness is closed")
        self.session.check_open()  # poisoned: it would never become idle here
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._idle_waiters.append(fut)
        self.resume()
        try:
            await fut
        finally:
            if fut in self._idle_waiters:
                self._idle_waiters.remove(fut)

    async def abort_task(self, task_id: int) -> Literal["marked", "terminal", "orphaned"]:
        """Mark a task for abort (durably) and join its run invocation.

        A blocked task that nothing runs is settled ``orphaned`` at once.
        """

        async def mark(tx: Tx) -> Literal["marked", "terminal", "orphaned"]:
            rec = self.session.tasks.get(task_id)
            if rec is None:
                if await tx.task(task_id) is None:
                    raise TaskNotFound(f"Task {task_id} does not exist")
                return "terminal"
            if rec.abort_requested:
                return "marked"
            marked = rec.evolve(abort_requested=True)
            blocked = self._resolve(rec, run_migrations=False).blocked
            if (
                blocked is not None
                and task_id not in self._invocations
                and not isinstance(rec.state, Completing)
                and not tx.has_owned_live_work(task_id)
            ):
                await self._settle(tx, marked, Orphaned(blocked))
                return "orphaned"
            await tx.put_task(marked)
            return "marked"

        result = await self.session.commit(mark)
        inv = self._invocations.get(task_id)
        if inv is not None and inv.mode == "run":
            await asyncio.shield(inv.done)
        return result

    def next_wake(self) -> int | None:
        """When a host must wake this session: ``None`` (nothing to do), the current
        time (something can run now) or the earliest ``until`` of a live wait."""
        if self.closing:
            return None
        now = self.clock.now()
        if any(task_id in self.session.tasks for task_id in self._invocations):
            return now  # work in progress (an invocation of a settled task is only unwinding)
        view = dict(self.session.tasks)
        owned = self._owned(view, None)
        earliest: int | None = None
        for task in view.values():
            state = task.state
            if isinstance(state, Completing):
                if task.id not in owned:
                    return now
                continue
            if task.abort_requested:
                if task.id not in owned:
                    return now
                continue
            if self._resolve(task, run_migrations=False).blocked is not None:
                continue
            if isinstance(state, Waiting):
                if self._ready(task, now, view):
                    return now
                if state.until is not None and state.until > now:
                    earliest = state.until if earliest is None else min(earliest, state.until)
                continue
            return now
        return earliest

    def inspect(self) -> Inspection:
        """Derive the state of every live task without running task code."""
        scheduling: Literal["paused", "running", "closing"] = (
            "closing" if self.closing else "running" if self._enabled else "paused"
        )
        now = self.clock.now()
        view = dict(self.session.tasks)
        out: list[TaskView] = []
        for task in sorted(view.values(), key=lambda t: t.id):
            state = task.state
            if task.id in self._invocations or isinstance(state, Running):
                out.append(TaskView(task, "running"))
            elif isinstance(state, Completing):
                out.append(TaskView(task, "completing"))
            else:
                res = self._resolve(task, run_migrations=False)
                if res.blocked is not None:
                    out.append(TaskView(task, "blocked", reason=res.blocked))
                elif isinstance(state, Waiting) and not self._ready(task, now, view):
                    live_on = tuple(m for m in state.on if m in view)
                    out.append(TaskView(task, "waiting", waiting_on=live_on, until=state.until))
                else:
                    migrates = res.definition is not None and res.definition.version > task.version
                    out.append(TaskView(task, "ready", migrates=migrates))
        return Inspection(scheduling, out)

    # ------------------------------------------------------------------ derivations

    def _view(self, tx: Tx) -> dict[int, Task]:
        view = dict(self.session.tasks)
        for task in tx.tasks.values():
            if isinstance(task.state, Terminal):
                view.pop(task.id, None)
            else:
                view[task.id] = task
        return view

    def _owned(self, view: dict[int, Task], tx: Tx | None) -> set[int]:
        """Ids of tasks that have live ordinary work below them."""
        staged = tx.tasks if tx is not None else None
        owners: set[int] = set()
        for task in view.values():
            if task.background:
                continue
            owners.update(o.id for o in self.session.owners(task, staged))
        return owners

    def _failed(self, task_id: int, view: dict[int, Task]) -> bool:
        if task_id in view:
            return False
        outcome = self._outcomes.get(task_id)
        return outcome is not None and not isinstance(outcome, Completed)

    def _ready(self, task: Task, now: int, view: dict[int, Task]) -> bool:
        state = task.state
        assert isinstance(state, Waiting)
        if state.until is not None and now < state.until:
            return False
        if all(m not in view for m in state.on):
            return True
        return state.policy == "fail_fast" and any(self._failed(m, view) for m in state.on)

    def _resolve(self, task: Task, *, run_migrations: bool) -> _Resolution:
        defn = self.source.task(task.kind)
        if defn is None:
            return _Resolution(None, "missing_task")
        if defn.version < task.version:
            return _Resolution(None, "task_too_old")
        if defn.version == task.version:
            return _Resolution(defn)
        key = (task.id, id(defn))
        if defn.migrate is None or key in self._failed_migrations:
            if defn.migrate is None:
                self._report_once(
                    task.id,
                    "migration_failed",
                    defn,
                    f"Task kind {task.kind} has no migration from {task.version}",
                )
            return _Resolution(None, "migration_failed")
        if not run_migrations:
            return _Resolution(defn)
        checkpoint = task.checkpoint
        assert checkpoint is not None
        try:
            new_input, new_checkpoint = defn.migrate(
                json_copy(task.input),
                dict(checkpoint),
                task.version,
            )
            migrated = (json_copy(new_input), defn.checkpoint(new_checkpoint))
        except Exception as e:
            self._failed_migrations.add(key)
            self.report(e)
            return _Resolution(None, "migration_failed")
        return _Resolution(defn, migrated=migrated)

    def _report_once(self, task_id: int, reason: str, defn: object, message: str) -> None:
        key = (task_id, reason, id(defn))
        if key not in self._reported:
            self._reported.add(key)
            self.report(RuntimeError(message))

    async def _prefetch_outcomes(self) -> None:
        """Load the outcomes of settled members of live ``fail_fast`` waits (after a
        reopen they are not in memory), so deriving readiness stays synchronous."""
        for task in list(self.session.tasks.values()):
            state = task.state
            if not isinstance(state, Waiting) or state.policy != "fail_fast":
                continue
            for member in state.on:
                if member in self.session.tasks or member in self._outcomes:
                    continue
                rec = await self.session.task(member)
                if rec is not None and isinstance(rec.state, Terminal):
                    self._outcomes[member] = rec.state.outcome
        if len(self._outcomes) > 4096:
            wanted = {
                m
                for t in self.session.tasks.values()
                if isinstance(t.state, Waiting)
                for m in t.state.on
            }
            self._outcomes = {k: v for k, v in self._outcomes.items() if k in wanted}

    # ------------------------------------------------------------------ timers

    def _arm_timer(self) -> None:
        now = self.clock.now()
        earliest: int | None = None
        for task in self.session.tasks.values():
            state = task.state
            if isinstance(state, Waiting) and state.until is not None and state.until > now:
                earliest = state.until if earliest is None else min(earliest, state.until)
        if earliest == self._timer_at:
            return
        self._cancel_timer()
        if earliest is not None:
            self._timer_at = earliest
            self._timer = self.clock.call_at(earliest, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = None
        self.kick()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = None
        self._timer_at = None


class _NeedsLine:
    """The step must decide on the line (see ``Scheduler._step_without_writes``)."""


_NEEDS_LINE = _NeedsLine()


def _cancel_intent(task: Task) -> bool:
    """An owner whose work below it must stop: abort-marked, or holding a failed outcome."""
    if task.abort_requested:
        return True
    state = task.state
    return isinstance(state, Completing) and not isinstance(state.outcome, Completed)


def _error_info(error: BaseException) -> ErrorInfo:
    return ErrorInfo(str(error) or type(error).__name__, {"type": type(error).__name__})
