"""The scheduler: reserves runnable tasks and runs their phases, driven by commits.

No polling. Every commit that touches a task, every registry change, every invocation
end and every due timer asks for a drain; a drain runs as a task on the loop (never
nested inside a commit listener), coalesced with any drain already running, and only
if it has something to do: the tasks that commit, end or timer touched are checked at
once (:func:`decisions.needs_line`), and most commits — whose successors were reserved
eagerly — need none. What is checked is what changed, not every live task: each check
costs the same however many tasks are live. A drain is one commit that

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

What each step decides is computed from records and the clock alone in
:mod:`core.tasks.decisions`; running an invocation is :mod:`core.tasks.invocation`'s;
this module is the loop: drains, eager reservations, waiters and timers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Literal

from core.clock import Clock, TimerHandle
from core.errors import SessionClosed, StorageRejected, TaskNotFound
from core.jsonvalue import json_copy
from core.records import Completing, Orphaned, Outcome, Pending, Running, Task, Terminal, Waiting
from core.session.session import CommitEvent, Session
from core.session.transaction import TaskLayer, TaskSpec, Tx
from core.session.waiters import WaiterRegistry
from core.tasks import decisions
from core.tasks.creation import TaskFactory
from core.tasks.decisions import Inspection, Mode, Resolution, TaskView
from core.tasks.invocation import Driver, Invocation, Invocations
from core.tasks.outcomes import KnownOutcomes
from core.tasks.ownership import has_owned_live_work, owners, settle_state
from core.tasks.registry import TaskSource
from core.tasks.wakeups import Either, Wakeups

__all__ = ["Inspection", "ReconcileHook", "Scheduler", "SettleHook", "TaskView"]

SettleHook = Callable[[Tx, Task], Awaitable[None]]
"""Called in the commit where the *scheduler* settles a task (fault, orphan, default
abort, completing → terminal), with the record as staged."""

ReconcileHook = Callable[[Tx, list[Task]], Awaitable[None]]
"""Called inside the open-time reconciliation commit, before its writes (it may read
tables), with the tasks a crash left ``running``."""


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
        on_settled: SettleHook | None = None,
        on_reconcile: ReconcileHook | None = None,
    ) -> None:
        self.session = session
        self.source = source
        self.clock = clock
        self.report = report or session.report
        self.on_settled = on_settled
        """What the layer above does in the commit where the scheduler settles a task
        (the harness answers what the task left open)."""
        self.on_reconcile = on_reconcile
        """What the layer above does at open-time reconciliation (the harness notes what
        it is about to recover)."""
        self.harness: object = None
        """What task code reaches through ``TaskRuntime.harness`` (the harness sets itself)."""
        self.closing = False
        self._enabled = False
        self._dirty = False
        self._draining = False
        self._drain_job: asyncio.Task[None] | None = None
        self._wakeups = Wakeups()
        """The tasks commits, invocation ends and due timers touched, and timed waits."""
        self._runs = Invocations(self)
        self._outcomes = KnownOutcomes()
        # The definition a task's migration failed under, and each report's definition:
        # held, not keyed by ``id()``, which a later definition may reuse once the old
        # one is collected (a registry replaced), and then silently inherit the failure.
        self._failed_migrations: dict[int, object] = {}
        self._reported: dict[tuple[int, str], object] = {}
        self._timer: TimerHandle | None = None
        self._timer_at: int | None = None
        self._task_waiters: WaiterRegistry[int, Task] = session.waiters()
        """Callers waiting for a task to be terminal, by task id."""
        self._idle_waiters: WaiterRegistry[None, None] = session.waiters()
        """Callers waiting for :meth:`idle` (one key: ``None``)."""
        self._factory = TaskFactory(source.task)
        self._unsubscribe = [session.subscribe(self._on_commit), source.subscribe(self.kick)]

    # ------------------------------------------------------------------ lifecycle

    async def open(self) -> None:
        """Open-time reconciliation, in one commit: ``running`` → ``pending`` (a crash left
        them; checkpoint, memos and abort mark are kept), then the derived marks and
        finalizations a crash may have left unapplied. Runs no task code."""
        await self._prefetch_outcomes()

        async def reconcile(tx: Tx) -> None:
            interrupted = [t for t in self.session.tasks.values() if isinstance(t.state, Running)]
            if self.on_reconcile is not None:  # before the writes: it may read tables
                await self.on_reconcile(tx, interrupted)
            for task in interrupted:
                assert isinstance(task.state, Running)
                await tx.put_task(task.evolve(state=Pending(task.state.checkpoint)))
            await self._derive(tx)

        await self.session.commit(reconcile)

    def _fail_waiters(self, error: BaseException) -> None:
        """Closed (the session fails them if it is poisoned): no task will settle in
        this session any more."""
        self._task_waiters.fail_all(error)
        self._idle_waiters.fail_all(error)

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
        """Ask for a drain that looks at every live task; coalesced with any drain
        already scheduled or running."""
        self._wakeups.touch_all()
        self._request()

    def _request(self) -> None:
        self._dirty = True
        if self._draining or not self._enabled or self.closing:
            return
        self._draining = True
        self._drain_job = asyncio.get_running_loop().create_task(self._drain())

    def _check(self) -> None:
        """Start a drain only if the tasks touched since the last check need one: the
        common case (the successors of a commit were reserved in it) costs no task and
        no loop hop."""
        if self._draining:
            self._dirty = True  # the running drain checks again before it ends
            return
        if not self._enabled or self.closing:
            return
        if self._quiet(self.clock.now()):
            self._arm_timer()
        else:
            self._request()

    def ended(self, task_id: int, *, healthy: bool) -> None:
        """An invocation ended (see :meth:`Driver.ended`)."""
        self._wakeups.touch((task_id,))
        if healthy:
            self._check()

    async def close(self) -> None:
        """Stop without writing outcomes: cancel every invocation and join it."""
        if self.closing:
            await self._join_all()
            return
        self.closing = True
        self._cancel_timer()
        self._fail_waiters(SessionClosed("the harness is closed"))
        self._runs.cancel_all("closing")
        await self._join_all()
        if self._drain_job is not None and not self._drain_job.done():
            await asyncio.wait([self._drain_job])
        for unsubscribe in self._unsubscribe:
            unsubscribe()

    # ------------------------------------------------------------------ the task layer

    async def create_task(self, tx: Tx, spec: TaskSpec) -> Task:
        """Stage a new task whose kind this scheduler's source resolves (see
        :meth:`Tx.create_task`, which the session routes here)."""
        return await self._factory.create_task(tx, spec)

    async def before_prepare(self, tx: Tx) -> None:
        """The scheduler's part in every commit that stages task writes (the session
        calls it at its commit site): reserve, in that commit, what it made runnable,
        and check what else it touched once it has landed and those have started."""
        await self._reserve_eagerly(tx)
        tx.after_commit.append(self._check)

    async def _join_all(self) -> None:
        await self._runs.join_all()

    def _start(self, inv: Invocation) -> None:
        self._runs.start(inv)

    @property
    def _invocations(self) -> dict[int, Invocation]:
        """The invocations running now, by task id."""
        return self._runs.running

    # ------------------------------------------------------------------ drains

    async def _drain(self) -> None:
        try:
            while self._dirty and self._enabled and not self.closing:
                self._dirty = False
                if self._quiet(self.clock.now()):
                    continue
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
                    self._request()

    def _quiet(self, now: int) -> bool:
        """Whether no live task needs the line, looking only at the touched ones."""
        tasks = self.session.tasks
        return self._wakeups.quiet(tasks, self._invocations, now, self._outcomes)

    async def _reserve(self, tx: Tx) -> list[Invocation]:
        now = tx.now()
        await self._derive(tx)
        view = decisions.live_view(self.session.tasks, tx.tasks)
        owned = self._owned(view, tx)
        out: list[Invocation] = []
        plan = decisions.to_reserve(
            view, now, running=self._invocations, owned=owned, outcomes=self._outcomes
        )
        for task, mode in plan:
            res = self._resolve(task, run_migrations=True)
            if res.definition is None:
                if mode == "abort":
                    await self.settle(tx, task, Orphaned(res.blocked or "missing_task"))
                continue
            out.append(await self._reservation(tx, task, res, mode, now))
        return out

    async def _reservation(
        self, tx: Tx, task: Task, res: Resolution, mode: Mode, now: int, *, fresh: bool = False
    ) -> Invocation:
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
        return self._runs.build(task, res.definition, mode, fresh=fresh)

    async def _reserve_eagerly(self, tx: Tx) -> None:
        """Reserve, in the commit that makes them runnable, the tasks it creates and the
        waiters whose last awaited task it settles — one commit instead of two for every
        child task and every resumed waiter. Anything unusual (abort marks, migrations,
        blocked tasks, timers) is left to the next drain."""
        if not self._enabled or self.closing:
            return
        # Read through, not copied: this runs in every commit that stages a task.
        view = decisions.StagedView(self.session.tasks, tx.tasks)
        settled = {t.id for t in tx.tasks.values() if isinstance(t.state, Terminal)}
        candidates = [t for t in tx.tasks.values() if t.id in view]
        if settled:
            # Committed waiters from the session's index; the view's (maybe staged) record decides.
            for waiter_id in sorted({w for s in settled for w in self.session.waiting_on(s)}):
                t = view.get(waiter_id)
                if t and isinstance(t.state, Waiting) and settled.intersection(t.state.on):
                    candidates.append(t)
        now = tx.now()
        started: list[Invocation] = []
        starting: set[int] = set()
        running = Either(self._invocations, starting)
        for task in candidates:
            current = view.get(task.id)
            if current is None or not decisions.startable(
                current, now, view, running=running, outcomes=self._outcomes
            ):
                continue
            res = self._resolve(current, run_migrations=False)
            if res.definition is None or res.definition.version != current.version:
                continue
            fresh = current.id not in self.session.tasks  # created by this commit
            started.append(await self._reservation(tx, current, res, "run", now, fresh=fresh))
            starting.add(current.id)
        if started:

            def start_all() -> None:
                for inv in started:
                    self._start(inv)

            tx.after_commit.append(start_all)

    async def _derive(self, tx: Tx) -> None:
        """Stage what ownership implies (see the module docstring, drain step 1)."""
        view = decisions.live_view(self.session.tasks, tx.tasks)
        for marked in decisions.abort_marks(view, self._owners(tx)):
            await tx.put_task(marked)
        view = decisions.live_view(self.session.tasks, tx.tasks)
        for marked in decisions.fail_fast_marks(view, self._outcomes):
            await tx.put_task(marked)
        # Finalize held outcomes bottom-up until nothing changes.
        changed = True
        while changed:
            changed = False
            view = decisions.live_view(self.session.tasks, tx.tasks)
            for task in decisions.finalizable(view, self._owned(view, tx)):
                assert isinstance(task.state, Completing)
                await self.settle(tx, task, task.state.outcome)
                changed = True

    async def settle(self, tx: Tx, task: Task, outcome: Outcome) -> None:
        """Write a scheduler outcome: ``completing`` if owned work is live, else terminal;
        ``on_settled`` runs in the commit that makes it terminal."""
        state = settle_state(self.session, tx, task, outcome)
        ended = tx.now() if isinstance(state, Terminal) else task.ended_at
        staged = await tx.put_task(task.evolve(state=state, ended_at=ended))
        if isinstance(state, Terminal) and self.on_settled is not None:
            await self.on_settled(tx, staged)

    # ------------------------------------------------------------------ commits in

    def _on_commit(self, event: CommitEvent) -> None:
        if not event.tasks:
            return
        wakeups = self._wakeups
        for task in event.tasks:
            state = task.state
            if isinstance(state, Terminal):
                wakeups.touch(self.session.waiting_on(task.id))  # their wait may be over
                self._outcomes.settled(self.session, task)
                self._task_waiters.settle(task.id, task)
            else:
                wakeups.committed(task)
            if task.abort_requested:
                self._runs.abort_marked(task.id)
        if self._idle_waiters and self.idle():
            self._idle_waiters.settle(None, None)
        if self.session.task_layer is not self:
            self._check()  # otherwise before_prepare queued the check after this commit

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
        self.resume()
        return await self._task_waiters.wait(task_id)

    def idle(self) -> bool:
        """No live foreground work: every live task is background or below a background owner."""
        return not any(self._foreground(t) for t in self.session.tasks.values())

    def _foreground(self, task: Task) -> bool:
        return not task.background and not any(o.background for o in owners(self.session, task))

    async def wait_for_idle(self) -> None:
        """Wait until :meth:`idle`. Enables scheduling; cancelling only cancels the wait."""
        if self.idle():
            return
        if self.closing:
            raise SessionClosed("the harness is closed")
        self.session.check_open()  # poisoned: it would never become idle here
        self.resume()
        await self._idle_waiters.wait(None)

    async def abort_task(
        self, task_id: int, *, noted: Callable[[Tx, Task], Awaitable[None]] | None = None
    ) -> Literal["marked", "terminal", "orphaned"]:
        """Mark a task for abort (durably) and join its run invocation.

        A blocked task that nothing runs is settled ``orphaned`` at once. ``noted(tx, task)``
        writes in the mark's commit (an event for people), if this call marks the task.
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
            if noted is not None:
                await noted(tx, rec)
            blocked = self._resolve(rec, run_migrations=False).blocked
            if (
                blocked is not None
                and task_id not in self._invocations
                and not isinstance(rec.state, Completing)
                and not has_owned_live_work(self.session, tx, task_id)
            ):
                await self.settle(tx, marked, Orphaned(blocked))
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
        view = dict(self.session.tasks)
        return decisions.next_wake(
            view,
            self.clock.now(),
            # work in progress (an invocation of a settled task is only unwinding)
            busy=any(task_id in view for task_id in self._invocations),
            owned=self._owned(view, None),
            blocked=lambda task: self._resolve(task, run_migrations=False).blocked is not None,
            outcomes=self._outcomes,
        )

    def inspect(self) -> Inspection:
        """Derive the state of every live task without running task code."""
        scheduling: Literal["paused", "running", "closing"] = (
            "closing" if self.closing else "running" if self._enabled else "paused"
        )
        tasks = decisions.inspect_tasks(
            dict(self.session.tasks),
            self.clock.now(),
            running=self._invocations,
            resolution=lambda task: self._resolve(task, run_migrations=False),
            outcomes=self._outcomes,
        )
        return Inspection(scheduling, tasks)

    # ------------------------------------------------------------------ derivations

    def _owners(self, tx: Tx | None) -> Callable[[Task], Iterable[Task]]:
        """A task's live owners, counting ``tx``'s staged records."""
        staged = tx.tasks if tx is not None else None
        return lambda task: owners(self.session, task, staged)

    def _owned(self, view: dict[int, Task], tx: Tx | None) -> set[int]:
        """Ids of tasks that have live ordinary work below them."""
        return decisions.owners_of_work(view, self._owners(tx))

    def _resolve(self, task: Task, *, run_migrations: bool) -> Resolution:
        """How the task meets its kind's current definition (see
        :func:`decisions.resolve`); ``run_migrations``: run a pending migration now (task
        code: at reservation only)."""
        defn = self.source.task(task.kind)
        failed = defn is not None and self._failed_migrations.get(task.id) is defn
        res = decisions.resolve(task, defn, migration_failed=failed)
        if defn is None or res.blocked is not None or defn.version == task.version:
            if res.blocked == "migration_failed" and defn is not None and defn.migrate is None:
                self.report_once(
                    task.id,
                    "migration_failed",
                    defn,
                    f"Task kind {task.kind} has no migration from {task.version}",
                )
            return res
        if not run_migrations:
            return res
        assert defn.migrate is not None
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
            self._failed_migrations[task.id] = defn
            self.report(e)
            return Resolution(None, "migration_failed")
        return Resolution(defn, migrated=migrated)

    def report_once(self, task_id: int, reason: str, defn: object, message: str) -> None:
        """Report ``message`` once per task, reason and definition."""
        if self._reported.get((task_id, reason)) is not defn:
            self._reported[(task_id, reason)] = defn
            self.report(RuntimeError(message))

    async def _prefetch_outcomes(self) -> None:
        """So deriving readiness stays synchronous (see :class:`KnownOutcomes`)."""
        await self._outcomes.prefetch(self.session)

    # ------------------------------------------------------------------ timers

    def _arm_timer(self) -> None:
        earliest, due = self._wakeups.earliest_until(self.session.tasks, self.clock.now())
        if due:
            self._request()  # a wait's time came before its timer fired
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


if TYPE_CHECKING:  # mypy proves the scheduler is a task layer and a runtime's runner

    def _conforms(scheduler: Scheduler) -> tuple[TaskLayer, Driver]:
        return scheduler, scheduler
