"""The scheduler's decisions, from task records and a time alone (core.tasks.decisions).

Plain functions over records: no event loop, no session, no storage. Ownership is given
as a function over an in-memory tree (what ``core.tasks.ownership.owners`` answers).
"""

from __future__ import annotations

from collections.abc import Iterable

from core.records import (
    Completed,
    Completing,
    ErrorInfo,
    Failed,
    Outcome,
    Pending,
    Running,
    Task,
    Terminal,
    Waiting,
)
from core.tasks import decisions
from core.tasks.decisions import Step
from core.tasks.definition import TaskDefinition, define_task


async def _phase(task: object, rt: object) -> None:
    return None


V1 = define_task("d.kind", phases={"start": _phase})
V2 = define_task("d.kind", phases={"start": _phase}, version=2)
V2_MIGRATES = define_task(
    "d.kind", phases={"start": _phase}, version=2, migrate=lambda i, c, v: (i, c)
)
CP = {"phase": "start"}
NOW = 10_000


def task(
    task_id: int,
    state: object = None,
    *,
    owner: int | None = None,
    background: bool = False,
    abort: bool = False,
    version: int = 1,
) -> Task:
    return Task(
        id=task_id,
        conversation_id=1,
        kind="d.kind",
        version=version,
        input=None,
        state=state if state is not None else Pending(CP),  # type: ignore[arg-type]
        owner=owner,
        background=background,
        abort_requested=abort,
    )


def view(*tasks: Task) -> dict[int, Task]:
    return {t.id: t for t in tasks}


def owners_in(tree: dict[int, Task]):  # type: ignore[no-untyped-def]
    """Owners by the ``owner`` field, stopping after the first background one."""

    def owners(t: Task) -> Iterable[Task]:
        if t.background:
            return
        parent = tree.get(t.owner) if t.owner is not None else None
        while parent is not None:
            yield parent
            if parent.background:
                return
            parent = tree.get(parent.owner) if parent.owner is not None else None

    return owners


NO_OUTCOMES: dict[int, Outcome] = {}
FAILED = Failed(ErrorInfo("boom"))


# ---------------------------------------------------------------------- readiness


def test_a_wait_is_ready_once_its_time_has_come_and_its_members_are_settled() -> None:
    sleeper = task(1, Waiting(CP, until=NOW + 1))
    assert not decisions.ready(sleeper, NOW, view(sleeper), NO_OUTCOMES)
    assert decisions.ready(sleeper, NOW + 1, view(sleeper), NO_OUTCOMES)

    child = task(2, owner=3)
    waiter = task(3, Waiting(CP, on=(2,)))
    assert not decisions.ready(waiter, NOW, view(waiter, child), NO_OUTCOMES)
    assert decisions.ready(waiter, NOW, view(waiter), {2: Completed(None)})


def test_fail_fast_is_ready_when_one_member_failed_all_settled_is_not() -> None:
    live = task(2, owner=4)
    fast = task(4, Waiting(CP, on=(2, 3), policy="fail_fast"))
    slow = task(5, Waiting(CP, on=(2, 3)))
    outcomes: dict[int, Outcome] = {3: FAILED}
    assert decisions.ready(fast, NOW, view(fast, live), outcomes)
    assert not decisions.ready(slow, NOW, view(slow, live), outcomes)
    assert not decisions.ready(fast, NOW, view(fast, live), {3: Completed(None)})


def test_cancel_intent_is_an_abort_mark_or_a_held_failure() -> None:
    assert decisions.cancel_intent(task(1, abort=True))
    assert decisions.cancel_intent(task(1, Completing(FAILED)))
    assert not decisions.cancel_intent(task(1, Completing(Completed(None))))
    assert not decisions.cancel_intent(task(1, Running(CP)))


def test_the_view_lays_staged_records_over_committed_ones() -> None:
    committed = view(task(1), task(2))
    staged = {2: task(2, Running(CP)), 3: task(3), 1: task(1, Terminal(Completed(None)))}
    got = decisions.live_view(committed, staged)
    assert set(got) == {2, 3} and got[2].status == "running"


# ---------------------------------------------------------------------- a drain


def test_reservations_run_ready_work_and_abort_bottom_up() -> None:
    parent = task(1, Waiting(CP, on=(2,)), abort=True)
    child = task(2, Running(CP), owner=1, abort=True)  # its run ended at the mark
    ready = task(3)
    asleep = task(4, Waiting(CP, until=NOW + 5))
    held = task(5, Completing(Completed(None)))
    busy = task(6, Running(CP))
    tasks = view(parent, child, ready, asleep, held, busy)
    owned = decisions.owners_of_work(tasks, owners_in(tasks))
    assert owned == {1}
    plan = decisions.to_reserve(tasks, NOW, running={6}, owned=owned, outcomes=NO_OUTCOMES)
    assert [(t.id, mode) for t, mode in plan] == [(2, "abort"), (3, "run")]
    # Once the child is gone the parent aborts; at its time the sleeper runs.
    del tasks[2]
    owned = decisions.owners_of_work(tasks, owners_in(tasks))
    plan = decisions.to_reserve(tasks, NOW + 5, running={6}, owned=owned, outcomes=NO_OUTCOMES)
    assert [(t.id, mode) for t, mode in plan] == [(1, "abort"), (3, "run"), (4, "run")]


