"""The Durable Object's actor on CPython: evictions, alarms delivered twice, late or after
a throw, a crash between a commit and its re-arm, the heartbeat of a long model call.

``DurableObjectHome`` is what outlives an isolate (the SQLite file and the alarm);
``Rig.isolate()`` starts a new isolate on it (the old one is evicted: its storage
object dies with it). Alarms are delivered the way workerd does: the alarm is cleared,
then ``alarm()`` runs.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from core.faux import FauxModel, FauxState, faux_block, faux_message, faux_tool_call
from core.harness import (
    AssistantMessage,
    EnvFactory,
    Extension,
    Harness,
    ModelRequest,
    ToolContext,
    ToolResultMessage,
    define_extension,
    define_tool,
)
from core.storage import SubmissionQuery
from core.testing.clock import VirtualClock
from runtimes.actor import ActorConfig
from runtimes.cloudflare.actor import DurableActor
from runtimes.cloudflare.alarm import HEARTBEAT_MS, AlarmReport
from tests.cloudflare.standin import DurableObjectHome

MODEL = "faux/faux-1"


class Route(BaseModel):
    route: str


class Rig:
    """One Durable Object: its durable home, a clock, the tools' gate, and isolates."""

    def __init__(self, tmp_path: Path, steps: Any = None) -> None:
        self.home = DurableObjectHome(tmp_path / "do.sqlite")
        self.clock = VirtualClock()
        self.gate = asyncio.Event()  # closed: tools hang (until the isolate is evicted)
        self.effects: list[str] = []
        self.reports: list[AlarmReport] = []
        self.fail_opens = 0
        self.faux = FauxModel(steps or [self._travel] * 4, fallback=self._travel)
        self.actor: DurableActor | None = None

    def _travel(self, request: ModelRequest, state: FauxState) -> AssistantMessage:
        if request.messages[-1].role == "user":
            return faux_message(
                faux_tool_call("search", {"route": "Vienna-Graz"}, id="call_search"),
                faux_tool_call("book", {"route": "IC 511"}, id="call_book"),
            )
        results = [m for m in request.messages if isinstance(m, ToolResultMessage)]
        return faux_message(f"done after {len(results)} results")

    def extension(self) -> Extension:
        async def search(args: Route, ctx: ToolContext) -> str:
            self.effects.append("search")
            await self.gate.wait()
            return "IC 511 departs 10:02"

        async def book(args: Route, ctx: ToolContext) -> str:
            self.effects.append("book")
            await self.gate.wait()
            return "booked"

        return define_extension(
            "travel",
            tools=[
                define_tool(
                    "search",
                    description="s",
                    parameters=Route,
                    execute=search,
                    replay="safe",
                ),
                define_tool("book", description="b", parameters=Route, execute=book),
            ],
        )

    @contextlib.asynccontextmanager
    async def _env(self, actor: str) -> AsyncIterator[EnvFactory | None]:
        # Entered on every open: the place an isolate's opening can fail.
        if self.fail_opens:
            self.fail_opens -= 1
            raise RuntimeError("model configuration unavailable")
        yield None

    def config(self) -> ActorConfig:
        return ActorConfig(
            models=self.faux,
            extensions=[self.extension()],
            env=self._env,
            report=lambda actor, error: None,
        )

    async def isolate(self) -> DurableActor:
        """Evict the current isolate (if any) and start a new one."""
        old = self.actor
        self.actor = DurableActor(
            self.home.open(),  # the old storage object is dead from here on
            self.config(),
            clock=self.clock,
            alarm_report=self.reports.append,
            actor="tree-1",
            max_alarm_failures=3,
        )
        if old is not None:
            with contextlib.suppress(Exception):
                await old.close()  # what is left of it in this process; workerd drops it
        return self.actor

    def crash_after_next_commit(self, harness: Harness) -> None:
        """The isolate dies right after the next commit, before anything else runs."""

        def die(_event: object) -> None:
            unsubscribe()
            self.home.close()

        unsubscribe = harness.session.subscribe(die)

    async def idle(self) -> None:
        """Deliver the heartbeat an ended run leaves armed, so that nothing is armed."""
        if self.home.alarm is not None:
            self.clock.set(self.home.alarm)
            assert await self.deliver()
        assert self.home.alarm is None

    async def deliver(self) -> bool:
        """workerd delivers the alarm: cleared, then ``alarm()``."""
        assert self.actor is not None
        self.home.alarm = None
        ran = await self.actor.alarm()
        await self.actor.settle()
        return ran


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    rig = Rig(tmp_path)
    yield rig
    rig.home.close()


