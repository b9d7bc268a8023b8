"""Tasks and the scheduler: phases, memos, waits, timers, children, versioning, close."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from core.errors import InvocationEnded, SessionClosed, TaskNotFound, TaskStateError
from core.records import (
    Completed,
    Faulted,
    Orphaned,
    Pending,
    Task,
    Terminal,
    Waiting,
)
from core.session import Tx
from core.storage import TaskQuery
from core.tasks import TaskRuntime, define_task
from tests.core.support import World, settle, until


def outcome(task: Task) -> Any:
    assert isinstance(task.state, Terminal), task.state
    return task.state.outcome


# --------------------------------------------------------------------------- phases


async def test_a_task_runs_its_phases_in_one_invocation_and_completes(tmp_path: Path) -> None:
    runtimes: list[TaskRuntime] = []

    async def first(task: Task, rt: TaskRuntime) -> None:
        runtimes.append(rt)
        await rt.checkpoint({"phase": "second", "n": task.input["n"] + 1})  # type: ignore[call-overload,index,operator]

    async def second(task: Task, rt: TaskRuntime) -> None:
        runtimes.append(rt)
        await rt.complete({"n": task.checkpoint["n"]})  # type: ignore[index]

    two = define_task("t.two", phases={"first": first, "second": second})
    world = World(tmp_path)
    engine = await world.open(two)
    task = await engine.create_task(two, {"n": 1})
    done = await engine.wait_for_task(task.id)
    assert outcome(done) == Completed({"n": 2})
    assert runtimes[0] is runtimes[1]
    assert done.started_at == world.clock.now() and done.ended_at == world.clock.now()
    assert done.memos == {}
    await engine.close()


async def test_a_phase_without_durable_progress_faults_the_task(tmp_path: Path) -> None:
    async def lazy(task: Task, rt: TaskRuntime) -> None:
        await rt.memo("note", 1)  # a memo is not progress

    async def same(task: Task, rt: TaskRuntime) -> None:
        await rt.checkpoint({"phase": "same", "list": [1, 2]})

    async def repeat(task: Task, rt: TaskRuntime) -> None:
        await rt.checkpoint({"list": [1, 2], "phase": "same"})  # equal by value

    lazy_def = define_task("t.lazy", phases={"start": lazy})
    same_def = define_task("t.same", phases={"first": same, "same": repeat})
    world = World(tmp_path)
    engine = await world.open(lazy_def, same_def)
    a = await engine.create_task(lazy_def)
    b = await engine.create_task(same_def)
    fa, fb = await engine.wait_for_task(a.id), await engine.wait_for_task(b.id)
    assert (
        outcome(fa) == Faulted(outcome(fa).error)
        and outcome(fa).error.message == "Task t.lazy phase start returned without durable progress"
    )
    assert outcome(fb).error.message == "Task t.same phase same returned without durable progress"
    await engine.close()


async def test_a_throwing_phase_faults_but_an_earlier_terminal_outcome_stands(
    tmp_path: Path,
) -> None:
    async def boom(task: Task, rt: TaskRuntime) -> None:
        raise ValueError("kaput")

    async def done_then_boom(task: Task, rt: TaskRuntime) -> None:
        await rt.complete("kept")
        with pytest.raises(TaskStateError, match="terminal"):
            await rt.checkpoint({"phase": "start"})
        raise ValueError("after the fact")

    a_def = define_task("t.boom", phases={"start": boom})
    b_def = define_task("t.late", phases={"start": done_then_boom})
    world = World(tmp_path)
    engine = await world.open(a_def, b_def)
    a, b = await engine.create_task(a_def), await engine.create_task(b_def)
    fa, fb = await engine.wait_for_task(a.id), await engine.wait_for_task(b.id)
    assert isinstance(outcome(fa), Faulted) and outcome(fa).error.message == "kaput"
    assert outcome(fa).error.detail == {"type": "ValueError"}
    assert outcome(fb) == Completed("kept")
    await engine.close()


async def test_a_handler_mutating_its_record_changes_nothing_committed(tmp_path: Path) -> None:
    """Phases and commit functions get detached copies of the record's payloads (nested
    ones too): what they mutate in place is not the committed record."""
    seen: list[Any] = []

    async def first(task: Task, rt: TaskRuntime) -> None:
        task.input["deep"]["items"].append("phase")  # type: ignore[call-overload,index,union-attr]
        task.checkpoint["nested"]["n"] = 99  # type: ignore[index]

        def mutate(tx: Tx, current: Task) -> dict[str, Any]:
            current.input["deep"]["items"].append("commit")  # type: ignore[call-overload,index,union-attr]
            current.checkpoint["nested"]["n"] = 98  # type: ignore[index]
            committed = rt.session.tasks[task.id]
            seen.append((committed.input, committed.checkpoint))
            return {"phase": "second", "nested": {"n": 1}}

        await rt.commit(mutate)

    async def second(task: Task, rt: TaskRuntime) -> None:
        await rt.complete(task.input)

    defn = define_task(
        "t.mutate",
        phases={"first": first, "second": second},
        initial=lambda value: {"phase": "first", "nested": {"n": 0}},
    )
    world = World(tmp_path)
    engine = await world.open(defn)
    task = await engine.create_task(defn, {"deep": {"items": [1]}})
    done = await engine.wait_for_task(task.id)
    assert seen == [({"deep": {"items": [1]}}, {"phase": "first", "nested": {"n": 0}})]
    assert outcome(done) == Completed({"deep": {"items": [1]}})
    await engine.close()


async def test_an_unknown_phase_faults(tmp_path: Path) -> None:
    async def jump(task: Task, rt: TaskRuntime) -> None:
        await rt.checkpoint({"phase": "nowhere"})

    world = World(tmp_path)
    engine = await world.open()
    jumpy = define_task("t.jump", phases={"start": jump})
    world.registry.install(jumpy)
    task = await engine.create_task(jumpy)
    done = await engine.wait_for_task(task.id)
    # A checkpoint naming an unknown phase is refused at commit: the phase raised.
    assert isinstance(outcome(done), Faulted) and "unknown phase" in outcome(done).error.message
    await engine.close()


async def test_a_checkpoint_is_copied_and_gated_once_staged(tmp_path: Path) -> None:
    """The phase check does not copy a handler's checkpoint: ``put_task`` is its JSON
    gate and its copy. A value mutated after its commit is not what the next phase
    reads, and a checkpoint that is not JSON faults the task."""
    kept: dict[str, Any] = {"phase": "second", "items": [1]}
    seen: list[Any] = []

    async def first(task: Task, rt: TaskRuntime) -> None:
        await rt.checkpoint(kept)
        kept["items"].append(2)

    async def second(task: Task, rt: TaskRuntime) -> None:
        seen.append(task.checkpoint["items"])  # type: ignore[index]
        await rt.checkpoint({"phase": "second", "items": {1, 2}})

    world = World(tmp_path)
    engine = await world.open()
    defn = define_task("t.copied", phases={"first": first, "second": second})
    world.registry.install(defn)
    task = await engine.create_task(defn)
    done = await engine.wait_for_task(task.id)
    assert seen == [[1]]
    assert isinstance(outcome(done), Faulted)
    assert "checkpoint" in outcome(done).error.message, outcome(done).error.message
    await engine.close()


# --------------------------------------------------------------------------- memos


async def test_memos_are_first_writer_wins_and_survive_checkpoints_and_reopen(
    tmp_path: Path,
) -> None:
    stop = asyncio.Event()
    seen: dict[str, Any] = {}

    async def first(task: Task, rt: TaskRuntime) -> None:
        a, b = await asyncio.gather(rt.memo("choice", "a"), rt.memo("choice", "b"))
        seen["concurrent"] = (a, b)
        seen["again"] = await rt.memo("choice", "c")
        await rt.memo("toString", 1)
        await rt.checkpoint({"phase": "second"})

    async def second(task: Task, rt: TaskRuntime) -> None:
        seen["read"] = await rt.memo("choice")
        seen["missing"] = await rt.memo("constructor")
        await stop.wait()

    memo_def = define_task("t.memo", phases={"first": first, "second": second})
    world = World(tmp_path, "sqlite")
    engine = await world.open(memo_def)
    task = await engine.create_task(memo_def)
    await until(lambda: "read" in seen)
    assert seen == {
        "concurrent": ("a", "a"),
        "again": "a",
        "read": "a",
        "missing": None,
    }
    await engine.close()
    engine = await world.open(resume=False)
    stored = await engine.task(task.id)
    assert stored is not None and stored.memos == {"choice": "a", "toString": 1}
    assert stored.state == Pending({"phase": "second"})
    await engine.close()


# --------------------------------------------------------------------------- waits


def _parent_of(children: list[tuple[str, Any]], policy: str = "all_settled") -> Any:
    async def spawn(task: Task, rt: TaskRuntime) -> None:
        async def fn(tx: Tx, current: Task) -> Waiting:
            ids = []
            for kind, value in children:
                ids.append((await tx.create_task(kind, value, owner=current.id)).id)
            return Waiting({"phase": "join", "ids": ids}, tuple(ids), policy)  # type: ignore[arg-type]

        await rt.commit(fn)

    async def join(task: Task, rt: TaskRuntime) -> None:
        ids = task.checkpoint["ids"]  # type: ignore[index]
        results = await rt.outcomes(ids)  # type: ignore[arg-type]
        await rt.complete([o.kind if o else None for o in results.values()])

    return spawn, join


async def test_a_waiting_task_resumes_once_every_child_is_terminal_whatever_the_outcome(
    tmp_path: Path,
) -> None:
    release = asyncio.Event()

    async def ok(task: Task, rt: TaskRuntime) -> None:
        await release.wait()
        await rt.complete(1)

    async def bad(task: Task, rt: TaskRuntime) -> None:
        raise RuntimeError("child failed")

    ok_def = define_task("t.ok", phases={"start": ok})
    bad_def = define_task("t.bad", phases={"start": bad})
    spawn, join = _parent_of([("t.ok", None), ("t.bad", None)])
    parent_def = define_task("t.parent", phases={"spawn": spawn, "join": join})
    world = World(tmp_path)
    engine = await world.open(ok_def, bad_def, parent_def)
    parent = await engine.create_task(parent_def)
    await until(lambda: [v.record.kind for v in engine.inspect().tasks] == ["t.parent", "t.ok"])
    await settle()
    views = {v.record.kind: v for v in engine.inspect().tasks}
    assert views["t.parent"].state == "waiting" and len(views["t.parent"].waiting_on) == 1
    release.set()
    done = await engine.wait_for_task(parent.id)
    assert outcome(done) == Completed(["completed", "faulted"])
    await engine.close()


async def test_fail_fast_marks_the_remaining_children_and_resumes_the_waiter(
    tmp_path: Path,
) -> None:
    aborted: list[str] = []
    never = asyncio.Event()

    async def slow(task: Task, rt: TaskRuntime) -> None:
        await never.wait()

    async def compensate(task: Task, rt: TaskRuntime) -> None:
        aborted.append(f"compensated {task.input}")
        await rt.abort("compensated")

    async def declined(task: Task, rt: TaskRuntime) -> None:
        await rt.fail("card declined")

    slow_def = define_task("t.slow", phases={"start": slow}, abort=compensate)
    bad_def = define_task("t.declined", phases={"start": declined})
    spawn, join = _parent_of([("t.slow", "a"), ("t.declined", None), ("t.slow", "b")], "fail_fast")
    parent_def = define_task("t.checkout", phases={"spawn": spawn, "join": join})
    world = World(tmp_path)
    engine = await world.open(slow_def, bad_def, parent_def)
    parent = await engine.create_task(parent_def)
    done = await engine.wait_for_task(parent.id)
    kinds = outcome(done).result
    assert kinds[1] == "failed"
    await engine.wait_for_idle()
    assert sorted(aborted) == ["compensated a", "compensated b"]
    children = (await engine.session.storage.scan_tasks(TaskQuery(kind="t.slow"))).items
    assert [type(outcome(c)).__name__ for c in children] == ["Aborted", "Aborted"]
    await engine.close()


async def test_a_timed_wait_holds_no_invocation_and_wakes_when_the_clock_passes(
    tmp_path: Path,
) -> None:
    ticks: list[int] = []

    async def tick(task: Task, rt: TaskRuntime) -> None:
        n = int(task.checkpoint["n"])  # type: ignore[call-overload,index]
        ticks.append(n)
        if n == 3:
            await rt.complete(n)
        else:
            await rt.sleep_until(rt.now() + 1000, {"phase": "tick", "n": n + 1})

    ticker = define_task(
        "t.tick", phases={"tick": tick}, initial=lambda _: {"phase": "tick", "n": 1}
    )
    world = World(tmp_path)
    engine = await world.open(ticker)
    start = world.clock.now()
    task = await engine.create_task(ticker)
    await until(lambda: ticks == [1])
    await settle()
    assert engine.scheduler._invocations == {}
    assert engine.next_wake() == start + 1000
    world.clock.advance(999)
    await settle()
    assert ticks == [1]
    world.clock.advance(1)
    await until(lambda: ticks == [1, 2])
    world.clock.advance(1000)
    done = await engine.wait_for_task(task.id)
    assert outcome(done) == Completed(3) and ticks == [1, 2, 3]
    assert engine.next_wake() is None
    await engine.close()


async def test_waits_refuse_themselves_and_fail_fast_over_tasks_not_owned(tmp_path: Path) -> None:
    errors: list[str] = []

    async def selfish(task: Task, rt: TaskRuntime) -> None:
        for on, policy in (
            ((task.id,), "all_settled"),
            ((task.id - 1,), "fail_fast"),
            ((10**6,), "all_settled"),
        ):
            try:
                await rt.commit(
                    lambda tx, cur, on=on, policy=policy: Waiting({"phase": "start"}, on, policy)
                )  # type: ignore[misc]
            except Exception as e:
                errors.append(type(e).__name__)
        await rt.complete()

    selfish_def = define_task("t.selfish", phases={"start": selfish})
    world = World(tmp_path)
    engine = await world.open(selfish_def)
    await engine.create_task(selfish_def)
    task = await engine.create_task(selfish_def)
    await engine.wait_for_task(task.id)
    assert errors[-3:] == ["TaskStateError", "TaskStateError", "TaskNotFound"]
    await engine.close()


# --------------------------------------------------------------------------- scheduling


async def test_kicks_coalesce_into_one_reservation_commit(tmp_path: Path) -> None:
    started: list[int] = []
    hold = asyncio.Event()

    async def work(task: Task, rt: TaskRuntime) -> None:
        started.append(task.id)
        await hold.wait()
        await rt.complete()

    work_def = define_task("t.work", phases={"start": work})
    world = World(tmp_path)
    engine = await world.open(work_def, resume=False)

    async def create_many(tx: Tx) -> None:
        for _ in range(10):
            await tx.create_task(work_def)

    await engine.commit(create_many)
    assert world.faulty is not None
    before = world.faulty.commits
    for _ in range(50):
        engine.scheduler.kick()
    engine.resume()
    await until(lambda: len(started) == 10)
    assert world.faulty.commits == before + 1  # one reservation for all ten
    hold.set()
    await engine.wait_for_idle()
    await engine.close()


async def test_opening_runs_nothing_until_resume(tmp_path: Path) -> None:
    calls: list[int] = []

    async def count(task: Task, rt: TaskRuntime) -> None:
        calls.append(task.id)
        await rt.complete()

    count_def = define_task("t.count", phases={"start": count})
    world = World(tmp_path)
    engine = await world.open(count_def, resume=False)
    task = await engine.create_task(count_def)
    await settle()
    assert calls == [] and engine.inspect().scheduling == "paused"
    assert engine.next_wake() == world.clock.now()
    engine.resume()
    await engine.wait_for_task(task.id)
    assert calls == [task.id]
    await engine.close()


async def test_waiting_for_a_task_enables_scheduling_and_cancelling_the_wait_leaves_the_task(
    tmp_path: Path,
) -> None:
    release = asyncio.Event()

    async def slow(task: Task, rt: TaskRuntime) -> None:
        await release.wait()
        await rt.complete("done")

    slow_def = define_task("t.slow", phases={"start": slow})
    world = World(tmp_path)
    engine = await world.open(slow_def, resume=False)
    task = await engine.create_task(slow_def)
    waiter = asyncio.ensure_future(engine.wait_for_task(task.id))
    await until(lambda: engine.inspect().tasks[0].state == "running")
    waiter.cancel()
    await settle()
    release.set()
    done = await engine.wait_for_task(task.id)
    assert outcome(done) == Completed("done")
    with pytest.raises(TaskNotFound):
        await engine.wait_for_task(10**6)
    await engine.close()


async def test_idle_ignores_background_tasks(tmp_path: Path) -> None:
    forever = asyncio.Event()

    async def background(task: Task, rt: TaskRuntime) -> None:
        await forever.wait()

    async def quick(task: Task, rt: TaskRuntime) -> None:
        await rt.complete()

    bg_def = define_task("t.bg", phases={"start": background})
    quick_def = define_task("t.quick", phases={"start": quick})
    world = World(tmp_path)
    engine = await world.open(bg_def, quick_def)
    await engine.create_task(bg_def, background=True)
    await engine.create_task(quick_def)
    await asyncio.wait_for(engine.wait_for_idle(), 5)
    assert engine.scheduler.idle()
    await engine.close()


async def test_the_signal_fires_on_abort_and_the_clock_is_the_injected_one(tmp_path: Path) -> None:
    seen: dict[str, Any] = {}

    async def watch(task: Task, rt: TaskRuntime) -> None:
        seen["now"] = rt.now()
        try:
            await rt.signal.wait()
        finally:
            seen["reason"] = rt.signal.reason

    watch_def = define_task("t.watch", phases={"start": watch})
    world = World(tmp_path)
    engine = await world.open(watch_def)
    task = await engine.create_task(watch_def)
    await until(lambda: "now" in seen)
    assert seen["now"] == world.clock.now()
    assert await engine.abort_task(task.id) == "marked"
    assert seen["reason"] == "aborted"
    done = await engine.wait_for_task(task.id)
    assert outcome(done).kind == "aborted"
    await engine.close()


async def test_an_abort_mark_landing_before_the_job_first_steps_still_aborts_the_task(
    tmp_path: Path,
) -> None:
    """The mark lands in the loop step before the new invocation's first one, so its job
    is cancelled without ever running: its end must still be seen (the drain that
    reserves the abort waits for it), or the task would stay running forever."""
    ran: list[int] = []

    async def work(task: Task, rt: TaskRuntime) -> None:
        ran.append(task.id)
        await rt.complete("ran")

    work_def = define_task("t.work", phases={"start": work})
    world = World(tmp_path)
    engine = await world.open(work_def)
    scheduler = engine.scheduler
    start = scheduler._start
    marks: list[asyncio.Future[str]] = []

    def start_after_an_abort_was_queued(inv: Any) -> None:
        if not marks:  # the mark's commit is queued before the job's first step
            marks.append(asyncio.ensure_future(engine.abort_task(inv.task_id)))
        start(inv)

    scheduler._start = start_after_an_abort_was_queued  # type: ignore[method-assign]
    task = await engine.create_task(work_def)
    done = await asyncio.wait_for(engine.wait_for_task(task.id), timeout=5)
    assert await marks[0] == "marked"
    assert ran == [] and outcome(done).kind == "aborted"
    await engine.close()


# --------------------------------------------------------------------------- close and reopen


async def test_close_stops_invocations_and_rejects_their_commits(tmp_path: Path) -> None:
    got: list[str] = []
    started = asyncio.Event()

    async def stubborn(task: Task, rt: TaskRuntime) -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            try:
                await rt.complete("sneaky")
            except (SessionClosed, InvocationEnded, TaskStateError) as e:
                got.append(type(e).__name__)
            raise

    stubborn_def = define_task("t.stubborn", phases={"start": stubborn})
    world = World(tmp_path)
    engine = await world.open(stubborn_def)
    task = await engine.create_task(stubborn_def)
    await started.wait()
    await engine.close()
    assert got == ["SessionClosed"]
    with pytest.raises(SessionClosed):
        await engine.create_task(stubborn_def)
    with pytest.raises(SessionClosed):
        engine.resume()
    engine = await world.open(resume=False)
    stored = await engine.task(task.id)
    assert stored is not None and stored.state == Pending({"phase": "start"})
    await engine.close()


async def test_waits_reject_when_the_engine_closes(tmp_path: Path) -> None:
    async def forever(task: Task, rt: TaskRuntime) -> None:
        await asyncio.Event().wait()

    forever_def = define_task("t.forever", phases={"start": forever})
    world = World(tmp_path)
    engine = await world.open(forever_def)
    task = await engine.create_task(forever_def)
    waiting = asyncio.ensure_future(engine.wait_for_task(task.id))
    idle = asyncio.ensure_future(engine.wait_for_idle())
    await settle()
    await engine.close()
    for fut in (waiting, idle):
        with pytest.raises(SessionClosed):
            await fut


async def test_runtime_calls_after_the_invocation_ended_are_rejected(tmp_path: Path) -> None:
    kept: list[TaskRuntime] = []

    async def leak(task: Task, rt: TaskRuntime) -> None:
        kept.append(rt)
        await rt.complete()

    leak_def = define_task("t.leak", phases={"start": leak})
    world = World(tmp_path)
    engine = await world.open(leak_def)
    task = await engine.create_task(leak_def)
    await engine.wait_for_task(task.id)
    await settle()
    with pytest.raises(InvocationEnded):
        await kept[0].complete()
    with pytest.raises(InvocationEnded):
        await kept[0].task(task.id)
    await engine.close()


# --------------------------------------------------------------------------- versioning


async def test_a_task_without_a_definition_is_blocked_until_one_is_installed(
    tmp_path: Path,
) -> None:
    async def run(task: Task, rt: TaskRuntime) -> None:
        await rt.complete("ran")

    v1 = define_task("t.versioned", phases={"start": run})
    world = World(tmp_path)
    engine = await world.open(v1)
    engine.scheduler._enabled = False  # create it without running it
    task = await engine.create_task(v1)
    await engine.close()

    world.registry.uninstall("t.versioned")
    engine = await world.open()
    await settle()
    (view,) = engine.inspect().tasks
    assert (view.state, view.reason) == ("blocked", "missing_task")
    assert engine.next_wake() is None
    idle = asyncio.ensure_future(engine.wait_for_idle())
    await settle()
    assert not idle.done()  # blocked work is live work
    world.registry.install(v1)
    done = await engine.wait_for_task(task.id)
    assert outcome(done) == Completed("ran")
    await idle
    await engine.close()


async def test_versions_older_blocked_newer_migrated_failures_blocked_until_a_new_definition(
    tmp_path: Path,
) -> None:
    ran: list[Any] = []

    async def run(task: Task, rt: TaskRuntime) -> None:
        ran.append((task.version, task.input, task.checkpoint))
        await rt.complete()

    world = World(tmp_path)
    v2 = define_task("t.v", version=2, phases={"start": run})
    engine = await world.open(v2, resume=False)
    task = await engine.create_task(v2, {"a": 1})
    await engine.close()

    v1 = define_task("t.v", version=1, phases={"start": run})
    world.registry.install(v1)
    engine = await world.open(resume=False)
    assert [(v.state, v.reason) for v in engine.inspect().tasks] == [("blocked", "task_too_old")]
    await engine.close()

    def broken(input: Any, checkpoint: Any, from_version: int) -> Any:
        raise ValueError("cannot migrate")

    world.registry.install(define_task("t.v", version=3, phases={"start": run}, migrate=broken))
    engine = await world.open()
    await settle()
    assert [(v.state, v.reason) for v in engine.inspect().tasks] == [
        ("blocked", "migration_failed")
    ]
    stored = await engine.task(task.id)
    assert stored is not None and stored.version == 2 and stored.input == {"a": 1}
    assert any("cannot migrate" in str(e) for e in world.reports)

    def migrate(input: Any, checkpoint: Any, from_version: int) -> Any:
        assert from_version == 2
        return {"a": input["a"], "migrated": True}, {**checkpoint, "from": from_version}

    world.registry.install(define_task("t.v", version=3, phases={"start": run}, migrate=migrate))
    done = await engine.wait_for_task(task.id)
    assert outcome(done) == Completed(None)
    assert ran == [(3, {"a": 1, "migrated": True}, {"phase": "start", "from": 2})]
    await engine.close()


async def test_an_abort_orphans_a_blocked_task_and_nothing_else_does(tmp_path: Path) -> None:
    async def run(task: Task, rt: TaskRuntime) -> None:
        await rt.complete()

    gone = define_task("t.gone", phases={"start": run})
    world = World(tmp_path)
    engine = await world.open(gone, resume=False)
    task = await engine.create_task(gone)
    world.registry.uninstall("t.gone")
    engine.resume()
    await settle()
    stored = await engine.task(task.id)
    assert stored is not None and stored.live
    assert await engine.abort_task(task.id) == "orphaned"
    done = await engine.wait_for_task(task.id)
    assert outcome(done) == Orphaned("missing_task")
    assert await engine.abort_task(task.id) == "terminal"
    await engine.close()


async def test_a_replacement_definition_takes_over_at_the_next_phase_boundary(
    tmp_path: Path,
) -> None:
    went_on = asyncio.Event()
    log: list[str] = []

    async def old_first(task: Task, rt: TaskRuntime) -> None:
        log.append("old first")
        await went_on.wait()
        await rt.memo("kept", True)
        await rt.checkpoint({"phase": "second"})

    async def old_second(task: Task, rt: TaskRuntime) -> None:
        log.append("old second")
        await rt.complete("old")

    async def new_second(task: Task, rt: TaskRuntime) -> None:
        log.append(f"new second, memo {await rt.memo('kept')}")
        await rt.complete("new")

    old = define_task("t.hot", phases={"first": old_first, "second": old_second})
    new = define_task("t.hot", phases={"first": old_first, "second": new_second})
    world = World(tmp_path)
    engine = await world.open(old)
    task = await engine.create_task(old)
    await until(lambda: log == ["old first"])
    world.registry.install(new)
    went_on.set()
    done = await engine.wait_for_task(task.id)
    assert outcome(done) == Completed("new")
    assert log == ["old first", "new second, memo True"]
    await engine.close()


# --------------------------------------------------------------------------- children


async def test_a_completed_owner_is_held_completing_until_its_children_end(tmp_path: Path) -> None:
    release = asyncio.Event()

    async def child(task: Task, rt: TaskRuntime) -> None:
        await release.wait()
        await rt.complete("child")

    async def owner(task: Task, rt: TaskRuntime) -> None:
        async def fn(tx: Tx, current: Task) -> Completed:
            await tx.create_task("t.child", owner=current.id)
            return Completed("owner")

        await rt.commit(fn)

    child_def = define_task("t.child", phases={"start": child})
    owner_def = define_task("t.owner", phases={"start": owner})
    world = World(tmp_path)
    engine = await world.open(child_def, owner_def)
    task = await engine.create_task(owner_def)
    await until(lambda: any(v.state == "completing" for v in engine.inspect().tasks))
    stored = await engine.task(task.id)
    assert stored is not None and stored.status == "completing"
    release.set()
    done = await engine.wait_for_task(task.id)
    assert outcome(done) == Completed("owner")
    await engine.close()


async def test_next_wake_is_none_now_or_the_earliest_deadline(tmp_path: Path) -> None:
    async def nap(task: Task, rt: TaskRuntime) -> None:
        if task.checkpoint.get("slept"):  # type: ignore[union-attr]
            await rt.complete()
        else:
            await rt.sleep_until(int(task.input), {"phase": "start", "slept": True})  # type: ignore[arg-type]

    nap_def = define_task("t.nap", phases={"start": nap})
    world = World(tmp_path)
    engine = await world.open(nap_def)
    assert engine.next_wake() is None
    now = world.clock.now()
    await engine.create_task(nap_def, now + 5000)
    await engine.create_task(nap_def, now + 3000)
    await until(
        lambda: (
            all(v.state == "waiting" for v in engine.inspect().tasks)
            and len(engine.inspect().tasks) == 2
        )
    )
    await settle()
    assert engine.next_wake() == now + 3000
    await engine.close()
    # Derivable from storage alone: a fresh engine that has not resumed knows it.
    engine = await world.open(resume=False)
    assert engine.next_wake() == now + 3000
    world.clock.set(now + 3000)
    assert engine.next_wake() == now + 3000  # due now
    engine.resume()
    await until(lambda: len(engine.inspect().tasks) == 1)
    assert engine.next_wake() == now + 5000
    await engine.close()
