"""Randomized schedules (hypothesis stateful testing) against one durable actor.

A machine drives a harness over memory storage or a real SQLite file with interleavings
of submit (follow-up / steer / reject, with and without reused request ids), tool calls
that wait for approval and decisions on them (repeated, conflicting), application
writes, scripted model behaviour (answers, tool rounds, retryable and fatal errors,
deferred answers, requests that hang until released or aborted), abort of a conversation
or one submission, fork, compact, reset, reminders, recurring schedules, clock
advances, uncertain storage failures (the step then reopens like a host), crash-and-reopen,
clean close-and-reopen, registry replacement (the same extension name with changed or
removed tools) and letting the loop run for a while. A schedule's submissions are checked
after every step to be exactly the occurrences it counts as fired (invariant 19).

After every step the invariants that hold at any time are checked against what was
committed (see :mod:`core.testing.consistency`); at the end the machine settles to idle
and runs the full check: every accepted input settled exactly once, no duplicate
entries, every task terminal, no orphaned live state, the unsafe tool at most once per
call, and for SQLite ``PRAGMA integrity_check`` plus our cross-table checks.

The default run is bounded (``max_examples=30`` per backend); ``-m slow`` runs a larger
profile. Shrunk failures are kept as explicit tests in ``test_regressions.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, currently_in_test_context, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from core.errors import ApprovalDecided, ConversationBusy, RequestIdConflict, SessionPoisoned
from core.faux import faux_deferred, faux_error, faux_message
from core.harness import HarnessSettings
from core.harness.schedules import SCHEDULE
from core.harness.settings import CompactionSettings
from core.storage import SubmissionQuery, TaskQuery
from core.testing.wrappers import CommitFault
from tests.core.harness.support import echo, extension, tool
from tests.recovery.support import MODEL, World

REQUEST_IDS = st.sampled_from([None, None, None, "r1", "r2", "r3"])
TOOLS = st.lists(
    st.sampled_from(["quick", "risky", "slow", "missing", "asks", "asks_exp"]),
    min_size=1,
    max_size=3,
)
STEP_TIMEOUT = 5.0  # real seconds: a step that takes longer is a hang (a liveness bug)
# The checker reads what was committed through connections of its own, opened on worker
# threads while the harness's tasks keep the loop (and the GIL) busy: on a loaded 2-core
# machine that open alone once took over 5 s. It is not the system under test, so it
# gets a bound that only a hang reaches.
CHECK_TIMEOUT = 60.0


class Schedule(RuleBasedStateMachine):
    backend = "memory"

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.tmp = tempfile.TemporaryDirectory()
        self.world = World(Path(self.tmp.name), self.backend)  # type: ignore[arg-type]
        self.faults = 0
        self.steps = 0
        self.convs: list[int] = [1]
        self.accepted: dict[int, int] = {}  # submission id -> conversation id
        self.requests: dict[tuple[int, str], int] = {}
        self.crashes = 0
        self.decided: dict[int, tuple[str, str | None]] = {}  # approval -> first decision

    # ------------------------------------------------------------------ plumbing

    def run(self, coro: Any, timeout: float = STEP_TIMEOUT) -> Any:
        """Run one step on the machine's loop. A step cut short by an injected storage
        failure is what a host sees: the session is poisoned, so it reopens the actor."""
        self.steps += 1
        try:
            return self.loop.run_until_complete(asyncio.wait_for(coro, timeout))
        except SessionPoisoned:
            pass
        finally:
            h = self.world.harness
            if h is not None and h.session.poisoned is not None:
                self.loop.run_until_complete(self._reopen(graceful=False))
        return None

    async def _reopen(self, *, graceful: bool) -> None:
        if graceful:
            await self.world.close()
        else:
            await self.world.crash()
        self.crashes += 1
        h = await self.world.open()
        for sub_id in self.accepted:
            assert await h.session.storage.submission(sub_id) is not None, (
                f"accepted submission {sub_id} was lost"
            )
        h.resume()

    @property
    def h(self) -> Any:
        assert self.world.harness is not None
        return self.world.harness

    async def _pump(self, turns: int) -> None:
        for _ in range(turns):
            await asyncio.sleep(0)

    def conv(self, index: int) -> int:
        return self.convs[index % len(self.convs)]

    @initialize(
        tools=st.sampled_from(["parallel", "sequential"]),
        steering=st.sampled_from(["one-at-a-time", "all"]),
        follow_ups=st.sampled_from(["one-at-a-time", "all"]),
        tight=st.booleans(),
    )
    def start(self, tools: str, steering: str, follow_ups: str, tight: bool) -> None:
        compaction = CompactionSettings(
            reserve_tokens=1_000, keep_recent_tokens=150, background_tokens=1_000
        )
        settings = HarnessSettings(
            tool_execution=tools,  # type: ignore[arg-type]
            steering_mode=steering,  # type: ignore[arg-type]
            follow_up_mode=follow_ups,  # type: ignore[arg-type]
            compaction=compaction if tight else CompactionSettings(keep_recent_tokens=150),
        )
        self.world = World(
            Path(self.tmp.name),
            self.backend,  # type: ignore[arg-type]
            settings=settings,
            window=4_000 if tight else None,
        )

        async def go() -> None:
            h = await self.world.open()
            await h.root(agent={"model": MODEL})
            h.resume()

        self.run(go())

    # ------------------------------------------------------------------ input

    @rule(
        index=st.integers(0, 7),
        mode=st.sampled_from(["follow_up", "steer", "reject"]),
        request_id=REQUEST_IDS,
        turns=st.integers(0, 30),
        size=st.sampled_from([0, 0, 10, 600]),
        reply=st.sampled_from([None, "tools", "tools", "answer", "retryable", "block"]),
        tools=TOOLS,
    )
    def submit(
        self,
        index: int,
        mode: str,
        request_id: str | None,
        turns: int,
        size: int,
        reply: str | None,
        tools: list[str],
    ) -> None:
        """Submit, usually with the model's next reply scripted first (a tool round
        most often: that is where intent, effect and result can be torn apart)."""
        conv_id = self.conv(index)
        if reply is not None:
            self.script(reply, tools)

        async def go() -> None:
            conv = await self.h.conversation(conv_id)
            try:
                sub = await conv.submit(
                    f"hello {len(self.accepted)} " + "words " * size,
                    request_id=request_id,
                    when_busy=mode,
                )
            except ConversationBusy:
                return
            except RequestIdConflict:
                return  # a known request id with other content: refused, nothing written
            if request_id is not None:
                first = self.requests.setdefault((conv_id, request_id), sub.id)
                assert first == sub.id, f"request {request_id} made a second submission"
            self.accepted[sub.id] = conv_id
            await self._pump(turns)

        self.run(go())

    @rule(
        kind=st.sampled_from(["answer", "tools", "retryable", "fatal", "deferred", "block"]),
        tools=TOOLS,
    )
    def script(self, kind: str, tools: list[str]) -> None:
        w = self.world
        if kind == "tools":
            w.call(*tools)
        elif kind == "retryable":
            w.say(faux_error("overloaded", retryable=True))
        elif kind == "fatal":
            w.say(faux_error("bad request"))
        elif kind == "deferred":
            w.say(faux_deferred(faux_message("later"), pending=1, poll_after_ms=1000))
        elif kind == "block":
            w.say(w.slow_answer)
        else:
            w.say(faux_message("an answer"))

    @rule(index=st.integers(0, 7), request_id=st.sampled_from([None, "w1", "w2"]))
    def write(self, index: int, request_id: str | None) -> None:
        """An application entry: placed at once when idle, else at the next boundary."""

        async def go() -> None:
            conv = await self.h.conversation(self.conv(index))
            # A known request id with other data is refused (nothing written).
            with contextlib.suppress(RequestIdConflict):
                await conv.write("note", data={"n": len(self.accepted)}, request_id=request_id)

        self.run(go())

    @rule(index=st.integers(0, 7), handoff=st.sampled_from([None, "start over"]))
    def reset(self, index: int, handoff: str | None) -> None:
        async def go() -> None:
            conv = await self.h.conversation(self.conv(index))
            await conv.reset(handoff)

        self.run(go())

    @rule(index=st.integers(0, 7), after=st.integers(1, 120))
    def remind(self, index: int, after: int) -> None:
        async def go() -> None:
            conv = await self.h.conversation(self.conv(index))
            await conv.remind(f"reminder after {after}s", after=after)

        self.run(go())

    @precondition(lambda self: len(self.h.schedules()) < 3)
    @rule(
        index=st.integers(0, 7),
        when=st.sampled_from([{"every": 60}, {"every": "2m"}, {"cron": "*/5 * * * *"}]),
        overlap=st.sampled_from(["skip", "queue"]),
        catch_up=st.sampled_from(["none", "latest"]),
    )
    def schedule(self, index: int, when: dict[str, Any], overlap: str, catch_up: str) -> None:
        async def go() -> None:
            conv = await self.h.conversation(self.conv(index))
            await conv.schedule("scheduled", overlap=overlap, catch_up=catch_up, **when)

        self.run(go())

    @invariant()
    def occurrences_commit_with_their_schedule(self) -> None:
        """Invariant 19: every schedule's submissions are exactly the occurrences it
        counts as fired, each before its next due time, whatever crashed or failed."""
        self.run(self._occurrences_match())

    async def _occurrences_match(self) -> None:
        h = self.world.harness
        if h is None or h.session.poisoned is not None:
            return
        storage = h.session.storage
        page = await storage.scan_tasks(TaskQuery(kind=SCHEDULE, limit=100))
        for task in page.items:
            checkpoint = task.checkpoint or {}
            if task.outcome is not None or not isinstance(checkpoint.get("due"), int):
                continue
            subs = await storage.scan_submissions(
                SubmissionQuery(conversation_id=task.conversation_id, limit=1000)
            )
            prefix = f"schedule:{task.id}:"
            times = [
                int(s.request_id[len(prefix) :])
                for s in subs.items
                if s.request_id and s.request_id.startswith(prefix)
            ]
            assert len(times) == checkpoint.get("fired"), (task, times)
            assert all(t < checkpoint["due"] for t in times), (task, times)

    # ------------------------------------------------------------------ control

    @rule(index=st.integers(0, 7), background=st.booleans())
    def abort(self, index: int, background: bool) -> None:
        async def go() -> None:
            conv = await self.h.conversation(self.conv(index))
            await conv.abort(background=background)

        self.run(go())

    @precondition(lambda self: bool(self.accepted))
    @rule(pick=st.integers(0, 1000))
    def abort_submission(self, pick: int) -> None:
        ids = sorted(self.accepted)
        sub_id = ids[pick % len(ids)]

        async def go() -> None:
            sub = await self.h.submission(sub_id)
            assert sub is not None, f"accepted submission {sub_id} is gone"
            await sub.abort()

        self.run(go())

    @rule(
        pick=st.integers(0, 1000),
        decision=st.sampled_from(["approve", "approve", "deny"]),
        note=st.sampled_from([None, "not now"]),
    )
    def decide(self, pick: int, decision: str, note: str | None) -> None:
        """A person decides a pending tool call (a decided one again: the same decision
        is answered from the record, another is refused and writes nothing)."""

        async def go() -> None:
            h = self.h
            pending = [a["id"] for a in h.approvals()] + sorted(self.decided)
            if not pending:
                return
            task_id = pending[pick % len(pending)]
            before = self.world.faulty.commits if self.world.faulty else 0
            first = self.decided.get(task_id)
            try:
                await h.decide_approval(task_id, decision, note=note)
            except ApprovalDecided:
                assert first is None or first != (decision, note), "same decision refused"
                assert self.world.faulty is None or self.world.faulty.commits == before
                return
            if first is not None:
                assert first == (decision, note), f"approval {task_id} decided twice"
                assert self.world.faulty is None or self.world.faulty.commits == before
            self.decided.setdefault(task_id, (decision, note))

        self.run(go())

    @rule(index=st.integers(0, 7), pick=st.integers(0, 1000))
    def fork(self, index: int, pick: int) -> None:
        conv_id = self.conv(index)

        async def go() -> None:
            conv = await self.h.conversation(conv_id)
            page = await conv.entries(limit=50)
            if not page.items:
                return
            entry = page.items[pick % len(page.items)]
            child = await conv.fork(entry.id)
            self.convs.append(child.id)

        self.run(go())

    @rule(index=st.integers(0, 7))
    def compact(self, index: int) -> None:
        async def go() -> None:
            conv = await self.h.conversation(self.conv(index))
            await conv.compact()

        self.run(go())

    @rule(ms=st.sampled_from([10, 500, 1000, 5000, 60_000, 130_000]))
    def advance(self, ms: int) -> None:
        async def go() -> None:  # due timers kick the scheduler: on the loop
            self.world.clock.advance(ms)
            await self._pump(5)

        self.run(go())

    @rule(turns=st.integers(1, 200))
    def let_run(self, turns: int) -> None:
        self.run(self._pump(turns))

    @rule()
    def release_tools(self) -> None:
        self.world.gate.set()
        self.world.gate = asyncio.Event()
        self.run(self._pump(10))

    @rule(replay=st.sampled_from(["safe", "unsafe", "recoverable", "removed"]))
    def replace_registry(self, replay: str) -> None:
        w = self.world

        async def go() -> None:  # install kicks the scheduler: on the loop
            if replay == "removed":
                w.registry.install(extension("fx", tool("quick", echo)))
            else:
                w.install_tools(replay)
            await self._pump(3)

        self.run(go())

    @rule(graceful=st.booleans())
    def crash_and_reopen(self, graceful: bool) -> None:
        self.run(self._reopen(graceful=graceful))

    @rule(when=st.sampled_from(["during", "after"]), later=st.integers(1, 6))
    def storage_fault(self, when: str, later: int) -> None:
        """An uncertain storage failure a few commits from now (an I/O error that wrote
        nothing, or a commit that landed without the caller being told)."""
        faulty = self.world.faulty
        assert faulty is not None
        faulty.add(CommitFault(when, nth=faulty.commits + later))  # type: ignore[arg-type]
        self.faults += 1

    # ------------------------------------------------------------------ checks

    @invariant()
    def always_consistent(self) -> None:
        problems = self.run(self.world.problems(settled=False), CHECK_TIMEOUT)
        assert not problems, problems

    def teardown(self) -> None:
        try:
            if self.world.harness is not None:
                assert self.world.faulty is not None
                self.world.faulty.faults.clear()  # settling runs on healthy storage

                async def settle() -> None:
                    self.world.install_tools("safe")
                    await self.world.settle()

                run = self.loop.run_until_complete
                run(asyncio.wait_for(settle(), STEP_TIMEOUT))
                problems = run(asyncio.wait_for(self.world.problems(settled=True), CHECK_TIMEOUT))
                assert not problems, problems
                self._events()
                # The log misses commits that landed without an acknowledgement (an
                # injected "after" fault), so settlement is read back from storage.
                storage = self.world.harness.session.storage
                for sub_id in self.accepted:
                    record = self.loop.run_until_complete(storage.submission(sub_id))
                    assert record is not None, f"accepted input {sub_id} was lost"
                    assert record.status in ("done", "unanswered"), record
        finally:
            with contextlib.suppress(Exception):
                self.loop.run_until_complete(self.world.close())
            self.loop.close()
            self.tmp.cleanup()

    def _events(self) -> None:
        """What the example exercised (``--hypothesis-show-statistics`` lists these)."""
        if not currently_in_test_context():  # a replayed schedule (test_regressions)
            return
        log, h = self.world.log, self.world.harness
        assert h is not None
        kinds = {t.kind for t in h.session.tasks.values()}
        outcomes = {s.status + ":" + (s.reason or "") for s in log.settled.values()}
        for name in sorted(outcomes | {f"live at the end:{k}" for k in kinds}):
            event(name)
        event(f"reopens:{min(self.crashes, 3)}+")
        event(f"tool runs:{min(sum(self.world.effects.runs.values()), 5)}+")
        event(f"approvals decided:{min(len(self.decided), 3)}+")
        event(f"faults:{min(self.faults, 2)}+")
        event(f"steps:{self.steps // 10 * 10}+")
        event(f"model calls:{min(self.world.faux.state.call_count, 5)}+")
        event(f"unused replies:{min(len(self.world.script), 3)}+")


class SqliteSchedule(Schedule):
    backend = "sqlite"


def _profile(examples: int, steps: int) -> settings:
    return settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )


def _case(machine: type[RuleBasedStateMachine], profile: settings) -> Any:
    case = machine.TestCase
    case.settings = profile
    return case


class _Large(Schedule):
    pass


class _LargeSqlite(SqliteSchedule):
    pass


# Hypothesis switches random subsets of rules off per example (swarm testing), so the
# default run needs some dozens of examples to cover the rule mix; each costs ~10-60 ms
# on memory and ~50-200 ms on SQLite.
TestMemorySchedule = _case(Schedule, _profile(200, 30))
TestSqliteSchedule = _case(SqliteSchedule, _profile(60, 30))
_slow = [pytest.mark.slow, pytest.mark.timeout(1800)]
TestLargeMemorySchedule = _slow[1](_slow[0](_case(_Large, _profile(2000, 60))))
TestLargeSqliteSchedule = _slow[1](_slow[0](_case(_LargeSqlite, _profile(500, 60))))
