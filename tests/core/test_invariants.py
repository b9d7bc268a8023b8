"""One guard test per invariant (docs/design.md) the kernel owns: 1, 2, 3, 5, 6, 10-13, 15.

Invariant 16 (core makes no OS calls) is guarded in tests/architecture.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from core.errors import InvocationEnded, SessionPoisoned, StorageRejected, TaskStateError
from core.records import Aborted, Completed, Faulted, Pending, Task, Terminal, Waiting
from core.session import Tx, define_doc, ensure_outside_commit, in_commit
from core.storage import DocumentCreate, EntryQuery, TaskQuery
from core.tasks import TaskRuntime, define_task
from core.testing.wrappers import CommitFault
from tests.core.support import World, settle, until

NOTES = define_doc("inv.notes", initial=lambda: [])


def _writes_everything(task_id_box: list[int]) -> object:
    async def phase(task: Task, rt: TaskRuntime) -> None:
        async def fn(tx: Tx, current: Task) -> Completed:
            await tx.append_entry(current.conversation_id, "custom", data={"from": current.id})
            child = await tx.create_task("inv.child", owner=current.id)
            task_id_box.append(child.id)
            doc = await tx.doc(NOTES, current.conversation_id)
            doc.value.append("note")  # type: ignore[union-attr]
            return Completed("all or nothing")

        await rt.commit(fn)

    return phase


async def _child(task: Task, rt: TaskRuntime) -> None:
    await rt.complete()


CHILD = define_task("inv.child", phases={"start": _child})


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
async def test_invariant_01_a_commit_is_atomic(tmp_path: Path, backend: str) -> None:
    """Entry + child task + document change + outcome land together or not at all."""
    box: list[int] = []
    writer = define_task("inv.writer", phases={"start": _writes_everything(box)})  # type: ignore[dict-item]
    world = World(tmp_path, backend)  # type: ignore[arg-type]
    engine = await world.open(
        writer,
        CHILD,
        faults=[
            CommitFault(
                "before",
                match=lambda w: any(isinstance(x, Task) and x.kind == "inv.child" for x in w),
            )
        ],
    )
    task = await engine.create_task(writer)
    done = await engine.wait_for_task(task.id)
    # The rejected phase commit left nothing: no entry, no child, no document, and the
    # phase (which raised StorageRejected) faulted the task.
    assert isinstance(done.state, Terminal) and isinstance(done.state.outcome, Faulted)
    storage = engine.session.storage
    assert (await storage.scan_entries(EntryQuery(1))).items == []
    assert await storage.task(box[0]) is None
    assert await storage.find_document("inv.notes", "conversation", 1) is None
    await engine.close()
    # And when it lands, every part is there.
    world2 = World(tmp_path / "ok", backend)  # type: ignore[arg-type]
    (tmp_path / "ok").mkdir()
    box.clear()
    engine = await world2.open(writer, CHILD)
    task = await engine.create_task(writer)
    done = await engine.wait_for_task(task.id)
    assert isinstance(done.state, Terminal) and done.state.outcome == Completed("all or nothing")
    storage = engine.session.storage
    assert [e.data for e in (await storage.scan_entries(EntryQuery(1))).items] == [
        {"from": task.id}
    ]
    assert await storage.task(box[0]) is not None
    assert await engine.session.document_value(NOTES, 1) == ["note"]
    await engine.close()


async def test_invariant_02_only_committed_state_is_observable(tmp_path: Path) -> None:
    """A commit storage refused leaves no trace in live tasks, documents, views or events."""
    seen_in_phase: dict[str, object] = {}

    async def phase(task: Task, rt: TaskRuntime) -> None:
        async def fn(tx: Tx, current: Task) -> dict[str, object]:
            doc = await tx.doc(NOTES, 1)
            doc.value.append("staged")  # type: ignore[union-attr]
            return {"phase": "next"}

        with pytest.raises(StorageRejected):
            await rt.commit(fn)
        seen_in_phase["doc"] = await rt.session.document_value(NOTES, 1)
        seen_in_phase["checkpoint"] = rt.session.tasks[task.id].checkpoint
        seen_in_phase["inspect"] = [v.record.checkpoint for v in engine.inspect().tasks]
        await rt.complete()

    definition = define_task("inv.observe", phases={"start": phase, "next": phase})
    world = World(tmp_path)
    staging_the_note = CommitFault(
        "before", match=lambda writes: any(isinstance(w, DocumentCreate) for w in writes)
    )
    engine = await world.open(definition, faults=[staging_the_note])
    events: list[object] = []
    engine.session.subscribe(events.append)
    task = await engine.create_task(definition)
    await engine.wait_for_task(task.id)
    assert seen_in_phase == {
        "doc": [],
        "checkpoint": {"phase": "start"},
        "inspect": [{"phase": "start"}],
    }
    assert all(not e.documents for e in events)  # type: ignore[attr-defined]
    await engine.close()


async def test_invariant_03_effects_never_run_inside_a_commit_callback(tmp_path: Path) -> None:
    """Phases and abort handlers start outside commit callbacks; effects are refused inside."""
    observed: list[tuple[str, bool]] = []

    async def phase(task: Task, rt: TaskRuntime) -> None:
        observed.append(("phase", in_commit()))
        await asyncio.Event().wait()

    async def abort(task: Task, rt: TaskRuntime) -> None:
        observed.append(("abort", in_commit()))
        await rt.abort()

    definition = define_task("inv.effects", phases={"start": phase}, abort=abort)
    world = World(tmp_path)
    engine = await world.open(definition)
    task = await engine.create_task(definition)
    await until(lambda: observed == [("phase", False)])
    await engine.abort_task(task.id)
    await engine.wait_for_task(task.id)
    assert observed == [("phase", False), ("abort", False)]

    def effect_inside(tx: Tx) -> None:
        ensure_outside_commit("a model request")

    with pytest.raises(RuntimeError, match="must not run inside a commit callback"):
        await engine.commit(effect_inside)
    await engine.close()


async def test_invariant_05_a_phase_without_durable_progress_faults(tmp_path: Path) -> None:
    async def idle_phase(task: Task, rt: TaskRuntime) -> None:
        await rt.commit(lambda tx, current: None)  # commits nothing about the task

    definition = define_task("inv.noprogress", phases={"start": idle_phase})
    world = World(tmp_path)
    engine = await world.open(definition)
    task = await engine.create_task(definition)
    done = await engine.wait_for_task(task.id)
    assert isinstance(done.state, Terminal)
    assert done.state.outcome == Faulted(
        done.state.outcome.error  # type: ignore[union-attr]
    )
    assert done.state.outcome.error.message == (  # type: ignore[union-attr]
        "Task inv.noprogress phase start returned without durable progress"
    )
    await engine.close()


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
async def test_invariant_06_open_turns_running_into_pending_and_runs_nothing(
    tmp_path: Path, backend: str
) -> None:
    calls: list[str] = []
    entered = asyncio.Event()

    async def phase(task: Task, rt: TaskRuntime) -> None:
        calls.append("phase")
        await rt.memo("m", 1)
        entered.set()
        await asyncio.Event().wait()

    definition = define_task("inv.reopen", phases={"start": phase})
    world = World(tmp_path, backend)  # type: ignore[arg-type]
    engine = await world.open(definition)
    task = await engine.create_task(definition)
    await entered.wait()

    async def mark(tx: Tx) -> None:  # an abort mark a crash left before its run joined
        from dataclasses import replace

        await tx.put_task(replace(engine.session.tasks[task.id], abort_requested=True))

    engine.scheduler.closing = True  # keep the mark from being acted on before the "crash"
    await engine.commit(mark)
    await world.crash(engine)

    engine = await world.open(resume=False)
    await settle()
    stored = await engine.task(task.id)
    assert stored is not None
    assert stored.state == Pending({"phase": "start"})
    assert stored.memos == {"m": 1} and stored.abort_requested
    assert calls == ["phase"]  # opening ran nothing
    await engine.close()


async def test_invariant_10_a_run_invocation_never_commits_after_its_abort_mark(
    tmp_path: Path,
) -> None:
    outcomes: list[str] = []
    started = asyncio.Event()

    async def phase(task: Task, rt: TaskRuntime) -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            # A handler that ignores cancellation and shields its commit still cannot
            # commit: the gate on the line sees the durable mark.
            try:
                await asyncio.shield(rt.complete("too late"))
            except TaskStateError as e:
                outcomes.append(str(e))
            try:
                await asyncio.shield(rt.memo("late", 1))
            except TaskStateError as e:
                outcomes.append(str(e))
            raise

    definition = define_task("inv.gate", phases={"start": phase})
    world = World(tmp_path)
    engine = await world.open(definition)
    task = await engine.create_task(definition)
    await started.wait()
    assert await engine.abort_task(task.id) == "marked"
    done = await engine.wait_for_task(task.id)
    assert done.state == Terminal(Aborted())
    assert outcomes == [
        f"Task {task.id} has a durable abort mark",
        f"Task {task.id} has a durable abort mark",
    ]
    await engine.close()


async def test_invariant_10_a_commit_queued_behind_the_mark_is_rejected(tmp_path: Path) -> None:
    rejected: list[str] = []
    started = asyncio.Event()
    go = asyncio.Event()

    async def phase(task: Task, rt: TaskRuntime) -> None:
        started.set()
        await go.wait()
        landing = asyncio.ensure_future(rt.complete("queued behind the mark"))
        try:
            await asyncio.shield(landing)
        except asyncio.CancelledError:
            # The mark cancelled this invocation; its queued commit still reaches the
            # gate, which must refuse it (the mark, or the ended invocation).
            with pytest.raises((TaskStateError, InvocationEnded)) as refused:
                await landing
            rejected.append(type(refused.value).__name__)
            raise

    definition = define_task("inv.race", phases={"start": phase})
    world = World(tmp_path)
    engine = await world.open(definition)
    task = await engine.create_task(definition)
    await started.wait()
    assert world.faulty is not None
    world.faulty.hold_commits()
    marking = asyncio.ensure_future(engine.abort_task(task.id))
    await settle()  # the mark holds the line, waiting in storage
    go.set()
    await settle()  # the phase's commit queues behind it
    world.faulty.release_commits()
    await marking
    done = await engine.wait_for_task(task.id)
    assert done.state == Terminal(Aborted())
    assert len(rejected) == 1
    await engine.close()


async def test_invariant_11_abort_runs_bottom_up_and_completing_holds_the_owner(
    tmp_path: Path,
) -> None:
    order: list[str] = []

    async def child(task: Task, rt: TaskRuntime) -> None:
        await asyncio.Event().wait()

    async def child_abort(task: Task, rt: TaskRuntime) -> None:
        owner = await rt.task(task.owner)  # type: ignore[arg-type]
        assert owner is not None and owner.live
        order.append(f"child {task.input}")
        await asyncio.sleep(0.01 if task.input == "a" else 0)
        await rt.abort("child")

    async def parent(task: Task, rt: TaskRuntime) -> None:
        async def fn(tx: Tx, current: Task) -> object:
            a = await tx.create_task("inv.kid", "a", owner=current.id)
            b = await tx.create_task("inv.kid", "b", owner=current.id)
            from core.records import Waiting

            return Waiting({"phase": "start"}, (a.id, b.id))

        await rt.commit(fn)

    async def parent_abort(task: Task, rt: TaskRuntime) -> None:
        kids = (await rt.session.storage.scan_tasks(TaskQuery(kind="inv.kid"))).items
        assert all(k.status == "terminal" for k in kids)
        order.append("parent")
        await rt.abort("parent")

    kid = define_task("inv.kid", phases={"start": child}, abort=child_abort)
    par = define_task("inv.parent", phases={"start": parent}, abort=parent_abort)
    world = World(tmp_path)
    engine = await world.open(kid, par)
    task = await engine.create_task(par)
    await until(lambda: len(engine.inspect().tasks) == 3)
    await engine.abort_task(task.id)
    done = await engine.wait_for_task(task.id)
    assert done.state == Terminal(Aborted("parent"))
    assert sorted(order[:2]) == ["child a", "child b"] and order[2] == "parent"

    # Completing: an owner whose outcome is decided waits for its ordinary owned work.
    release = asyncio.Event()

    async def slow_child(task: Task, rt: TaskRuntime) -> None:
        await release.wait()
        await rt.complete()

    async def quick_owner(task: Task, rt: TaskRuntime) -> None:
        async def fn(tx: Tx, current: Task) -> Completed:
            await tx.create_task("inv.slowkid", owner=current.id)
            return Completed("held")

        await rt.commit(fn)

    world.registry.install(define_task("inv.slowkid", phases={"start": slow_child}))
    owner_def = define_task("inv.owner", phases={"start": quick_owner})
    world.registry.install(owner_def)
    owner = await engine.create_task(owner_def)
    await until(lambda: any(v.state == "completing" for v in engine.inspect().tasks))
    assert (await engine.task(owner.id)).status == "completing"  # type: ignore[union-attr]
    release.set()
    held = await engine.wait_for_task(owner.id)
    assert held.state == Terminal(Completed("held"))
    await engine.close()


async def test_invariant_11_holds_across_a_crash_while_children_abort(tmp_path: Path) -> None:
    """The process dies while one child's abort handler runs: after reopening that handler
    runs again, the child that had finished aborting does not, and the owner's handler
    still runs last."""
    calls: list[str] = []
    stuck = asyncio.Event()

    async def child(task: Task, rt: TaskRuntime) -> None:
        await asyncio.Event().wait()

    async def child_abort(task: Task, rt: TaskRuntime) -> None:
        calls.append(f"child {task.input}")
        if task.input == "slow":
            stuck.set()
            await hold.wait()  # the crash comes while this handler runs
        await rt.abort("child")

    async def parent(task: Task, rt: TaskRuntime) -> None:
        async def fn(tx: Tx, current: Task) -> Waiting:
            a = await tx.create_task("crash.kid", "quick", owner=current.id)
            b = await tx.create_task("crash.kid", "slow", owner=current.id)
            return Waiting({"phase": "start"}, (a.id, b.id))

        await rt.commit(fn)

    async def parent_abort(task: Task, rt: TaskRuntime) -> None:
        kids = (await rt.session.storage.scan_tasks(TaskQuery(kind="crash.kid"))).items
        assert all(k.status == "terminal" for k in kids)
        calls.append("parent")
        await rt.abort("parent")

    definitions = (
        define_task("crash.kid", phases={"start": child}, abort=child_abort),
        define_task("crash.parent", phases={"start": parent}, abort=parent_abort),
    )
    hold = asyncio.Event()
    world = World(tmp_path, "sqlite")
    engine = await world.open(*definitions)
    task = await engine.create_task("crash.parent")
    await until(lambda: len(engine.inspect().tasks) == 3)
    await engine.abort_task(task.id)
    await stuck.wait()
    await until(lambda: len(engine.inspect().tasks) == 2)  # the quick child is terminal
    await world.crash(engine)

    hold.set()
    engine = await world.open(*definitions)
    done = await engine.wait_for_task(task.id)
    assert done.state == Terminal(Aborted("parent"))
    assert calls == ["child quick", "child slow", "child slow", "parent"]
    kids = (await engine.session.storage.scan_tasks(TaskQuery(kind="crash.kid"))).items
    assert kids and all(k.outcome == Aborted("child") for k in kids)  # records: no hash
    await engine.close()


async def test_invariant_12_closing_writes_no_outcome(tmp_path: Path) -> None:
    started = asyncio.Event()

    async def phase(task: Task, rt: TaskRuntime) -> None:
        started.set()
        await asyncio.Event().wait()

    definition = define_task("inv.close", phases={"start": phase})
    world = World(tmp_path, "sqlite")
    engine = await world.open(definition)
    task = await engine.create_task(definition)
    await started.wait()
    assert world.faulty is not None
    commits = world.faulty.commits
    await engine.close()
    assert world.faulty.commits == commits
    engine = await world.open(resume=False)
    stored = await engine.task(task.id)
    assert stored is not None and stored.state == Pending({"phase": "start"})
    await engine.close()


async def test_invariant_13_an_uncertain_storage_failure_poisons_until_reopen(
    tmp_path: Path,
) -> None:
    async def phase(task: Task, rt: TaskRuntime) -> None:
        await rt.checkpoint({"phase": "two"})

    async def two(task: Task, rt: TaskRuntime) -> None:
        await rt.complete("after reopen")

    definition = define_task("inv.poison", phases={"start": phase, "two": two})
    world = World(tmp_path)
    engine = await world.open(definition, faults=[CommitFault("during", nth=3)])
    task = await engine.create_task(definition)
    await until(lambda: engine.session.poisoned is not None)
    with pytest.raises(SessionPoisoned):
        await engine.create_task(definition)
    with pytest.raises(SessionPoisoned):
        await engine.commit(lambda tx: None)
    await world.crash(engine)
    engine = await world.open()
    done = await engine.wait_for_task(task.id)
    assert done.state == Terminal(Completed("after reopen"))
    await engine.close()


async def test_invariant_15_next_wake_is_derivable_from_storage_and_wakes_are_idempotent(
    tmp_path: Path,
) -> None:
    effects: list[int] = []

    async def tick(task: Task, rt: TaskRuntime) -> None:
        n = int(task.checkpoint["n"])  # type: ignore[call-overload,index]
        if await rt.memo(f"did-{n}") is None:
            effects.append(n)
            await rt.memo(f"did-{n}", True)
        if n == 2:
            await rt.complete()
        else:
            await rt.sleep_until(rt.now() + 60_000, {"phase": "tick", "n": n + 1})

    definition = define_task(
        "inv.wake", phases={"tick": tick}, initial=lambda _: {"phase": "tick", "n": 1}
    )
    world = World(tmp_path, "sqlite")
    engine = await world.open(definition)
    task = await engine.create_task(definition)
    await until(lambda: effects == [1])
    await settle()
    due = engine.next_wake()
    assert due == world.clock.now() + 60_000
    await engine.close()  # evicted: nothing in memory remembers the deadline

    world.clock.set(due)  # type: ignore[arg-type]
    expected_wakes = [due, None]  # the second delivery finds nothing left to do
    for expected in expected_wakes:  # the wake is delivered twice, by two processes
        engine = await world.open(resume=False)
        assert engine.next_wake() == expected  # derived from storage alone
        engine.resume()
        engine.scheduler.kick()
        engine.scheduler.kick()
        if expected is not None:
            await engine.wait_for_task(task.id)
        await settle()
        await engine.close()
    engine = await world.open()
    done = await engine.wait_for_task(task.id)
    assert done.state == Terminal(Completed(None))
    assert effects == [1, 2]
    assert engine.next_wake() is None
    await engine.close()
