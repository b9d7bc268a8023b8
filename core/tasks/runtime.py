"""TaskRuntime: what a phase handler uses to make durable progress.

Every runtime commit runs on the session line and is *gated* there: it is rejected if
the invocation has ended, the scheduler is closing, the task is no longer running, or
(for a run invocation) the task carries a durable abort mark. That gate is what makes
"a run invocation never commits after its abort mark" hold no matter how the handler
and the abort race.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from types import CoroutineType
from typing import Any, Literal, Protocol, TypeAlias, cast

from core.clock import Clock
from core.errors import InvocationEnded, SessionClosed, TaskNotFound, TaskStateError
from core.jsonvalue import JsonObject, JsonValue, copy_admitted, json_copy
from core.records import (
    Aborted,
    Completed,
    Completing,
    ErrorInfo,
    Failed,
    Faulted,
    Orphaned,
    Outcome,
    Running,
    Task,
    TaskState,
    Terminal,
    Waiting,
    WaitPolicy,
)
from core.session.session import Session
from core.session.transaction import Tx
from core.tasks.ownership import owners, settle_state
from core.tasks.signal import CancelSignal

__all__ = ["CheckpointRule", "NextState", "Runner", "TaskRuntime"]

NextState: TypeAlias = "JsonObject | Waiting | Outcome | None"
"""What a runtime commit callback returns: a new checkpoint (a dict with a ``phase``), a
``Waiting`` state, an outcome, or ``None`` to leave the state alone."""

_MISSING: Any = object()


class CheckpointRule(Protocol):
    """What a runtime needs of its task's definition (a ``TaskDefinition``, which
    imports this module for its handler types): to check the checkpoints it commits."""

    def check_phase(self, value: object) -> JsonObject:
        """``value`` itself if it is an object naming one of the definition's phases;
        ``TaskStateError`` otherwise. Not copied or checked as JSON: ``Tx.put_task``, where
        the runtime stages it, does both."""
        ...


class Runner(Protocol):
    """What a runtime reads of the scheduler running its invocation."""

    @property
    def session(self) -> Session: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def closing(self) -> bool:
        """The scheduler is closing: no invocation may commit any more."""
        ...

    @property
    def harness(self) -> object:
        """What task code reaches through :attr:`TaskRuntime.harness`."""
        ...


class TaskRuntime:
    """Bound to one invocation (``mode`` is ``"run"`` or ``"abort"``) of one task."""

    def __init__(
        self,
        scheduler: Runner,
        task_id: int,
        conversation_id: int,
        definition: CheckpointRule,
        mode: Literal["run", "abort"],
        signal: CancelSignal,
        *,
        fresh: bool = False,
    ) -> None:
        self._scheduler = scheduler
        self.task_id = task_id
        self.conversation_id = conversation_id
        self.definition = definition
        self.mode = mode
        self.signal = signal
        self.ended = False
        self.fresh = fresh
        """The task was created by the commit that reserved this invocation: no earlier
        invocation (in this process or one that crashed) ran any of its phases."""

    @property
    def session(self) -> Session:
        return self._scheduler.session

    @property
    def harness(self) -> object:
        """The agent harness running this scheduler (``None`` on a bare engine), for
        extension tasks, which are defined without it: they narrow it to
        :class:`~core.harness.services.HarnessServices` (``core.tasks`` cannot import
        the harness layer above it)."""
        return self._scheduler.harness

    def now(self) -> int:
        """The Clock's epoch milliseconds."""
        return self._scheduler.clock.now()

    # ------------------------------------------------------------------ commits

    def _gate(self) -> Task:
        """Return the committed record if this invocation may still commit; raise otherwise."""
        if self.ended:
            raise InvocationEnded(f"the invocation of task {self.task_id} has ended")
        if self._scheduler.closing:
            raise SessionClosed("the scheduler is closing")
        rec = self._scheduler.session.tasks.get(self.task_id)
        if rec is None or isinstance(rec.state, Terminal):
            raise TaskStateError(f"Task {self.task_id} is terminal")
        if self.mode == "run" and rec.abort_requested:
            raise TaskStateError(f"Task {self.task_id} has a durable abort mark")
        if not isinstance(rec.state, Running):
            raise TaskStateError(f"Task {self.task_id} is {rec.status}, not running")
        return rec

    async def commit(
        self, fn: Callable[[Tx, Task], Awaitable[NextState] | NextState]
    ) -> Task | None:
        """Run ``fn(tx, current)`` on the line; apply the state it returns.

        Returns the task record as committed (``None`` if the commit changed no task).
        Anything else ``fn`` stages (entries, documents, child tasks) lands in the same
        commit.
        """
        staged: list[Task] = []

        async def body(tx: Tx) -> None:
            rec = self._gate()
            result = fn(tx, _detached(rec))
            # Most commit functions are coroutine functions: no ABC check for them.
            if type(result) is CoroutineType or isinstance(result, Awaitable):
                result = await result
            if result is not None:
                staged.append(await self._apply(tx, rec, result))

        await self._scheduler.session.commit(body)
        return staged[0] if staged else None

    async def _apply(self, tx: Tx, rec: Task, nxt: JsonObject | Waiting | Outcome) -> Task:
        state: TaskState
        ended_at = rec.ended_at
        if isinstance(nxt, dict):
            self._run_only("commit a checkpoint")
            # put_task copies and checks the checkpoint's JSON as it stages it.
            state = Running(self.definition.check_phase(nxt))
        elif isinstance(nxt, Waiting):
            self._run_only("wait")
            await self._check_wait(tx, rec, nxt)
            state = Waiting(
                self.definition.check_phase(nxt.checkpoint), tuple(nxt.on), nxt.policy, nxt.until
            )
        elif isinstance(nxt, Completed | Failed | Aborted):
            state = settle_state(self.session, tx, rec, nxt)
            if isinstance(state, Terminal):
                ended_at = tx.now()
        elif isinstance(nxt, Orphaned | Faulted):
            raise TaskStateError("only the scheduler writes orphaned and faulted outcomes")
        else:
            raise TaskStateError(f"not a task state: {nxt!r}")
        return await tx.put_task(rec.evolve(state=state, ended_at=ended_at))

    def _run_only(self, what: str) -> None:
        if self.mode != "run":
            raise TaskStateError(f"an abort handler cannot {what}; it settles the task")

    async def _check_wait(self, tx: Tx, rec: Task, wait: Waiting) -> None:
        if wait.policy not in ("all_settled", "fail_fast"):
            raise TaskStateError(f"unknown wait policy {wait.policy!r}")
        above = {o.id for o in owners(self.session, rec, tx.tasks)}
        for member in wait.on:
            if member == rec.id or member in above:
                raise TaskStateError(f"Task {rec.id} cannot wait on itself or an owner ({member})")
            found = tx.staged_task(member) or await self._scheduler.session.task(member)
            if found is None:
                raise TaskNotFound(f"Task {member} does not exist")
            if wait.policy == "fail_fast" and found.owner != rec.id:
                raise TaskStateError(f"fail_fast waits only on tasks the waiter owns ({member})")

    # ------------------------------------------------------------------ conveniences

    async def checkpoint(self, checkpoint: JsonObject) -> None:
        """Commit a new checkpoint: the next phase runs from it."""
        await self.commit(lambda tx, cur: checkpoint)

    async def complete(self, result: JsonValue = None) -> None:
        await self.commit(lambda tx, cur: Completed(result))

    async def fail(self, message: str, detail: JsonValue = None, result: JsonValue = None) -> None:
        await self.commit(lambda tx, cur: Failed(ErrorInfo(message, detail), result))

    async def abort(self, reason: str | None = None, result: JsonValue = None) -> None:
        """Settle as aborted (what an abort handler usually ends with)."""
        await self.commit(lambda tx, cur: Aborted(reason, result))

    async def sleep_until(self, until: int, checkpoint: JsonObject) -> None:
        """Release the invocation until the clock reaches ``until``; resume at ``checkpoint``."""
        await self.commit(lambda tx, cur: Waiting(checkpoint, (), "all_settled", int(until)))

    async def wait_for(
        self,
        task_ids: Iterable[int],
        checkpoint: JsonObject,
        *,
        policy: WaitPolicy = "all_settled",
        until: int | None = None,
    ) -> None:
        """Release the invocation until the tasks are terminal (and ``until`` passed)."""
        ids = tuple(task_ids)
        await self.commit(lambda tx, cur: Waiting(checkpoint, ids, policy, until))

    # ------------------------------------------------------------------ memos

    async def memo(self, name: str, candidate: JsonValue = _MISSING) -> JsonValue:
        """Read memo ``name`` (``None`` if unset), or set it if unset: first writer wins.

        With a candidate this is one gated commit that stores the candidate unless a
        value is already stored, and returns the stored winner either way. Memos
        survive checkpoints, handover and reopen, and vanish when the task settles.
        """
        if type(name) is not str:
            raise TypeError("memo names are strings")
        if candidate is _MISSING:
            rec = self._scheduler.session.tasks.get(self.task_id)
            if rec is None or isinstance(rec.state, Completing | Terminal):
                return None
            return json_copy(rec.memos.get(name))
        value = json_copy(candidate, f"memo {name!r}")
        winner: list[JsonValue] = []

        async def body(tx: Tx) -> None:
            rec = self._gate()
            if name in rec.memos:
                winner.append(json_copy(rec.memos[name]))
                return
            await tx.put_task(rec.evolve(memos={**rec.memos, name: value}))
            winner.append(value)

        await self._scheduler.session.commit(body)
        return winner[0]

    # ------------------------------------------------------------------ reads

    async def task(self, task_id: int) -> Task | None:
        """A committed task record (live or terminal)."""
        self._check()
        return await self._scheduler.session.task(task_id)

    async def outcomes(self, task_ids: Iterable[int]) -> dict[int, Outcome | None]:
        """The outcome of each task (``None`` while it is still live)."""
        out: dict[int, Outcome | None] = {}
        for tid in task_ids:
            rec = await self.task(tid)
            if rec is None:
                raise TaskNotFound(f"Task {tid} does not exist")
            out[tid] = rec.outcome if isinstance(rec.state, Terminal) else None
        return out

    def _check(self) -> None:
        if self.ended:
            raise InvocationEnded(f"the invocation of task {self.task_id} has ended")


def _detached(rec: Task) -> Task:
    """A copy of the record whose payloads the handler may mutate freely."""
    # Committed payloads were admitted when they were staged: copied, not checked again
    # (this runs for every phase and commit of every task, four times a tool round).
    return rec.evolve(
        input=copy_admitted(rec.input), state=_copy_state(rec.state), memos=dict(rec.memos)
    )


def _copy_state(state: TaskState) -> TaskState:
    if isinstance(state, Waiting):
        checkpoint = cast(JsonObject, copy_admitted(state.checkpoint))
        return Waiting(checkpoint, state.on, state.policy, state.until)
    if isinstance(state, Completing | Terminal):
        return state
    return type(state)(cast(JsonObject, copy_admitted(state.checkpoint)))
