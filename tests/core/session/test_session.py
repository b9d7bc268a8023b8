"""The session kernel: the mutation line, transaction rules, listeners, failures."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import pytest

from core.errors import (
    InvalidJson,
    ReadAfterWrite,
    SessionClosed,
    SessionPoisoned,
    StorageRejected,
    TaskStateError,
    TransactionSettled,
    UnknownRecord,
    UnknownTaskKind,
)
from core.jsonvalue import JsonObject
from core.records import ConversationRecord, Running, Task, Terminal
from core.session import CommitEvent, Session, TaskSpec, Tx, in_commit
from core.storage import MemoryState, MemoryStorage
from core.storage.sqlite import SqliteStorage
from core.tasks import define_task
from core.tasks.creation import TaskFactory
from core.testing.clock import VirtualClock
from core.testing.wrappers import CommitFault, FaultyStorage
from runtimes.actor.sqlite import Sqlite3Database


async def _noop(task: object, rt: object) -> None:
    return None


NOOP = define_task("test.noop", phases={"start": _noop})


async def open_session(
    state: MemoryState | None = None, faults: list[CommitFault] | None = None
) -> tuple[Session, FaultyStorage]:
    storage = FaultyStorage(MemoryStorage(state or MemoryState()), faults or [])
    session = await Session.open(storage, VirtualClock())
    session.task_layer = TaskFactory({NOOP.name: NOOP}.get)
    return session, storage


async def test_commits_run_one_at_a_time_in_call_order() -> None:
    session, _ = await open_session()
    order: list[str] = []

    async def slow(tx: Tx) -> None:
        order.append("slow:start")
        await asyncio.sleep(0.01)
        await tx.ensure_root()
        order.append("slow:end")

    async def fast(tx: Tx) -> None:
        order.append("fast")

    await asyncio.gather(session.commit(slow), session.commit(fast))
    assert order == ["slow:start", "slow:end", "fast"]


async def test_table_reads_after_the_first_table_write_raise_read_after_write() -> None:
    session, storage = await open_session()

    async def bad(tx: Tx) -> None:
        await tx.ensure_root()
        await tx.task(5)

    with pytest.raises(ReadAfterWrite):
        await session.commit(bad)
    assert storage.commits == 0

    async def reads_first(tx: Tx) -> int:
        assert await tx.conversation(1) is None
        await tx.ensure_root()
        handle_doc = tx.docs  # documents stay usable after writes
        return len(handle_doc)

    assert await session.commit(reads_first) == 0
    assert storage.commits == 1


async def test_a_callback_that_raises_rolls_back_and_leaves_the_session_usable() -> None:
    session, storage = await open_session()

    async def boom(tx: Tx) -> None:
        await tx.ensure_root()
        raise RuntimeError("changed my mind")

    with pytest.raises(RuntimeError):
        await session.commit(boom)
    assert storage.commits == 0
    assert await session.conversation(1) is None
    await session.commit(lambda tx: tx.ensure_root())
    assert await session.conversation(1) == ConversationRecord(1)


async def test_a_transaction_used_after_it_settled_raises() -> None:
    session, _ = await open_session()
    kept: list[Tx] = []
    await session.commit(lambda tx: kept.append(tx))
    with pytest.raises(TransactionSettled):
        await kept[0].ensure_root()


@pytest.mark.parametrize(
    "bad",
    [math.nan, math.inf, -math.inf, (1, 2), {1: "int key"}, b"bytes", {1, 2}, object()],
    ids=["nan", "inf", "-inf", "tuple", "int-key", "bytes", "set", "object"],
)
async def test_non_json_values_are_refused_before_any_write(bad: object) -> None:
    session, storage = await open_session()
    with pytest.raises(InvalidJson):
        await session.commit(lambda tx: tx.create_task(NOOP, {"value": bad}))

    async def entry(tx: Tx) -> None:
        await tx.ensure_root()
        await tx.append_entry(1, "custom", data={"nested": [bad]})

    with pytest.raises(InvalidJson):
        await session.commit(entry)
    assert storage.commits == 0


async def test_unknown_task_kinds_are_refused_with_nothing_written() -> None:
    session, storage = await open_session()
    with pytest.raises(UnknownTaskKind):
        await session.commit(lambda tx: tx.create_task("no.such.task", {}))
    assert storage.commits == 0


async def test_new_owned_work_needs_a_live_owner() -> None:
    session, storage = await open_session()
    owner = await session.commit(lambda tx: tx.create_task(NOOP))
    with pytest.raises(TaskStateError, match="does not exist"):
        await session.commit(lambda tx: tx.create_task(NOOP, owner=10_000))
    with pytest.raises(TaskStateError, match="background"):
        await session.commit(lambda tx: tx.create_task(NOOP, owner=owner.id, background=True))

    async def mark(tx: Tx) -> None:
        from dataclasses import replace

        await tx.put_task(replace(owner, abort_requested=True))

    await session.commit(mark)
    before = storage.commits
    with pytest.raises(TaskStateError, match="abort mark"):
        await session.commit(lambda tx: tx.create_task(NOOP, owner=owner.id))
    assert storage.commits == before


async def test_a_task_conversation_and_kind_never_change_and_terminal_tasks_are_frozen() -> None:
    from dataclasses import replace

    from core.records import Completed

    session, _ = await open_session()

    async def other_conv(tx: Tx) -> ConversationRecord:
        return await tx.create_conversation()

    task = await session.commit(lambda tx: tx.create_task(NOOP))
    conv = await session.commit(other_conv)

    async def move(tx: Tx) -> None:
        await tx.put_task(replace(task, conversation_id=conv.id))

    with pytest.raises(TaskStateError, match="never change"):
        await session.commit(move)

    async def finish(tx: Tx) -> None:
        await tx.put_task(replace(task, state=Terminal(Completed(1))))

    await session.commit(finish)

    async def revive(tx: Tx) -> None:
        await tx.put_task(replace(task, state=Running({"phase": "start"})))

    with pytest.raises(TaskStateError, match="terminal"):
        await session.commit(revive)


async def test_entries_need_an_existing_conversation_and_head_self_marks_the_entry() -> None:
    session, _ = await open_session()
    with pytest.raises(UnknownRecord):
        await session.commit(lambda tx: tx.append_entry(42, "custom"))

    async def write(tx: Tx) -> int:
        await tx.ensure_root()
        entry = await tx.append_entry(1, "custom", head="self", data={"x": 1})
        assert entry.head == entry.id
        return entry.id

    entry_id = await session.commit(write)
    stored = await session.storage.entry(entry_id)
    assert stored is not None and stored.head == entry_id and stored.commit_seq == session.last_seq


async def test_listeners_see_only_commits_that_storage_accepted() -> None:
    session, _ = await open_session(faults=[CommitFault("before", nth=2)])
    seen: list[CommitEvent] = []
    session.subscribe(seen.append)
    await session.commit(lambda tx: tx.ensure_root())
    with pytest.raises(StorageRejected):
        await session.commit(lambda tx: tx.create_task(NOOP))
    assert [e.seq for e in seen] == [1]
    assert session.tasks == {}  # the rejected task was never adopted
    task = await session.commit(lambda tx: tx.create_task(NOOP))
    assert [len(e.tasks) for e in seen] == [0, 1]
    assert session.tasks == {task.id: task}


async def test_a_failing_listener_is_reported_and_does_not_undo_the_commit() -> None:
    session, _ = await open_session()
    reported: list[BaseException] = []
    session.report = reported.append

    def broken(event: CommitEvent) -> None:
        raise ValueError("listener bug")

    session.subscribe(broken)
    await session.commit(lambda tx: tx.ensure_root())
    assert [str(e) for e in reported] == ["listener bug"]
    assert await session.conversation(1) is not None


async def test_an_uncertain_storage_failure_poisons_the_session() -> None:
    for when in ("during", "after"):
        session, _ = await open_session(faults=[CommitFault(when, nth=1)])  # type: ignore[arg-type]
        with pytest.raises(SessionPoisoned):
            await session.commit(lambda tx: tx.ensure_root())
        with pytest.raises(SessionPoisoned):
            await session.commit(lambda tx: tx.ensure_root())
        with pytest.raises(SessionPoisoned):
            await session.task(99)
        assert session.poisoned is not None


async def test_storage_rejection_does_not_poison() -> None:
    session, _ = await open_session(faults=[CommitFault("before", nth=1)])
    with pytest.raises(StorageRejected):
        await session.commit(lambda tx: tx.ensure_root())
    assert session.poisoned is None
    await session.commit(lambda tx: tx.ensure_root())


async def test_commits_after_close_raise_session_closed_and_write_nothing() -> None:
    session, storage = await open_session()
    await session.close()
    with pytest.raises(SessionClosed):
        await session.commit(lambda tx: tx.ensure_root())
    assert storage.commits == 0


async def test_close_waits_for_the_commit_on_the_line() -> None:
    session, storage = await open_session()
    storage.hold_commits()
    pending = asyncio.ensure_future(session.commit(lambda tx: tx.ensure_root()))
    await asyncio.sleep(0.01)
    closing = asyncio.ensure_future(session.close())
    await asyncio.sleep(0.01)
    assert not closing.done()
    storage.release_commits()
    await pending
    await closing
    assert await MemoryStorage(storage.inner.state).conversation(1) is not None  # type: ignore[attr-defined]


async def test_a_cancelled_committer_does_not_cancel_the_landing_commit() -> None:
    session, storage = await open_session()
    storage.hold_commits()
    seen: list[int] = []
    session.subscribe(lambda e: seen.append(e.seq))
    pending = asyncio.ensure_future(session.commit(lambda tx: tx.ensure_root()))
    await asyncio.sleep(0.01)
    pending.cancel()
    await asyncio.sleep(0.01)
    storage.release_commits()
    with pytest.raises(asyncio.CancelledError):
        await pending
    await session.commit(lambda tx: None)  # the line is free again
    assert seen == [1] and session.poisoned is None
    assert await session.conversation(1) is not None


async def test_in_commit_is_true_only_inside_commit_callbacks() -> None:
    session, _ = await open_session()
    observed: list[bool] = []
    assert not in_commit()
    await session.commit(lambda tx: observed.append(in_commit()))
    assert observed == [True] and not in_commit()


async def test_reopening_loads_live_tasks(tmp_path: Path) -> None:
    state = MemoryState()
    session, _ = await open_session(state)
    task = await session.commit(lambda tx: tx.create_task(NOOP, {"a": 1}))
    await session.close()
    again, _ = await open_session(state)
    assert again.tasks == {task.id: task}


async def test_create_task_hands_the_task_layer_one_spec_of_everything_asked() -> None:
    session, _ = await open_session()
    factory = session.task_layer
    assert factory is not None
    seen: list[TaskSpec] = []

    class Recording:
        async def create_task(self, tx: Tx, spec: TaskSpec) -> Task:
            seen.append(spec)
            return await factory.create_task(tx, spec)

        async def before_prepare(self, tx: Tx) -> None:
            await factory.before_prepare(tx)

    session.task_layer = Recording()

    async def create(tx: Tx) -> Task:
        return await tx.create_task(NOOP, {"n": 1}, background=True, until=5)

    task = await session.commit(create)
    assert seen == [TaskSpec(NOOP, {"n": 1}, background=True, until=5)]
    assert (task.kind, task.input, task.background, task.conversation_id) == (
        NOOP.name,
        {"n": 1},
        True,
        1,
    )


class _Deferring:
    """A deferring gate for SqliteStorage whose flush waits for ``opened`` or fails."""

    def __init__(self) -> None:
        self.waiting: list[int] = []
        self.durable: list[int] = []
        self.opened = asyncio.Event()
        self.fail: BaseException | None = None

    @property
    def pending(self) -> int:
        return len(self.waiting)

    async def make_durable(self, seq: int, write_set: JsonObject) -> None:
        self.waiting.append(seq)

    async def flush(self) -> None:
        await self.opened.wait()
        if self.fail is not None:
            raise self.fail
        self.durable += self.waiting
        self.waiting = []


async def _deferring_session(tmp_path: Path) -> tuple[Session, _Deferring]:
    gate = _Deferring()
    storage = await SqliteStorage.open(Sqlite3Database.open(tmp_path / "a.sqlite"), gate=gate)
    session = await Session.open(storage, VirtualClock())
    await session.commit(lambda tx: tx.create_conversation())
    return session, gate


async def test_a_flush_whose_caller_is_cancelled_still_lands(tmp_path: Path) -> None:
    session, gate = await _deferring_session(tmp_path)
    flushing = asyncio.ensure_future(session.flush())
    await asyncio.sleep(0.01)
    flushing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await flushing
    gate.opened.set()
    await asyncio.sleep(0.01)
    assert (gate.durable, gate.waiting, session.poisoned) == ([1], [], None)
    await session.flush()  # nothing pending: at once
    await session.close()


async def test_a_failed_flush_poisons_and_a_refused_one_does_not(tmp_path: Path) -> None:
    session, gate = await _deferring_session(tmp_path)
    gate.opened.set()
    gate.fail = StorageRejected("throttled")
    with pytest.raises(StorageRejected):
        await session.flush()
    assert session.poisoned is None and gate.waiting == [1]  # still pending
    gate.fail = ConnectionResetError("reply lost")
    with pytest.raises(SessionPoisoned):
        await session.flush()
    with pytest.raises(SessionPoisoned):
        await session.commit(lambda tx: tx.create_conversation())
    await session.close()


async def test_a_wrapped_deferring_storage_is_flushed_through_its_wrapper(
    tmp_path: Path,
) -> None:
    gate = _Deferring()
    gate.opened.set()
    inner = await SqliteStorage.open(Sqlite3Database.open(tmp_path / "a.sqlite"), gate=gate)
    session = await Session.open(FaultyStorage(inner), VirtualClock())
    await session.commit(lambda tx: tx.create_conversation())
    assert gate.waiting == [1]
    await session.flush()  # reaches the inner storage: a wrapper hides no pending commit
    assert (gate.durable, gate.waiting) == ([1], [])
    await session.close()