def test_background_work_is_not_owned_work() -> None:
    top = task(1, Completing(Completed(None)))
    bg = task(2, background=True, owner=1)  # in practice: in a conversation top owns
    below_bg = task(3, owner=2)
    tasks = view(top, bg, below_bg)
    assert decisions.owners_of_work(tasks, owners_in(tasks)) == {2}
    assert decisions.finalizable(tasks, {2}) == [top]


def test_abort_marks_follow_cancel_intent_down_to_a_background_boundary() -> None:
    top = task(1, Completing(FAILED))
    child = task(2, Running(CP), owner=1)
    grandchild = task(3, owner=2)
    marked_already = task(4, owner=1, abort=True)
    boundary = task(5, owner=1, background=True)
    below_boundary = task(6, owner=5)
    tasks = view(top, child, grandchild, marked_already, boundary, below_boundary)
    marks = decisions.abort_marks(tasks, owners_in(tasks))
    assert [(t.id, t.abort_requested) for t in marks] == [(2, True), (3, True)]
    assert marks[0].state == child.state  # only the mark changes


def test_a_failed_fail_fast_member_marks_the_others_once() -> None:
    a, b = task(2, owner=1), task(3, owner=1, abort=True)
    c = task(5, owner=4)
    w1 = task(1, Waiting(CP, on=(2, 3, 9), policy="fail_fast"))
    w2 = task(4, Waiting(CP, on=(5, 2, 9), policy="fail_fast"))
    calm = task(6, Waiting(CP, on=(2, 9)))  # all_settled: a failure changes nothing
    tasks = view(a, b, c, w1, w2, calm)
    marks = decisions.fail_fast_marks(tasks, {9: FAILED})
    assert [t.id for t in marks] == [2, 5]
    assert all(t.abort_requested for t in marks)
    assert decisions.fail_fast_marks(tasks, {9: Completed(None)}) == []


def test_startable_is_only_the_plain_case() -> None:
    pending = task(1)
    assert decisions.startable(pending, NOW, view(pending), running=set(), outcomes=NO_OUTCOMES)
    assert not decisions.startable(pending, NOW, view(pending), running={1}, outcomes={})
    marked = task(2, abort=True)
    assert not decisions.startable(marked, NOW, view(marked), running=set(), outcomes={})
    asleep = task(3, Waiting(CP, until=NOW + 1))
    assert not decisions.startable(asleep, NOW, view(asleep), running=set(), outcomes={})
    assert decisions.startable(asleep, NOW + 1, view(asleep), running=set(), outcomes={})
    running = task(4, Running(CP))
    assert not decisions.startable(running, NOW, view(running), running=set(), outcomes={})
    assert not decisions.startable(None, NOW, {}, running=set(), outcomes={})


# ---------------------------------------------------------------------- resolution


def test_resolution_blocks_what_no_definition_can_run() -> None:
    record = task(1, version=2)
    assert decisions.resolve(record, None, migration_failed=False).blocked == "missing_task"
    assert decisions.resolve(record, V1, migration_failed=False).blocked == "task_too_old"
    assert decisions.resolve(record, V2, migration_failed=False).definition is V2
    old = task(1)
    assert decisions.resolve(old, V2, migration_failed=False).blocked == "migration_failed"
    assert decisions.resolve(old, V2_MIGRATES, migration_failed=False).definition is V2_MIGRATES
    failed = decisions.resolve(old, V2_MIGRATES, migration_failed=True)
    assert failed.blocked == "migration_failed"


# ---------------------------------------------------------------------- a step


def _step(
    record: Task | None, previous=None, *, current: TaskDefinition | None = V1, closing=False
):  # type: ignore[no-untyped-def]
    return decisions.next_step(
        record, closing=closing, previous=previous, definition=V1, current=current
    )


def test_a_step_stops_unless_the_task_is_running_unmarked_and_open() -> None:
    assert _step(None) == Step("stop")
    assert _step(task(1)) == Step("stop")  # pending
    assert _step(task(1, Running(CP), abort=True)) == Step("stop")
    assert _step(task(1, Running(CP)), closing=True) == Step("stop")
    assert _step(task(1, Running(CP))) == Step("run")


