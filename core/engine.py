"""Engine: the durable kernel — a Session and the Scheduler that runs its tasks.

The agent harness builds on it; hosts that only need durable tasks (timers,
workflows) can use it directly::

    engine = await Engine.open(storage, tasks=registry, clock=clock)
    engine.resume()
    task = await engine.create_task(ticker, {"to": 5})
    await engine.wait_for_task(task.id)
    await engine.close()

Opening runs no task code (it only turns ``running`` tasks a crash left into
``pending``); ``resume()`` — or any call that waits for progress — starts scheduling.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Literal, TypeVar, overload

from core.clock import Clock
from core.jsonvalue import JsonValue
from core.records import Task
from core.session.session import Session
from core.session.transaction import Tx
from core.storage.port import Storage
from core.tasks.definition import TaskDefinition
from core.tasks.registry import TaskSource
from core.tasks.scheduler import Inspection, ReconcileHook, Scheduler, SettleHook
from core.telemetry import NO_TELEMETRY, Telemetry

__all__ = ["Engine"]

T = TypeVar("T")


class Engine:
    def __init__(self, session: Session, scheduler: Scheduler) -> None:
        self.session = session
        self.scheduler = scheduler

    @classmethod
    async def open(
        cls,
        storage: Storage,
        *,
        tasks: TaskSource,
        clock: Clock,
        report: Callable[[BaseException], None] | None = None,
        telemetry: Telemetry = NO_TELEMETRY,
        on_reconcile: ReconcileHook | None = None,
        on_settled: SettleHook | None = None,
    ) -> Engine:
        """Open the kernel on ``storage``. On failure the storage is closed and the
        original error re-raised. ``on_reconcile(tx, tasks)`` runs inside the open-time
        reconciliation commit with the tasks a crash left running; ``on_settled(tx,
        task)`` in every commit where the scheduler settles a task itself."""
        try:
            session = await Session.open(storage, clock)
            if report is not None:
                session.report = report
            session.telemetry = telemetry
            scheduler = Scheduler(
                session,
                tasks,
                clock,
                report=report,
                on_settled=on_settled,
                on_reconcile=on_reconcile,
            )
            session.task_layer = scheduler  # creates tasks and joins every commit
            try:
                await scheduler.open()
            except BaseException:
                await scheduler.close()
                raise
        except BaseException:
            await storage.close()
            raise
        return cls(session, scheduler)

    @property
    def clock(self) -> Clock:
        return self.session.clock

    @overload
    async def commit(self, fn: Callable[[Tx], Awaitable[T]]) -> T: ...

    @overload
    async def commit(self, fn: Callable[[Tx], T]) -> T: ...

    async def commit(self, fn: Callable[[Tx], Any]) -> Any:
        """Run ``fn(tx)`` on the session's mutation line (see :meth:`Session.commit`)."""
        return await self.session.commit(fn)

    async def create_task(
        self,
        definition: TaskDefinition | str,
        input: JsonValue = None,
        *,
        conversation_id: int | None = None,
        background: bool = False,
    ) -> Task:
        """Create a conversation-owned task in its own commit and return its record."""

        async def create(tx: Tx) -> Task:
            return await tx.create_task(
                definition, input, conversation_id=conversation_id, background=background
            )

        return await self.session.commit(create)

    async def task(self, task_id: int) -> Task | None:
        return await self.session.task(task_id)

    async def wait_for_task(self, task_id: int) -> Task:
        return await self.scheduler.wait_for_task(task_id)

    async def wait_for_idle(self) -> None:
        await self.scheduler.wait_for_idle()

    async def abort_task(
        self, task_id: int, *, noted: Callable[[Tx, Task], Awaitable[None]] | None = None
    ) -> Literal["marked", "terminal", "orphaned"]:
        """Mark ``task_id`` for abort; ``noted`` writes in the mark's commit (see
        :meth:`Scheduler.abort_task`)."""
        return await self.scheduler.abort_task(task_id, noted=noted)

    def resume(self) -> None:
        self.scheduler.resume()

    def next_wake(self) -> int | None:
        return self.scheduler.next_wake()

    def inspect(self) -> Inspection:
        return self.scheduler.inspect()

    async def close(self) -> None:
        """Stop every invocation without writing outcomes, then close the storage."""
        await self.scheduler.close()
        await self.session.close()