async def until(predicate: Callable[[], bool], turns: int = 2000) -> None:
    for _ in range(turns):
        if predicate():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition not reached")


async def _answer(harness: Harness, entry_id: int | None) -> str:
    entry = await harness.session.storage.entry(entry_id or 0)
    assert entry is not None and isinstance(entry.message, dict)
    return "".join(b["text"] for b in entry.message["content"])  # type: ignore[index,union-attr]


async def test_eviction_mid_tools_then_the_heartbeat_alarm_resumes_the_work(rig: Rig) -> None:
    actor = await rig.isolate()
    async with actor.serving() as harness:
        root = await harness.root(agent={"model": MODEL})
        sub = await root.submit("Find a train and book it", request_id="job-42")
    await until(lambda: sorted(rig.effects) == ["book", "search"])
    await actor.settle()
    assert rig.home.alarm == rig.clock.now() + HEARTBEAT_MS  # tasks run: the heartbeat

    actor = await rig.isolate()  # evicted while both tools hang
    rig.gate.set()
    rig.clock.advance(HEARTBEAT_MS)
    assert await rig.deliver()  # the heartbeat comes back: re-open, resume
    harness = await actor.harness()
    again = await (await harness.root()).submit("Find a train and book it", request_id="job-42")
    assert again.id == sub.id  # job-42 resent: the original submission
    record = await again.wait()
    assert record.status == "done", record
    assert sorted(rig.effects) == ["book", "search", "search"]  # search reran, book did not
    results = {
        m.tool_name: m
        for m in rig.faux.state.requests[-1].messages
        if isinstance(m, ToolResultMessage)
    }
    assert not results["search"].is_error
    assert results["book"].is_error and "interrupted" in str(results["book"].content)
    await until(lambda: harness.next_wake() is None)
    await actor.rearm()
    # Idle: the heartbeat is left to fire, not deleted; its delivery only looks.
    assert rig.home.alarm is not None and rig.home.alarm_deletes == 0
    storage = rig.home.current
    assert storage is not None
    written = storage.sql.rows_written
    await rig.idle()
    assert storage.sql.rows_written == written and rig.home.alarm_deletes == 0
    await actor.close()


async def test_a_reminder_fires_once_across_an_eviction_and_a_double_delivery(rig: Rig) -> None:
    actor = await rig.isolate()
    harness = await actor.harness()
    root = await harness.root(agent={"model": MODEL})
    rig.gate.set()
    await root.remind("ping", after=60)
    await actor.settle()
    due = rig.clock.now() + 60_000
    assert rig.home.alarm == due  # the durable deadline, armed exactly

    actor = await rig.isolate()
    rig.clock.set(due + 5)  # late
    assert await rig.deliver()
    assert await rig.deliver()  # delivered twice (at-least-once)
    harness = await actor.harness()
    await until(lambda: harness.next_wake() is None)
    page = await harness.session.storage.scan_submissions(
        SubmissionQuery(conversation_id=1, limit=100)
    )
    reminders = [s for s in page.items if (s.request_id or "").startswith("reminder:")]
    assert len(reminders) == 1, page.items
    await actor.close()


async def test_an_alarm_that_throws_is_retried_with_backoff_then_succeeds(rig: Rig) -> None:
    await (await rig.isolate()).harness()  # the actor exists...
    actor = await rig.isolate()  # ...and a new isolate cannot open it
    rig.fail_opens = 1
    assert not await rig.deliver()
    assert rig.home.alarm == rig.clock.now() + 2_000  # our retry, not workerd's
    assert [(r.attempt, r.gave_up) for r in rig.reports] == [(1, False)]
    assert not actor.is_open
    rig.clock.advance(2_000)
    assert await rig.deliver()
    assert actor.is_open and actor.guard.failures.count == 0
    await actor.close()


async def test_a_crash_loop_is_bounded_and_reported(rig: Rig) -> None:
    await (await rig.isolate()).harness()
    rig.fail_opens = 100
    for _ in range(3):
        await rig.isolate()  # every attempt in a fresh isolate
        await rig.deliver()
    assert rig.reports[-1].gave_up and rig.home.alarm is None
    await rig.isolate()
    assert not await rig.deliver()  # a stray delivery does nothing
    assert rig.fail_opens == 97  # three attempts opened the harness, no more