def test_a_step_after_a_phase_faults_or_hands_over_or_continues() -> None:
    moved = task(1, Running({"phase": "start", "n": 1}))
    assert _step(moved, (CP, "start", None)) == Step("run")
    raised = _step(moved, (CP, "start", ValueError("bad")))
    assert raised.action == "fault" and raised.error == ErrorInfo("bad", {"type": "ValueError"})
    stuck = _step(task(1, Running(CP)), (CP, "start", None))
    assert stuck.action == "fault" and stuck.error is not None
    assert "without durable progress" in stuck.error.message
    assert _step(moved, (CP, "start", None), current=V2_MIGRATES) == Step("hand_over")
    assert _step(moved, (CP, "start", None), current=None) == Step("run", stray="missing_task")
    assert _step(moved, (CP, "start", None), current=V2) == Step("run", stray="incompatible_task")
    assert all(s.writes for s in (raised, stuck, Step("hand_over"), Step("run", stray="x")))  # type: ignore[arg-type]
    assert not Step("run").writes and not Step("stop").writes


# ---------------------------------------------------------------------- reading


def test_next_wake_is_now_for_work_the_earliest_until_for_sleepers_none_when_idle() -> None:
    never = lambda t: False  # noqa: E731
    assert decisions.next_wake({}, NOW, busy=False, owned=set(), blocked=never, outcomes={}) is None
    sleepers = view(task(1, Waiting(CP, until=NOW + 9)), task(2, Waiting(CP, until=NOW + 4)))
    wake = decisions.next_wake(sleepers, NOW, busy=False, owned=set(), blocked=never, outcomes={})
    assert wake == NOW + 4
    assert decisions.next_wake(sleepers, NOW, busy=True, owned=set(), blocked=never, outcomes={})
    assert (
        decisions.next_wake(
            {**sleepers, 3: task(3)}, NOW, busy=False, owned=set(), blocked=never, outcomes={}
        )
        == NOW
    )
    blocked = view(task(3))
    always = lambda t: True  # noqa: E731
    assert (
        decisions.next_wake(blocked, NOW, busy=False, owned=set(), blocked=always, outcomes={})
        is None
    )
    held = view(task(4, Completing(Completed(None))))
    assert decisions.next_wake(held, NOW, busy=False, owned={4}, blocked=never, outcomes={}) is None
    assert (
        decisions.next_wake(held, NOW, busy=False, owned=set(), blocked=never, outcomes={}) == NOW
    )


def test_inspection_derives_each_task_state() -> None:
    tasks = view(
        task(1, Running(CP)),
        task(2, Completing(Completed(None))),
        task(3, version=5),
        task(4, Waiting(CP, on=(1, 99), until=NOW + 1)),
        task(5),
    )
    resolutions = {3: decisions.Resolution(None, "task_too_old")}
    got = decisions.inspect_tasks(
        tasks,
        NOW,
        running=set(),
        resolution=lambda t: resolutions.get(t.id, decisions.Resolution(V2_MIGRATES)),
        outcomes={},
    )
    assert [(v.record.id, v.state) for v in got] == [
        (1, "running"),
        (2, "completing"),
        (3, "blocked"),
        (4, "waiting"),
        (5, "ready"),
    ]
    assert got[2].reason == "task_too_old"
    assert got[3].waiting_on == (1,) and got[3].until == NOW + 1
    assert got[4].migrates


def test_the_timer_is_set_for_the_earliest_future_until() -> None:
    tasks = [
        task(1, Waiting(CP, until=NOW - 1)),
        task(2, Waiting(CP, until=NOW + 7)),
        task(3, Waiting(CP, until=NOW + 3)),
        task(4),
    ]
    assert decisions.earliest_until(tasks, NOW) == NOW + 3
    assert decisions.earliest_until(tasks[:1], NOW) is None


def test_a_drain_is_quiet_only_if_every_task_runs_or_waits_on_unsettled_work() -> None:
    running = task(1, Running(CP))
    waiting = task(2, Waiting(CP, on=(1,)))
    tasks = {1: running, 2: waiting}
    assert decisions.quiet(tasks, {1}, NOW, {})
    # running without an invocation: a drain reserves it again
    assert not decisions.quiet(tasks, set(), NOW, {})
    # the wait is over once its member is gone
    assert not decisions.quiet({2: waiting}, set(), NOW, {})
    # abort marks, held outcomes and fail_fast waits always take the line
    assert not decisions.quiet({1: task(1, Running(CP), abort=True)}, {1}, NOW, {})
    assert not decisions.quiet({1: task(1, Completing(Completed(None)))}, {1}, NOW, {})
    fast = task(2, Waiting(CP, on=(1,), policy="fail_fast"))
    assert not decisions.quiet({1: running, 2: fast}, {1}, NOW, {})
    # a sleeper whose time has not come is quiet; once it has, it is not
    assert decisions.quiet({3: task(3, Waiting(CP, until=NOW + 1))}, set(), NOW, {})
    assert not decisions.quiet({3: task(3, Waiting(CP, until=NOW))}, set(), NOW, {})
