"""The session's task indexes answer as a scan of every live task would.

``owned_live_work`` (core.tasks.ownership), ``Session.owned_by`` and
``Session.waiting_on`` read indexes kept in step with commits (so a commit costs the size
of the answer, not of the task table). This test runs an ownership tree with every kind
of edge — a child by ``owner``, grandchildren, an ordinary and a background task in a
conversation the root owns, an owner that settles while its child is live
(``completing``), a reopen — and after every commit, and before every commit with its
staged writes, compares each answer with the reference scan.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from core.records import Completed, Task, Terminal, Waiting
from core.session import Session, Tx
from core.session.transaction import TaskLayer, TaskSpec
from core.tasks import TaskRuntime, define_task
from core.tasks.ownership import owned_live_work, owners
from tests.core.support import World, until


def _owned_live_work_by_scan(session: Session, task_id: int, staged: dict[int, Task]) -> bool:
    pool = {**session.tasks, **staged}
    for other in pool.values():
        if other.id == task_id or other.background or isinstance(other.state, Terminal):
            continue
        if any(o.id == task_id for o in owners(session, other, staged)):
            return True
    return False


SEEN: set[int] = set()  # every task id met so far: ended ones must drop out of answers


def _check(session: Session, staged: dict[int, Task], problems: list[str]) -> None:
    SEEN.update(session.tasks, staged)
    ids = set(SEEN)
    for task_id in ids:
        got = owned_live_work(session, task_id, staged)
        want = _owned_live_work_by_scan(session, task_id, staged)
        if got != want:
            problems.append(f"owned_live_work({task_id}) is {got}, the scan says {want}")
    if staged:
        return  # the two plain indexes describe committed state only
    for task_id in ids:
        by_owner = {t.id for t in session.tasks.values() if t.owner == task_id}
        if set(session.owned_by(task_id)) != by_owner:
            problems.append(f"owned_by({task_id}) is {session.owned_by(task_id)}, not {by_owner}")
        waiting = {
            t.id
            for t in session.tasks.values()
            if isinstance(t.state, Waiting) and task_id in t.state.on
        }
        if set(session.waiting_on(task_id)) != waiting:
            problems.append(f"waiting_on({task_id}): {session.waiting_on(task_id)}, not {waiting}")


def _watch(session: Session, problems: list[str]) -> None:
    session.subscribe(lambda _event: _check(session, {}, problems))

    session.task_layer = _Checking(
        session.task_layer, lambda tx: _check(session, dict(tx.tasks), problems)
    )


class _Checking:
    """The engine's task layer, checking the indexes after it joined each commit."""

    def __init__(self, inner: TaskLayer | None, check: Callable[[Tx], None]) -> None:
        assert inner is not None
        self.inner = inner
        self.check = check

    async def create_task(self, tx: Tx, spec: TaskSpec) -> Task:
        return await self.inner.create_task(tx, spec)

    async def before_prepare(self, tx: Tx) -> None:
        await self.inner.before_prepare(tx)
        self.check(tx)


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
async def test_indexes_agree_with_a_scan_through_a_tree_and_a_reopen(
    tmp_path: Path, backend: str
) -> None:
    gate = asyncio.Event()
    late = asyncio.Event()  # holds ``d``: then the root's only live work is in its conversation
    checked = 0
    SEEN.clear()

    async def leaf(task: Task, rt: TaskRuntime) -> None:
        await (late if task.input == "d" else gate).wait()
        await rt.complete(task.input)

    async def middle(task: Task, rt: TaskRuntime) -> None:
        if task.checkpoint == {"phase": "start"}:

            async def fn(tx: Tx, current: Task) -> Waiting:
                a = await tx.create_task("ix.leaf", "g1", owner=current.id)
                b = await tx.create_task("ix.leaf", "g2", owner=current.id)
                return Waiting({"phase": "start", "waited": True}, (a.id, b.id))

            await rt.commit(fn)
        else:
            await rt.complete("middle")

    async def root(task: Task, rt: TaskRuntime) -> None:
        if task.checkpoint != {"phase": "start"}:
            await rt.complete("root")
            return

        async def fn(tx: Tx, current: Task) -> Waiting:
            m = await tx.create_task("ix.middle", owner=current.id)
            conv = await tx.create_conversation(owner_task_id=current.id)
            d = await tx.create_task("ix.leaf", "d", conversation_id=conv.id)
            await tx.create_task("ix.leaf", "e", conversation_id=conv.id, background=True)
            # An owner settling with live work is held ``completing``.
            await tx.create_task("ix.quick")
            return Waiting({"phase": "start", "waited": True}, (m.id, d.id))

        await rt.commit(fn)

    async def quick(task: Task, rt: TaskRuntime) -> None:
        async def fn(tx: Tx, current: Task) -> Completed:
            await tx.create_task("ix.leaf", "held", owner=current.id)
            return Completed("quick")

        await rt.commit(fn)

    defs = [
        define_task("ix.leaf", phases={"start": leaf}),
        define_task("ix.middle", phases={"start": middle}),
        define_task("ix.root", phases={"start": root}),
        define_task("ix.quick", phases={"start": quick}),
    ]
    world = World(tmp_path, backend)  # type: ignore[arg-type]
    problems: list[str] = []
    engine = await world.open(*defs)
    _watch(engine.session, problems)
    top = await engine.create_task("ix.root")
    # Root, middle, quick (completing), d, e, g1, g2 and quick's child are all live.
    await until(lambda: len(engine.session.tasks) == 8)
    checked += 1
    await engine.close()

    # A reopen rebuilds the indexes from storage (and running tasks become pending).
    engine = await world.open(*defs)
    _watch(engine.session, problems)
    _check(engine.session, {}, problems)
    gate.set()
    middle_id = next(t.id for t in engine.session.tasks.values() if t.kind == "ix.middle")
    await engine.wait_for_task(middle_id)
    assert owned_live_work(engine.session, top.id)
    late.set()
    done = await engine.wait_for_task(top.id)
    assert done.state == Terminal(Completed("root"))
    await until(lambda: not engine.session.tasks)
    _check(engine.session, {}, problems)
    await engine.close()
    assert checked and not problems, problems[:5]