async def test_a_crash_between_a_commit_and_its_rearm_is_recovered_by_the_alarm(
    rig: Rig,
) -> None:
    rig.gate.set()
    actor = await rig.isolate()
    harness = await actor.harness()
    await actor.settle()
    await rig.idle()  # nothing armed
    request = contextlib.AsyncExitStack()  # a request arrives: no alarm call until it writes
    await request.enter_async_context(actor.serving())
    assert rig.home.alarm is None
    root = await harness.root(agent={"model": MODEL})  # a commit with nothing to run...
    await actor.settle()
    assert rig.home.alarm == rig.clock.now() + HEARTBEAT_MS  # ...keeps the heartbeat
    rig.crash_after_next_commit(harness)
    sub = await root.submit("go", request_id="r1")  # committed, then the isolate died
    actor = await rig.isolate()  # (the request never ended)
    assert rig.home.alarm is not None  # the heartbeat armed before the request survives
    rig.clock.advance(HEARTBEAT_MS)
    assert await rig.deliver()
    harness = await actor.harness()
    record = await (await (await harness.root()).submit("go", request_id="r1")).wait()
    assert record.id == sub.id and record.status == "done"
    await actor.close()
    with contextlib.suppress(Exception):  # the dead isolate's request, for the record
        await request.aclose()


async def test_an_isolate_lost_inside_the_alarm_after_its_commit_is_recovered(rig: Rig) -> None:
    """The alarm's own work commits (the due reminder fires), then the isolate dies
    before anything else runs. Either the handler had re-armed before that commit (a
    heartbeat: the work was due) or it never returned (workerd retries it); both ways a
    new isolate gets the work, and the reminder fires once."""
    actor = await rig.isolate()
    harness = await actor.harness()
    root = await harness.root(agent={"model": MODEL})
    rig.gate.set()
    await root.remind("ping", after=60)
    await actor.settle()
    rig.clock.set(rig.clock.now() + 60_000)
    rig.crash_after_next_commit(harness)
    try:
        await rig.deliver()
        retried = False
    except Exception:
        retried = True  # the handler threw: workerd's own retry comes next
    storage = rig.home.current
    assert storage is not None
    await until(lambda: storage._closed)  # the reminder's commit happened, then death
    actor = await rig.isolate()
    if not retried:
        assert rig.home.alarm is not None  # armed before the commit, so it survives
        rig.clock.set(rig.home.alarm)
    assert await rig.deliver()
    harness = await actor.harness()
    await until(lambda: harness.next_wake() is None)
    page = await harness.session.storage.scan_submissions(
        SubmissionQuery(conversation_id=1, limit=100)
    )
    fired = [s for s in page.items if (s.request_id or "").startswith("reminder:")]
    assert len(fired) == 1 and fired[0].status == "done", page.items
    await actor.close()


async def test_a_long_model_call_is_kept_alive_by_the_heartbeat(tmp_path: Path) -> None:
    rig = Rig(tmp_path, steps=[faux_block()])
    try:
        actor = await rig.isolate()
        harness = await actor.harness()
        root = await harness.root(agent={"model": MODEL})
        await root.submit("think hard")
        await until(lambda: rig.faux.state.call_count == 1)
        await actor.settle()
        for _ in range(3):  # the model call outlasts several heartbeats
            assert rig.home.alarm == rig.clock.now() + HEARTBEAT_MS
            rig.clock.advance(HEARTBEAT_MS)
            assert await rig.deliver()
        assert rig.faux.state.call_count == 1  # the heartbeat did not restart the call
        await actor.close()
    finally:
        rig.home.close()


