"""The scheduler's decisions: pure functions of task records and the clock.

Nothing here awaits, commits, reads a clock or runs task code: each function takes the
live task records (a *view*: committed records with a transaction's staged ones laid
over them), the time ``now`` and what the scheduler knows (outcomes of settled tasks,
which tasks an invocation holds, how definitions resolve) and says what follows — what
to reserve and in which mode, which abort marks ownership implies, which held outcomes
can be finalized, when to wake, what a step does next. The scheduler
(:mod:`core.tasks.scheduler`) stages what they decide; tests call them with records.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Container, Iterable, Iterator, Mapping
from dataclasses import field
from typing import Literal

from core.jsonvalue import JsonObject, JsonValue, json_equal
from core.readonly import readonly
from core.records import (
    Completed,
    Completing,
    ErrorInfo,
    Outcome,
    Pending,
    Running,
    Task,
    Terminal,
    Waiting,
)
from core.tasks.definition import TaskDefinition

__all__ = [
    "Inspection",
    "Mode",
    "Previous",
    "Resolution",
    "StagedView",
    "Step",
    "TaskView",
    "abort_marks",
    "cancel_intent",
    "earliest_until",
    "error_info",
    "fail_fast_marks",
    "failed",
    "finalizable",
    "inspect_tasks",
    "live_view",
    "needs_line",
    "next_step",
    "next_wake",
    "owners_of_work",
    "quiet",
    "ready",
    "resolve",
    "startable",
    "to_reserve",
]

Mode = Literal["run", "abort"]
"""A run invocation runs phases; an abort invocation runs the abort handler."""

Previous = tuple[JsonObject, str, BaseException | None]
"""The phase an invocation just ran: its checkpoint, its name, and what it raised."""

Owners = Callable[[Task], Iterable[Task]]
"""A task's live owners, nearest first, up to the first background one (see
:func:`core.tasks.ownership.owners`), bound to the records a decision looks at."""


@readonly
class Resolution:
    """How a task's record meets its kind's current definition: ``definition`` runs
    it (with ``migrated`` input and checkpoint, when a migration ran), or ``blocked``
    says why nothing can."""

    definition: TaskDefinition | None
    blocked: str | None = None
    migrated: tuple[JsonValue, JsonObject] | None = None


@readonly
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


@readonly
class Inspection:
    scheduling: Literal["paused", "running", "closing"]
    tasks: list[TaskView] = field(default_factory=list)


# ---------------------------------------------------------------------- records


def live_view(committed: Mapping[int, Task], staged: Mapping[int, Task]) -> dict[int, Task]:
    """The live tasks as a transaction would commit them: staged records replace
    committed ones, and staged terminal ones leave."""
    view = dict(committed)
    for task in staged.values():
        if isinstance(task.state, Terminal):
            view.pop(task.id, None)
        else:
            view[task.id] = task
    return view


class StagedView(Mapping[int, Task]):
    """:func:`live_view` read through instead of copied: a lookup costs the same
    however many tasks are live (a transaction's step looks up a handful of them).
    ``staged`` may keep changing (records the transaction stages later show)."""

    __slots__ = ("_committed", "_staged")

    def __init__(self, committed: Mapping[int, Task], staged: Mapping[int, Task]) -> None:
        self._committed = committed
        self._staged = staged

    def __getitem__(self, task_id: int) -> Task:
        task = self._staged.get(task_id)
        if task is None:
            return self._committed[task_id]
        if isinstance(task.state, Terminal):
            raise KeyError(task_id)
        return task

    def get(self, task_id: int, default: Task | None = None) -> Task | None:  # type: ignore[override]
        # Mapping.get goes through __getitem__ and a KeyError: this is on every commit.
        task = self._staged.get(task_id)
        if task is None:
            return self._committed.get(task_id, default)
        return default if isinstance(task.state, Terminal) else task

    def __contains__(self, task_id: object) -> bool:
        task = self._staged.get(task_id)  # type: ignore[call-overload]
        if task is None:
            return task_id in self._committed
        return not isinstance(task.state, Terminal)

    def __iter__(self) -> Iterator[int]:
        return iter(live_view(self._committed, self._staged))

    def __len__(self) -> int:
        return len(live_view(self._committed, self._staged))


def cancel_intent(task: Task) -> bool:
    """An owner whose work below it must stop: abort-marked, or holding a failed outcome."""
    if task.abort_requested:
        return True
    state = task.state
    return isinstance(state, Completing) and not isinstance(state.outcome, Completed)


def failed(task_id: int, view: Mapping[int, Task], outcomes: Mapping[int, Outcome]) -> bool:
    """Whether the task is settled with an outcome other than ``completed``."""
    if task_id in view:
        return False
    outcome = outcomes.get(task_id)
    return outcome is not None and not isinstance(outcome, Completed)


def ready(task: Task, now: int, view: Mapping[int, Task], outcomes: Mapping[int, Outcome]) -> bool:
    """Whether a waiting task's wait is over: its time has come and every awaited task
    is settled (or, for ``fail_fast``, one of them failed)."""
    state = task.state
    assert isinstance(state, Waiting)
    if state.until is not None and now < state.until:
        return False
    if all(m not in view for m in state.on):
        return True
    return state.policy == "fail_fast" and any(failed(m, view, outcomes) for m in state.on)


def quiet(
    tasks: Mapping[int, Task], invoked: Container[int], now: int, outcomes: Mapping[int, Outcome]
) -> bool:
    """Whether a drain's reservation commit would stage nothing, decided without taking
    the line: no live task :func:`needs_line`. Reading committed state outside the line
    is sound: task state changes only by commits, each of which kicks a drain again, and
    time waits arm the scheduler's timer."""
    return not any(needs_line(t, invoked, now, tasks, outcomes) for t in tasks.values())


def needs_line(
    task: Task,
    invoked: Container[int],
    now: int,
    view: Mapping[int, Task],
    outcomes: Mapping[int, Outcome],
) -> bool:
    """Whether a drain must take the line for this live task: it is neither being
    invoked nor waiting (not yet ready) on an ``all_settled`` wait. Conservative: abort
    marks, held outcomes and ``fail_fast`` waits always take the line.

    Only a commit of the task, the end of its invocation, a member of its wait leaving
    ``view``, its ``until`` passing or a change of definitions can turn this from false
    to true: what lets the scheduler re-check only the tasks those touched."""
    state = task.state
    if task.abort_requested or isinstance(state, Completing):
        return True
    if isinstance(state, Waiting):
        if state.policy != "all_settled":
            return True
        return task.id not in invoked and ready(task, now, view, outcomes)
    return task.id not in invoked  # pending, or running without an invocation


def owners_of_work(view: Mapping[int, Task], owners: Owners) -> set[int]:
    """Ids of the tasks that have live ordinary work below them."""
    above: set[int] = set()
    for task in view.values():
        if task.background:
            continue
        above.update(o.id for o in owners(task))
    return above


def resolve(task: Task, definition: TaskDefinition | None, *, migration_failed: bool) -> Resolution:
    """How ``task`` meets ``definition`` (its kind's current one), before any migration
    runs: a newer definition that can migrate resolves to itself (the scheduler runs the
    migration at reservation); ``migration_failed``: one already failed for this pair."""
    if definition is None:
        return Resolution(None, "missing_task")
    if definition.version < task.version:
        return Resolution(None, "task_too_old")
    if definition.version == task.version:
        return Resolution(definition)
    if definition.migrate is None or migration_failed:
        return Resolution(None, "migration_failed")
    return Resolution(definition)


# ---------------------------------------------------------------------- a drain


def abort_marks(view: Mapping[int, Task], owners: Owners) -> list[Task]:
    """Drain step 1a: the tasks to abort-mark (as marked records) because an owner
    above them has cancellation intent. Background tasks are boundaries: never marked
    by this rule."""
    return [
        task.evolve(abort_requested=True)
        for task in sorted(view.values(), key=lambda t: t.id)
        if not task.abort_requested
        and not task.background
        and any(cancel_intent(o) for o in owners(task))
    ]


def fail_fast_marks(view: Mapping[int, Task], outcomes: Mapping[int, Outcome]) -> list[Task]:
    """Drain step 1b: the remaining members (as marked records) of every ``fail_fast``
    wait one of whose members failed."""
    marked: dict[int, Task] = {}
    for waiter in view.values():
        state = waiter.state
        if not isinstance(state, Waiting) or state.policy != "fail_fast":
            continue
        if waiter.abort_requested or not any(failed(m, view, outcomes) for m in state.on):
            continue
        for member in state.on:
            other = view.get(member)
            if other is not None and not other.abort_requested and member not in marked:
                marked[member] = other.evolve(abort_requested=True)
    return list(marked.values())


def finalizable(view: Mapping[int, Task], owned: Collection[int]) -> list[Task]:
    """Drain step 1c: ``completing`` tasks whose owned work has drained (their held
    outcome becomes terminal; repeat until none is left, bottom-up)."""
    return [t for t in view.values() if isinstance(t.state, Completing) and t.id not in owned]


def to_reserve(
    view: Mapping[int, Task],
    now: int,
    *,
    running: Collection[int],
    owned: Collection[int],
    outcomes: Mapping[int, Outcome],
) -> list[tuple[Task, Mode]]:
    """Drain step 2: the tasks to reserve, by id, with the invocation each gets. An
    abort-marked task aborts once no owned work is left below it (bottom-up); a waiting
    one runs once :func:`ready`. ``running``: ids an invocation holds now (a ``running``
    record without one is reserved again: its run ended at an abort mark, or failed to
    record its step)."""
    out: list[tuple[Task, Mode]] = []
    for task in sorted(view.values(), key=lambda t: t.id):
        state = task.state
        if task.id in running or isinstance(state, Completing):
            continue
        if task.abort_requested:
            if task.id not in owned:  # children abort first
                out.append((task, "abort"))
        elif not isinstance(state, Waiting) or ready(task, now, view, outcomes):
            out.append((task, "run"))
    return out


def startable(
    task: Task | None,
    now: int,
    view: Mapping[int, Task],
    *,
    running: Container[int],
    outcomes: Mapping[int, Outcome],
) -> bool:
    """Whether a task a commit creates or wakes can be reserved in that same commit:
    only the plain case (not running, not abort-marked, pending or ready); anything
    unusual is left to the next drain."""
    if task is None or task.id in running or task.abort_requested:
        return False
    if isinstance(task.state, Waiting):
        return ready(task, now, view, outcomes)
    return isinstance(task.state, Pending)


# ---------------------------------------------------------------------- a step


@readonly
class Step:
    """What an invocation does before its next phase.

    ``stop``: end the run; ``run``: run the record's phase (``stray`` says why the
    definition it runs is no longer its kind's current one); ``fault``: settle
    ``faulted`` with ``error``; ``hand_over``: back to ``pending``, for the kind's new
    definition to take it.
    """

    action: Literal["stop", "run", "fault", "hand_over"]
    error: ErrorInfo | None = None
    stray: Literal["missing_task", "incompatible_task"] | None = None

    @property
    def writes(self) -> bool:
        """Whether the step must be decided on the line (it writes, or reports)."""
        return self.action in ("fault", "hand_over") or self.stray is not None


STOP = Step("stop")
_RUN = Step("run")  # the common answer, shared like STOP (steps are immutable)


def next_step(
    record: Task | None,
    *,
    closing: bool,
    previous: Previous | None,
    definition: TaskDefinition,
    current: TaskDefinition | None,
) -> Step:
    """The step before a phase (see the scheduler's docstring): ``record`` as committed,
    ``definition`` the one this invocation runs, ``current`` the kind's one now."""
    if record is None or not isinstance(record.state, Running) or closing:
        return STOP
    if record.abort_requested:
        return STOP
    if previous is not None:
        checkpoint, phase, error = previous
        if error is not None:
            return Step("fault", error_info(error))
        if json_equal(record.state.checkpoint, checkpoint):
            message = f"Task {record.kind} phase {phase} returned without durable progress"
            return Step("fault", ErrorInfo(message))
        if current is not definition:
            if current is not None and current.can_take(record.version):
                return Step("hand_over")
            return Step("run", stray="missing_task" if current is None else "incompatible_task")
    return _RUN


def error_info(error: BaseException) -> ErrorInfo:
    return ErrorInfo(str(error) or type(error).__name__, {"type": type(error).__name__})


# ---------------------------------------------------------------------- reading


def next_wake(
    view: Mapping[int, Task],
    now: int,
    *,
    busy: bool,
    owned: Collection[int],
    blocked: Callable[[Task], bool],
    outcomes: Mapping[int, Outcome],
) -> int | None:
    """When a host must wake the session: ``None`` (nothing to do), ``now`` (something
    can run: ``busy`` is an invocation of a live task in progress) or the earliest
    ``until`` of a live wait."""
    if busy:
        return now
    earliest: int | None = None
    for task in view.values():
        state = task.state
        if isinstance(state, Completing) or task.abort_requested:
            if task.id not in owned:
                return now
            continue
        if blocked(task):
            continue
        if isinstance(state, Waiting):
            if ready(task, now, view, outcomes):
                return now
            if state.until is not None and state.until > now:
                earliest = state.until if earliest is None else min(earliest, state.until)
            continue
        return now
    return earliest


def inspect_tasks(
    view: Mapping[int, Task],
    now: int,
    *,
    running: Collection[int],
    resolution: Callable[[Task], Resolution],
    outcomes: Mapping[int, Outcome],
) -> list[TaskView]:
    """Every live task as :class:`TaskView`, by id."""
    out: list[TaskView] = []
    for task in sorted(view.values(), key=lambda t: t.id):
        state = task.state
        if task.id in running or isinstance(state, Running):
            out.append(TaskView(task, "running"))
        elif isinstance(state, Completing):
            out.append(TaskView(task, "completing"))
        else:
            res = resolution(task)
            if res.blocked is not None:
                out.append(TaskView(task, "blocked", reason=res.blocked))
            elif isinstance(state, Waiting) and not ready(task, now, view, outcomes):
                live_on = tuple(m for m in state.on if m in view)
                out.append(TaskView(task, "waiting", waiting_on=live_on, until=state.until))
            else:
                migrates = res.definition is not None and res.definition.version > task.version
                out.append(TaskView(task, "ready", migrates=migrates))
    return out


def earliest_until(tasks: Iterable[Task], now: int) -> int | None:
    """The earliest future ``until`` of a live wait: when the scheduler's timer fires."""
    earliest: int | None = None
    for task in tasks:
        state = task.state
        if isinstance(state, Waiting) and state.until is not None and state.until > now:
            earliest = state.until if earliest is None else min(earliest, state.until)
    return earliest
