"""Harness: the agent harness over the durable kernel.

::

    harness = await Harness.open(storage, models=models, registry=registry, env=env_for)
    root = await harness.root(agent={"model": "faux/faux-1"})
    submission = await root.submit("Find a train to Graz and book it", request_id="job-42")
    record = await submission.wait()

Opening runs nothing: ``resume()`` — or any call that waits for progress (``submit``,
``Submission.wait``, ``wait_for_task``, ``wait_for_idle``) — starts scheduling.
Handles (:class:`Conversation`, :class:`Submission`, in :mod:`~core.harness.conversation`
and :mod:`~core.harness.submission`) are stateless: after a restart, get them again with
:meth:`Harness.conversation` and :meth:`Harness.submission`.

This module is the facade and the lifecycle (opening, closing, waiters, the commit
listener); forks are made in :mod:`~core.harness.forks`, views and watches in
:mod:`~core.harness.views`, task graphs in :mod:`~core.harness.task_graph`.

Size: over 600 lines because the facade is one surface, each method a thing a host or a
program asks of the harness; what they delegate to lives in the modules named above."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal, cast

from core.clock import Clock
from core.engine import Engine
from core.errors import (
    ReminderFired,
    SessionClosed,
    TaskNotFound,
    UnknownRecord,
)
from core.harness.agents import agent_change
from core.harness.approvals import decide, pending_approvals
from core.harness.builtin_documents import AGENT, LIVE
from core.harness.compaction_start import COMPACTION
from core.harness.context import ActiveRange, ContextView, RangeCache
from core.harness.conversation import Conversation, WhenBusy
from core.harness.events import note_abort, note_event, note_restart
from core.harness.generation.end import settle_generation
from core.harness.generation.task import generation_task
from core.harness.live import ProgressPace
from core.harness.messages import Message, Usage
from core.harness.models import Models
from core.harness.registry import Registry, ResolvedAgent
from core.harness.runs import REMINDER, SCHEDULE, run_usage, withdraw_inputs
from core.harness.services import HarnessServices
from core.harness.settings import HarnessSettings
from core.harness.submission import (
    HARNESS_KINDS,
    Answer,
    Reminder,
    Submission,
    write_draft,
)
from core.harness.task_graph import inspected_task_graph
from core.harness.tool_sources import TOOL_SOURCES, listing_of
from core.harness.tool_task import settle_tool, tool_task
from core.harness.usage_ledger import ledger_value
from core.harness.views import Views
from core.harness.watch import Watch
from core.jsonvalue import JsonObject, JsonValue
from core.records import ROOT_CONVERSATION_ID, ConversationRecord, Entry, SubmissionRecord, Task
from core.session.documents import DocDefinition
from core.session.session import CommitEvent
from core.session.transaction import Tx
from core.session.waiters import WaiterRegistry
from core.storage.paging import scan_all
from core.storage.port import ConversationQuery, Cursor, EntryQuery, Page, Storage
from core.tasks.definition import TaskDefinition
from core.tasks.ownership import owner_of, owners
from core.tasks.scheduler import Inspection
from core.telemetry import NO_TELEMETRY, Telemetry

if TYPE_CHECKING:
    from core.env import ExecutionEnv
    from core.harness.schedules import Schedule

# Reminders, recurring schedules, forks and the compaction task (summarizing; a turn
# only asks whether one is needed: compaction_start) are features some actors use, not
# every open and turn: their modules (and the pydantic models, dataclasses and regular
# expressions in them) are imported when one is used — such a task met by the scheduler
# (``_Tasks``), or a method below — not on the open path, which a fresh Pyodide isolate
# compiles from source (issue 36; tests/cloudflare/test_open_path_imports.py pins it).

__all__ = [
    "HARNESS_KINDS",
    "Answer",
    "Conversation",
    "EnvFactory",
    "Harness",
    "Reminder",
    "Submission",
    "WhenBusy",
    "agent_change",
    "write_draft",
]

EnvFactory = Callable[[int, str | None], "ExecutionEnv | None"]
"""``env(conversation_id, cwd)``: the execution environment tools of that conversation use."""


class _Tasks:
    """The task source the scheduler sees: the built-in tasks, then extensions' tasks.
    ``deferred`` built-in tasks are defined the first time the scheduler asks for them."""

    def __init__(
        self,
        builtins: Mapping[str, TaskDefinition],
        registry: Registry,
        deferred: Mapping[str, Callable[[], TaskDefinition]],
    ) -> None:
        self._builtins = dict(builtins)
        self._deferred = dict(deferred)
        self._registry = registry

    def task(self, name: str) -> TaskDefinition | None:
        found = self._builtins.get(name)
        if found is None and name in self._deferred:
            found = self._builtins[name] = self._deferred.pop(name)()
        return found or self._registry.task(name)

    def subscribe(self, listener: Callable[[], None]) -> Callable[[], None]:
        return self._registry.subscribe(listener)


@dataclass(slots=True)
class _CachedAgent:
    """A conversation's resolved agent, with what it was resolved from: the committed
    agent document (``value``, ``version``) and the registry's extensions (``snapshot``),
    the committed ``tool_sources`` value its sources' tools were built from
    (``listings``), plus the commit ``seq`` at which that was last seen to hold."""

    value: object
    version: int | None
    snapshot: object
    resolved: ResolvedAgent
    seq: int | None
    listings: object = None


class Harness:
    """The agent harness: the one object a program or a host holds.

    A facade: it opens and closes the harness over a kernel :class:`Engine`, hands out the
    stateless handles (:meth:`root`, :meth:`conversation`, :meth:`submission`) through
    which conversations are driven, answers the host-level reads (listings, views,
    watches, task graphs, timers), and serves the tasks it runs (``agent``, ``env``,
    models, telemetry) as their :class:`~core.harness.services.HarnessServices`. Most
    methods delegate to the module that owns the work; this class owns the lifecycle.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        models: Models,
        registry: Registry,
        env: EnvFactory | None,
        settings: HarnessSettings,
    ) -> None:
        self.engine = engine
        self.session = engine.session
        self.models = models
        self.registry = registry
        self.env_factory = env
        self.settings = settings
        self.progress_pace = ProgressPace(settings.progress.partial_commits_per_s)
        self._ranges = RangeCache()
        self._built: dict[int, Message] = {}  # staged entries' messages as built, by id
        self._agents: dict[int, _CachedAgent] = {}
        """Resolved agents by conversation id, with what each was resolved from."""
        self._submission_waiters: WaiterRegistry[int, SubmissionRecord] = self.session.waiters()
        """Callers waiting for a submission to settle, by submission id."""
        self._views = Views(self)
        self._mounts = self._views.mounts  # the same dict (tests look at what is mounted)
        self._idle_waiters: WaiterRegistry[int, None] = self.session.waiters()
        """Callers waiting for a conversation to be idle, by conversation id."""
        self._unsubscribe = self.session.subscribe(self._on_commit)
        engine.scheduler.harness = self

    # ------------------------------------------------------------------ lifecycle

    @classmethod
    async def open(
        cls,
        storage: Storage,
        *,
        models: Models,
        registry: Registry,
        env: EnvFactory | None = None,
        clock: Clock,
        settings: HarnessSettings | None = None,
        report: Callable[[BaseException], None] | None = None,
        telemetry: Telemetry = NO_TELEMETRY,
    ) -> Harness:
        """Open the harness on ``storage`` (closed again if opening fails). Runs nothing;
        work a crash left running is noted as a ``restart`` event (see
        :mod:`core.harness.events`) in the open-time reconciliation commit."""
        # The built-in tasks get the harness as their services, but the engine that
        # needs their definitions opens before the harness exists: they are handed a
        # provider, bound once the harness is built (and before any task runs).
        bound: Harness | None = None

        def services() -> HarnessServices:
            assert bound is not None, "a built-in task ran before the harness was built"
            return bound

        async def on_settled(tx: Tx, task: Task) -> None:
            # The open-time reconciliation (inside Engine.open) may finalize held
            # outcomes before the harness exists; those commits go without it.
            if bound is not None:
                await bound._on_settled(tx, task)

        def compactions() -> TaskDefinition:
            from core.harness.compaction import compaction_task

            return compaction_task(services)

        def reminders() -> TaskDefinition:
            from core.harness.reminders import reminder_task

            return reminder_task(services)

        def schedules() -> TaskDefinition:
            from core.harness.schedules import schedule_task

            return schedule_task(services)

        builtins = {
            t.name: t
            for t in (
                generation_task(services),
                tool_task(services),
            )
        }
        engine = await Engine.open(
            storage,
            tasks=_Tasks(
                builtins,
                registry,
                {COMPACTION: compactions, REMINDER: reminders, SCHEDULE: schedules},
            ),
            clock=clock,
            report=report,
            telemetry=telemetry,
            on_reconcile=note_restart,
            on_settled=on_settled,
        )
        harness = cls(
            engine,
            models=models,
            registry=registry,
            env=env,
            settings=settings or HarnessSettings(),
        )
        bound = harness
        return harness

    @property
    def clock(self) -> Clock:
        return self.session.clock

    def report(self, error: BaseException) -> None:
        self.session.report(error)

    def resume(self) -> None:
        self.engine.resume()

    async def close(self) -> None:
        """Stop all work without writing outcomes and close the storage."""
        self._fail_waiters(SessionClosed("the harness is closed"))
        self._views.close()
        self._unsubscribe()
        await self.engine.close()

    def _fail_waiters(self, error: BaseException) -> None:
        """Closed (the session fails them if it is poisoned): no submission settles and
        no conversation idles in this session any more, so waiting callers are told
        instead of hanging."""
        self._submission_waiters.fail_all(error)
        self._idle_waiters.fail_all(error)

    # ------------------------------------------------------------------ conversations

    async def root(self, *, agent: JsonObject | None = None, defer: bool = False) -> Conversation:
        """The root conversation (id 1), created on first use with ``agent``; if it exists,
        ``agent`` is ignored and nothing is written.

        ``defer``: write nothing now; if the root does not exist, it is created with
        ``agent`` in the same commit as the first admission made through this handle
        (:meth:`Conversation.submit`, ``write``, ``reset``, ``configure``), so a refused
        first request leaves no conversation behind."""
        exists = await self.session.conversation(ROOT_CONVERSATION_ID) is not None
        if defer and not exists:
            return Conversation(self, ROOT_CONVERSATION_ID, create_with=dict(agent or {}))
        if not exists:

            async def create(tx: Tx) -> None:
                if await tx.conversation(ROOT_CONVERSATION_ID) is not None:
                    return
                tx.put_conversation(ConversationRecord(ROOT_CONVERSATION_ID))
                await self.init_conversation(tx, ROOT_CONVERSATION_ID, agent)

            await self.session.commit(create)
        return Conversation(self, ROOT_CONVERSATION_ID)

    async def create_conversation(self, *, agent: JsonObject | None = None) -> Conversation:
        """A new ownerless conversation with its own agent."""

        async def create(tx: Tx) -> int:
            conv = await tx.create_conversation()
            await self.init_conversation(tx, conv.id, agent)
            return conv.id

        return Conversation(self, await self.session.commit(create))

    async def conversation(self, conversation_id: int) -> Conversation:
        if await self.session.conversation(conversation_id) is None:
            raise UnknownRecord(f"Unknown conversation {conversation_id}")
        return Conversation(self, conversation_id)

    async def init_conversation(
        self, tx: Tx, conversation_id: int, agent: JsonObject | None
    ) -> None:
        doc = await tx.doc(AGENT, conversation_id)
        if agent:
            doc.value = self.configured_agent({}, agent)

    def configured_agent(self, current: JsonValue, change: Mapping[str, Any]) -> JsonObject:
        """``current`` with ``change`` applied and validated (see :func:`agent_change`)."""
        return agent_change(self.registry, current, change)

    # ------------------------------------------------------------------ submissions

    async def submission(self, submission_id: int) -> Submission | None:
        """Reacquire a submission handle (after a restart, for instance)."""
        record = await self.session.storage.submission(submission_id)
        if record is None:
            return None
        return Submission(self, record.id, record.conversation_id, record)

    async def wait_submission(self, submission_id: int, timeout: float | None) -> SubmissionRecord:
        """Wait for a submission to settle (see :meth:`Submission.wait`)."""
        record = await self.session.storage.submission(submission_id)
        if record is None:
            raise UnknownRecord(f"Unknown submission {submission_id}")
        if record.status in ("done", "unanswered"):
            return record
        self.session.check_open()  # poisoned or closed: it would never settle here
        self.resume()
        deadline = None if timeout is None else self.clock.now() + int(timeout * 1000)
        return await self._submission_waiters.wait(
            submission_id,
            clock=self.clock,
            deadline=deadline,
            expired="the submission is not settled yet",
        )

    # ------------------------------------------------------------------ tasks and state

    async def wait_for_task(self, task_id: int) -> Task:
        return await self.engine.wait_for_task(task_id)

    async def wait_for_idle(self) -> None:
        await self.engine.wait_for_idle()

    async def abort_task(
        self, task_id: int, *, scope: str = "task", **fields: JsonValue
    ) -> Literal["marked", "terminal", "orphaned"]:
        """Mark ``task_id`` for abort and join its run. The mark's commit notes an
        ``abort`` event (``scope``, ``fields``) in the task's conversation, so every path
        that aborts work by task (this, a submission's abort, a timer's cancel) is told
        like a conversation's abort."""

        async def noted(tx: Tx, task: Task) -> None:
            await note_abort(tx, task, scope, **fields)

        return await self.engine.abort_task(task_id, noted=noted)

    async def cancel_reminder(self, task_id: int) -> Task:
        """Cancel a pending reminder: mark its task aborted and wait until it ended.
        Returns the ended task. :class:`TaskNotFound` when ``task_id`` is not a pending
        reminder (unknown, another kind, or no longer waiting); :class:`ReminderFired`
        when it fired before the abort took effect (its message was submitted)."""
        pending = {t["task"]: t for t in self.timers()}
        if pending.get(task_id, {}).get("kind") != REMINDER:
            raise TaskNotFound(f"no pending reminder {task_id}")
        await self.abort_task(task_id, scope="timer")
        ended = await self.wait_for_task(task_id)
        if ended.outcome is not None and ended.outcome.kind == "completed":
            raise ReminderFired(f"reminder {task_id} fired before it was cancelled")
        return ended

    async def cancel_schedule(self, task_id: int) -> Schedule:
        """Cancel a recurring schedule: mark its task aborted and wait until it ended (an
        occurrence firing meanwhile commits first or not at all). Returns the schedule as
        it ended. :class:`TaskNotFound` when ``task_id`` is not a live schedule."""
        from core.harness.schedules import schedule_view

        task = self.session.tasks.get(task_id)
        if task is None or task.kind != SCHEDULE:
            raise TaskNotFound(f"no active schedule {task_id}")
        await self.abort_task(task_id, scope="schedule")
        ended = await self.wait_for_task(task_id)
        return schedule_view(ended, self.clock.now())

    def schedules(self, conversation_id: int | None = None) -> list[Schedule]:
        """The live recurring schedules (of one conversation, or all), oldest first, each
        with its next occurrences (see :func:`core.harness.schedules.schedule_view`)."""
        from core.harness.schedules import schedule_view

        now = self.clock.now()
        return [
            schedule_view(task, now)
            for task in sorted(self.session.tasks.values(), key=lambda t: t.id)
            if task.kind == SCHEDULE
            and task.outcome is None
            and (conversation_id is None or task.conversation_id == conversation_id)
        ]

    def inspect(self) -> Inspection:
        return self.engine.inspect()

    def timers(self) -> list[JsonObject]:
        """Pending reminders and other waits for a time, soonest first (see
        :func:`core.harness.reminders.pending_timers`)."""
        from core.harness.reminders import pending_timers

        return pending_timers(list(self.session.tasks.values()))

    def approvals(self) -> list[JsonObject]:
        """Tool calls waiting for a person's decision, oldest first (see
        :func:`core.harness.approvals.pending_approvals`)."""
        return pending_approvals(self.session.tasks.values())

    async def decide_approval(
        self,
        task_id: int,
        decision: str,
        *,
        note: str | None = None,
        request_id: str | None = None,
    ) -> JsonObject:
        """Approve or deny the call ``task_id`` pending approval; see
        :func:`core.harness.approvals.decide`."""
        return await decide(self, task_id, decision, note=note, request_id=request_id)

    def next_wake(self) -> int | None:
        return self.engine.next_wake()

    async def usage(self) -> Usage:
        """The sum of every conversation's usage ledger and current run's."""
        total = Usage()
        for conv in await self._all_conversations():
            live = await self.session.document_value(LIVE, conv)
            ledger = await ledger_value(self.session, conv, live)
            if isinstance(ledger.get("total"), dict):
                total = total + Usage.model_validate(ledger["total"])
            total = total + run_usage(live)
        return total

    async def conversations(
        self, *, limit: int = 100, cursor: Cursor | None = None
    ) -> Page[ConversationRecord]:
        """The actor's conversations, oldest first: roots, forks (``parent``) and
        sub-agents (``owner``). ``cursor``: a page's ``next``."""
        return await self.session.storage.scan_conversations(ConversationQuery(limit=limit), cursor)

    async def _all_conversations(self) -> list[int]:
        storage = self.session.storage
        return [
            c.id async for c in scan_all(storage.scan_conversations, ConversationQuery(limit=500))
        ]

    # ------------------------------------------------------------------ abort and idle

    def cancelled(self, conversation_id: int, tx: Tx | None = None) -> bool:
        """Whether the task owning this conversation is gone, abort-marked, or holding a
        failed outcome: its work must stop and its queued input must not start."""
        conv = self.session.cached_conversation(conversation_id)
        if conv is None or conv.owner is None:
            return False
        owner_id = conv.owner.task_id
        owner = (tx.staged_task(owner_id) if tx else None) or self.session.tasks.get(owner_id)
        if owner is None:
            return True
        outcome = owner.outcome
        return owner.abort_requested or (outcome is not None and outcome.kind != "completed")

    def reaches(self, task: Task, conversation_id: int) -> bool:
        """Whether live foreground work ``task`` belongs to the conversation: it runs there,
        or below a task that does, without crossing a background task."""
        if task.background:
            return False
        node: Task | None = task
        while node is not None:
            if node.conversation_id == conversation_id:
                return True
            node = owner_of(self.session, node)
            if node is not None and node.background:
                return False
        return False

    def idle(self, conversation_id: int) -> bool:
        return not any(self.reaches(t, conversation_id) for t in self.session.tasks.values())

    async def wait_for_conversation(self, conversation_id: int) -> None:
        """Wait until no live foreground work reaches the conversation (enables scheduling;
        cancelling only cancels the wait)."""
        if self.idle(conversation_id):
            return
        self.session.check_open()  # poisoned or closed: it would never become idle here
        self.resume()
        await self._idle_waiters.wait(conversation_id)

    async def abort_conversation(self, conversation_id: int, *, background: bool = False) -> int:
        """Abort the conversation's foreground work (all of it with ``background``) in one
        commit: every reached task gets a durable abort mark, queued input is withdrawn.
        Returns how many tasks were marked, once the conversation is idle again."""

        async def mark(tx: Tx) -> list[int]:
            if await tx.conversation(conversation_id) is None:
                raise UnknownRecord(f"Unknown conversation {conversation_id}")
            live = list(self.session.tasks.values())
            roots = {
                t.id
                for t in live
                if t.conversation_id == conversation_id
                and t.owner is None
                and (background or not t.background)
            }
            marked = [
                t
                for t in live
                if not t.abort_requested
                and (t.id in roots or any(o.id in roots for o in owners(self.session, t)))
            ]
            for t in marked:
                await tx.put_task(t.evolve(abort_requested=True))
            await withdraw_inputs(tx, conversation_id)
            if marked:
                fields: JsonObject = {"scope": "conversation", "tasks": len(marked)}
                await note_event(tx, conversation_id, "abort", **fields, background=background)
            return [t.id for t in marked]

        marked = await self.session.commit(mark)
        self.resume()
        for task_id in marked:
            await self.engine.wait_for_task(task_id)
        await self.wait_for_conversation(conversation_id)
        return len(marked)

    # ------------------------------------------------------------------ forks

    def document_definition(self, kind: str) -> DocDefinition[Any] | None:
        """A built-in document kind, or one an installed extension registered."""
        from core.harness.forks import document_definition

        return document_definition(self.registry, kind)

    async def fork(
        self,
        conversation_id: int,
        at_entry: int,
        *,
        owner_task_id: int | None = None,
        agent: Mapping[str, Any] | None = None,
    ) -> Conversation:
        """A conversation that sees this one's history up to ``at_entry`` (not copied) and
        gets its documents by their fork policy; ``agent`` changes the child's agent (see
        :func:`~core.harness.forks.fork_conversation`)."""
        from core.harness.forks import fork_conversation

        return Conversation(
            self,
            await fork_conversation(
                self, conversation_id, at_entry, owner_task_id=owner_task_id, agent=agent
            ),
        )

    # ------------------------------------------------------------------ views and watches

    async def view(self, conversation_id: int) -> JsonObject:
        """The committed view of a conversation: active entries and current documents."""
        return await self._views.view(conversation_id)

    async def watch(self, conversation_id: int) -> Watch:
        """The view, then one delta frame per commit (see :mod:`core.harness.watch`)."""
        return await self._views.watch(conversation_id)

    async def task_graph(self) -> JsonObject:
        """Every live task with its state and owner edges, keyed by id (see
        :mod:`core.harness.task_graph`)."""
        return self._views.task_graph()

    async def watch_task_graph(self) -> Watch:
        return await self._views.watch_task_graph()

    async def inspected_task_graph(self) -> JsonObject:
        """``{"scheduling", "tasks": [...]}``: every live task as the scheduler derives it
        (state, live waits, blocked reason), tool tasks with their calls; what the task
        inspector shows (see :func:`core.harness.task_graph.inspected_task_graph`)."""
        return await inspected_task_graph(self)

    async def watch_document(
        self, definition: DocDefinition[Any], owner_id: int | None = None, key: str | None = None
    ) -> Watch:
        """``{"value": ...}`` of one document, then its changes; ends ``retired`` with it."""
        return await self._views.watch_document(definition, owner_id, key)

    # ------------------------------------------------------------------ services for tasks

    async def agent(self, conversation_id: int) -> ResolvedAgent:
        # Resolved once per committed agent value and registry snapshot: both are
        # replaced, never mutated, so their identities say whether anything changed.
        # No commit since the last look (several per round): the value is the same.
        seq = self.session.last_seq
        cached = self._agents.get(conversation_id)
        if (
            cached is not None
            and seq is not None
            and cached.seq == seq
            and cached.snapshot is self.registry.extensions
        ):
            return cached.resolved
        state = await self.session.current_document(AGENT, conversation_id, None)
        value = state.value if state is not None else None
        version = state.version if state is not None else None
        snapshot = self.registry.extensions
        listings = None
        if cached is not None and cached.resolved.sources:
            listings = await self._listings(conversation_id)
        if (
            cached is not None
            and cached.value is value
            and cached.version == version
            and cached.snapshot is snapshot
            and cached.listings is listings
        ):
            cached.seq = seq
            return cached.resolved
        resolved = self.registry.resolve(await self.agent_doc(conversation_id))
        if resolved.sources:
            # Tools listed from elsewhere (MCP servers) come from the committed listings:
            # no I/O here, so a recovered call resolves its tool as the run last saw it.
            listings = await self._listings(conversation_id)
            tools = dict(resolved.tools)
            for source in resolved.sources:
                try:
                    tools.update(source.tools(listing_of(cast(JsonValue, listings), source.name)))
                except Exception as e:  # a source that cannot read its listing lists none
                    self.report(e)
            resolved = replace(resolved, tools=tools)
        if len(self._agents) >= 4096:
            self._agents.clear()  # a bound, not a policy: misses only cost a resolve
        self._agents[conversation_id] = _CachedAgent(
            value, version, snapshot, resolved, seq, listings
        )
        return resolved

    async def _listings(self, conversation_id: int) -> object:
        state = await self.session.current_document(TOOL_SOURCES, conversation_id, None)
        return state.value if state is not None else None

    async def agent_doc(self, conversation_id: int) -> JsonObject:
        value = await self.session.document_value(AGENT, conversation_id)
        return value if isinstance(value, dict) else {}

    def env_for(self, conversation_id: int, cwd: str | None) -> ExecutionEnv | None:
        return None if self.env_factory is None else self.env_factory(conversation_id, cwd)

    async def context(self, conversation_id: int, cutoff: int | None = None) -> ContextView:
        """The derived context of a conversation (up to entry ``cutoff``)."""
        active = self._ranges.get(conversation_id)
        if active is None:
            active = await self._load_range(conversation_id)
            self._ranges.keep(conversation_id, active)
        return active.view(cutoff)

    def cached_message(self, conversation_id: int, entry_id: int) -> Message | None:
        """The parsed message of a committed entry of the conversation's active context
        range, if that range is in memory (``None`` otherwise: read the storage)."""
        active = self._ranges.get(conversation_id)
        return active.message_of(entry_id) if active is not None else None

    async def _load_range(self, conversation_id: int) -> ActiveRange:
        storage = self.session.storage
        # A long transcript is many pages, and a storage that answers without suspending
        # (a Durable Object's) would read them all in one step of the loop: the loop is
        # given back between pages (a 10,000-entry load held a Durable Object's 202 back
        # ~0.5 s in Pyodide). A commit landing meanwhile is in the next page. A new
        # turn gives it back before it starts (generation_task's prepare), so the
        # request that started the turn is answered before the first page is read.
        marker = await storage.latest_head(conversation_id)
        active = ActiveRange(head=marker.id if marker else None)
        start = marker.head if marker is not None and marker.head is not None else None
        query = EntryQuery(conversation_id, min_id=start, order="asc", limit=500)
        cursor: Cursor | None = None
        while True:
            page = await storage.scan_entries(query, cursor)
            for entry in page.items:
                active.add(entry)
            if page.next is None:
                return active
            cursor = page.next
            await asyncio.sleep(0)  # between pages (see above)

    def built_message(self, entry: Entry, message: Message) -> None:
        built = self._built
        if len(built) >= 1024:
            built.clear()  # entries of commits that never landed: a bound, not a policy
        built[entry.id] = message

    def _on_commit(self, event: CommitEvent) -> None:
        built = self._built
        for entry in event.entries:
            message = built.pop(entry.id, None) if built else None
            active = self._ranges.get(entry.conversation_id)
            if active is None:
                continue
            if entry.head is not None:  # a new range: of the entries kept, or reloaded
                self._ranges.rebase(entry.conversation_id, active.rebased(entry, message))
            else:
                active.add(entry, message)
        for sub in event.submissions:
            if sub.status in ("done", "unanswered"):
                self._submission_waiters.settle(sub.id, sub)
                self._ranges.settled(sub.conversation_id)
        self._views.on_commit(event)
        if event.tasks and self._idle_waiters:
            for conversation_id in self._idle_waiters.waited():
                if self.idle(conversation_id):
                    self._idle_waiters.settle(conversation_id, None)

    async def _on_settled(self, tx: Tx, task: Task) -> None:
        """The scheduler settled a task itself (fault, orphan, default abort)."""
        if task.kind == "perdure.generation":
            await settle_generation(self, tx, task)
        elif task.kind == "perdure.tool":
            await settle_tool(self, tx, task)
        elif task.kind == COMPACTION:
            from core.harness.compaction import settle_compaction

            await settle_compaction(tx, task)