async def test_the_same_crash_outside_a_request_is_recovered_too(rig: Rig) -> None:
    """The heartbeat is armed before every write, not when a request starts: a commit
    made outside ``serving()`` (a task's, the alarm's) with nothing armed is covered too."""
    rig.gate.set()
    actor = await rig.isolate()
    harness = await actor.harness()
    root = await harness.root(agent={"model": MODEL})
    await actor.settle()
    await rig.idle()  # nothing armed
    rig.crash_after_next_commit(harness)
    sub = await root.submit("go", request_id="r1")  # committed, then the isolate died
    actor = await rig.isolate()
    assert rig.home.alarm == rig.clock.now() + HEARTBEAT_MS  # armed before that commit
    rig.clock.advance(HEARTBEAT_MS)
    assert await rig.deliver()
    harness = await actor.harness()
    record = await (await (await harness.root()).submit("go", request_id="r1")).wait()
    assert record.id == sub.id and record.status == "done"
    await actor.close()


async def test_parking_mid_tools_arms_the_alarm_for_the_work_left(rig: Rig) -> None:
    """A park the host decides (forced, tools running) replaces the heartbeat with the
    parked actor's next wake — due now — before it closes, so the next isolate picks the
    work up at once instead of a heartbeat later."""
    actor = await rig.isolate()
    async with actor.serving() as harness:
        root = await harness.root(agent={"model": MODEL})
        await root.submit("Find a train and book it")
    await until(lambda: sorted(rig.effects) == ["book", "search"])
    await actor.settle()
    assert rig.home.alarm == rig.clock.now() + HEARTBEAT_MS
    assert await actor.evict("tree-1", force=True)
    assert not actor.is_open
    assert rig.home.alarm == rig.clock.now()
    actor = await rig.isolate()
    rig.gate.set()
    assert await rig.deliver()  # the alarm re-opens the actor and resumes the work
    harness = await actor.harness()
    await until(lambda: harness.next_wake() is None)
    assert sorted(rig.effects) == ["book", "search", "search"]
    await actor.close()


async def test_a_durable_object_lists_only_the_actor_it_holds(rig: Rig) -> None:
    actor = await rig.isolate()
    assert await actor.actors() == []  # nothing stored yet
    async with actor.use("tree-1", create=True) as harness:
        await (await harness.root(agent={"model": MODEL})).write("note", data=1)
    assert await actor.actors() == ["tree-1"]
    assert await actor.actors(after="tree-1") == []
    assert await actor.actors(limit=0) == []
    actor = await rig.isolate()  # a new isolate reads the name back from storage
    assert await actor.actors() == ["tree-1"]


async def test_an_event_calls_the_alarm_api_only_when_the_earliest_deadline_moves(
    rig: Rig,
) -> None:
    """Alarm churn: at most one ``setAlarm``/``deleteAlarm`` per event (a request, an
    alarm delivery) that moves the earliest deadline, none otherwise; the heartbeat a
    finished run leaves is delivered as a look that writes nothing."""
    rig.gate.set()
    actor = await rig.isolate()
    storage = rig.home.current
    assert storage is not None

    async def alarm_calls(event: Callable[[], Any]) -> int:
        before = rig.home.alarm_sets + rig.home.alarm_deletes
        await event()
        harness = await actor.harness()
        await until(lambda: harness.next_wake() is None or harness.next_wake() > rig.clock.now())
        await actor.settle()
        return rig.home.alarm_sets + rig.home.alarm_deletes - before

    async def submission() -> None:
        async with actor.serving() as harness:
            sub = await (await harness.root(agent={"model": MODEL})).submit("Find and book")
        assert (await sub.wait()).status == "done"  # a safe and an unsafe tool ran

    async def read() -> None:
        async with actor.serving() as harness:
            await harness.session.storage.entry(1)

    async def remind() -> None:
        async with actor.serving() as harness:
            await (await harness.root()).remind("ping", after=600)

    async def deliver() -> None:
        assert await rig.deliver()

    assert await alarm_calls(submission) == 1  # work runs: the heartbeat
    assert await alarm_calls(submission) == 0  # the heartbeat armed is soon enough
    assert await alarm_calls(read) == 0
    assert await alarm_calls(remind) == 1  # the deadline moves to the reminder
    assert rig.home.alarm == rig.clock.now() + 600_000
    rig.clock.set(rig.home.alarm)
    assert await alarm_calls(deliver) == 1  # the reminder's run: the heartbeat
    assert rig.effects.count("book") == 3
    written = storage.sql.rows_written
    rig.clock.set(rig.home.alarm)
    assert await alarm_calls(deliver) == 0  # the heartbeat left armed: only a look
    assert storage.sql.rows_written == written and rig.home.alarm is None
    assert rig.home.alarm_deletes == 0
    await actor.close()
