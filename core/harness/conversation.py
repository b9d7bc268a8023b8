"""Conversation: the handle callers (and the harness's tasks) hold on one conversation.

Stateless apart from a deferred root's creation arguments: every call reads or commits
through the harness, reached as :class:`ConversationHandleOwner` so that this module does
not import :mod:`~core.harness.harness` (which imports it to hand the handles out).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pydantic import ValidationError

from core.clock import Clock
from core.errors import InvalidInput, UnknownRecord
from core.harness.builtin_documents import AGENT, INBOX, LIVE
from core.harness.compaction_start import start_compaction
from core.harness.context import ContextView
from core.harness.messages import Usage, UserMessage, message_to_json
from core.harness.registry import ResolvedAgent
from core.harness.runs import (
    admit_write,
    inbox_items,
    is_running,
    new_submission,
    run_usage,
)
from core.harness.settings import HarnessSettings
from core.harness.submission import (
    Reminder,
    Submission,
    SubmissionOwner,
    admit_input,
    check_request_id,
    seen_request,
    write_draft,
)
from core.harness.usage_ledger import ledger_value, without_ledger
from core.harness.watch import Watch
from core.jsonvalue import JsonObject, JsonValue, check_text
from core.records import ConversationRecord, Entry, SubmissionRecord, SubmissionStatus, Task
from core.session.documents import DocDefinition
from core.session.transaction import Tx
from core.storage.paging import scan_all
from core.storage.port import ConversationQuery, Cursor, EntryQuery, Order, Page, SubmissionQuery

if TYPE_CHECKING:
    from core.harness.schedules import Schedule

__all__ = ["Conversation", "ConversationHandleOwner", "WhenBusy"]

WhenBusy = Literal["follow_up", "steer", "reject"]


class ConversationHandleOwner(SubmissionOwner, Protocol):
    """What a :class:`Conversation` handle uses of the harness that made it (the
    :class:`~core.harness.harness.Harness`, which satisfies it)."""

    @property
    def settings(self) -> HarnessSettings:
        """Limits and policies (queued input is placed by them at a boundary)."""
        ...

    @property
    def clock(self) -> Clock:
        """The session's clock (reminders are due by it)."""
        ...

    def resume(self) -> None:
        """Start (or keep) scheduling after a commit that created work. Never raises."""
        ...

    async def init_conversation(
        self, tx: Tx, conversation_id: int, agent: JsonObject | None
    ) -> None:
        """Inside ``tx``: write a new conversation's agent document (validated first)."""
        ...

    def configured_agent(self, current: JsonValue, change: Mapping[str, Any]) -> JsonObject:
        """``current`` with ``change`` applied and validated; pure, writes nothing."""
        ...

    async def agent_doc(self, conversation_id: int) -> JsonObject:
        """The stored agent document (``{}`` if none). Reads only."""
        ...

    async def agent(self, conversation_id: int) -> ResolvedAgent:
        """The agent document resolved against the registry. Reads only."""
        ...

    async def context(self, conversation_id: int, cutoff: int | None = None) -> ContextView:
        """The derived model context (up to entry ``cutoff``). Reads only."""
        ...

    async def fork(
        self,
        conversation_id: int,
        at_entry: int,
        *,
        owner_task_id: int | None = None,
        agent: Mapping[str, Any] | None = None,
    ) -> Conversation:
        """A new conversation seeing this one's history up to ``at_entry``, created in
        one commit; bad arguments are refused before anything is written."""
        ...

    async def abort_conversation(self, conversation_id: int, *, background: bool = False) -> int:
        """Abort the conversation's foreground (with ``background``: all) work and
        withdraw its queued input; returns how many tasks were marked, once idle."""
        ...

    async def wait_for_conversation(self, conversation_id: int) -> None:
        """Return once no foreground work reaches the conversation (resumes scheduling)."""
        ...

    async def view(self, conversation_id: int) -> JsonObject:
        """The committed view (active entries, current documents). Reads only."""
        ...

    async def watch(self, conversation_id: int) -> Watch:
        """The view, then one delta frame per commit, until ``stop()``."""
        ...


class Conversation:
    """A handle on one conversation. Stateless: compare by ``id``."""

    def __init__(
        self,
        harness: ConversationHandleOwner,
        conversation_id: int,
        *,
        create_with: JsonObject | None = None,
    ) -> None:
        self._h = harness
        self.id = conversation_id
        # A deferred root (Harness.root(defer=True)): the agent it is created with by the
        # first admission through this handle.
        self._create_with = create_with

    async def _create_if_new(self, tx: Tx) -> None:
        """Inside an admission commit, after its reads: create a deferred root. Reads the
        conversation table, so it comes before the commit's first table write."""
        if self._create_with is None or await tx.conversation(self.id) is not None:
            return
        tx.put_conversation(ConversationRecord(self.id))
        await self._h.init_conversation(tx, self.id, self._create_with)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Conversation) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    def __repr__(self) -> str:
        return f"Conversation({self.id})"

    async def submit(
        self, content: str, *, request_id: str | None = None, when_busy: WhenBusy = "follow_up"
    ) -> Submission:
        """Submit user input. Idle: placed and a run starts, in one commit. Busy: queued
        (``follow_up`` starts the next run after the answer, ``steer`` joins the current
        run after its tool round) or refused (``reject`` raises :class:`ConversationBusy`,
        writing nothing). A ``request_id`` seen before in this conversation returns the
        original submission, before any write and across restarts; naming different
        content it raises :class:`RequestIdConflict`, writing nothing.

        The handle carries the submission as this call committed it (``record``)."""
        if not isinstance(content, str) or not content.strip():
            raise InvalidInput("input content must be a non-empty string", field="content")
        check_text(content, "content")
        if when_busy not in ("follow_up", "steer", "reject"):
            raise InvalidInput(
                f"when_busy must be follow_up, steer or reject, got {when_busy!r}",
                field="when_busy",
            )
        check_request_id(request_id)
        h = self._h

        async def admit(tx: Tx) -> SubmissionRecord:
            return await admit_input(
                tx,
                self.id,
                content,
                request_id=request_id,
                when_busy=when_busy,
                settings=h.settings,
                before_write=self._create_if_new,
            )

        record = await h.session.commit(admit)
        self._create_with = None
        h.resume()
        return Submission(h, record.id, self.id, record)

    async def write(
        self,
        kind: str = "custom",
        *,
        message: JsonValue = None,
        data: JsonValue = None,
        request_id: str | None = None,
    ) -> Submission:
        """Append an entry without asking for an answer: at once when idle, else at the
        next boundary (writes are placed before user input). ``message``, if given, must be
        a valid message (it joins the model's context); see :func:`write_draft`."""
        return await self._write(write_draft(kind, message=message, data=data), request_id)

    async def compact(self, instructions: str | None = None) -> int:
        """Compact the conversation now (summarizing all but the recent context, with
        ``instructions`` as extra focus); returns the compaction task's id. The summary
        lands at once when idle, else at the current run's next boundary (after its
        tool round, or its answer)."""
        if instructions is not None:
            check_text(instructions, "instructions")
        conv = self.id

        async def start(tx: Tx) -> int:
            task = await start_compaction(tx, conv, reason="manual", instructions=instructions)
            assert task is not None  # manual compactions always start
            return task.id

        task_id = await self._h.session.commit(start)
        self._h.resume()
        return task_id

    async def remind(
        self, message: str, *, at: int | None = None, after: float | None = None
    ) -> Reminder:
        """Submit ``message`` to this conversation at ``at`` (epoch ms; a past time fires
        at once) or ``after`` seconds, at most :data:`~core.harness.reminders.MAX_DELAY_S`
        ahead; returns the reminder (its task and due time). Cancel it with
        :meth:`Harness.cancel_reminder`. Bad arguments raise :class:`InvalidInput`."""
        # Imported here, not with this module: reminders are off the open path (see
        # core/harness/harness.py, issue 36).
        from core.harness.reminders import RemindArgs, start_reminder

        try:
            args = RemindArgs(message=message, at=at, after=after)
        except ValidationError as e:
            raise InvalidInput(f"invalid reminder: {e}") from None
        h = self._h
        now = h.clock.now()
        due = args.due(now)  # refused here, before the commit, when too far ahead

        async def create(tx: Tx) -> int:
            task = await start_reminder(tx, self.id, args.message, due)
            return task.id

        task_id = await h.session.commit(create)
        h.resume()
        return Reminder(task=task_id, at=due)

    async def schedule(
        self,
        message: str,
        *,
        cron: str | None = None,
        every: int | str | None = None,
        timezone: str = "UTC",
        overlap: Literal["skip", "queue"] = "skip",
        catch_up: Literal["none", "latest"] = "latest",
        until: int | None = None,
        request_id: str | None = None,
    ) -> Schedule:
        """Submit ``message`` to this conversation at every occurrence of ``cron`` (five
        fields, read on the clock of ``timezone``) or ``every`` interval (seconds, or
        ``"15m"``), until ``until`` (epoch ms) or until cancelled with
        :meth:`Harness.cancel_schedule`; see :mod:`core.harness.schedules` for
        ``overlap`` and ``catch_up``. Returns the schedule (its ``id``, the ``next``
        occurrences in ISO-8601 in its zone). A ``request_id`` naming an earlier
        schedule of this conversation returns it (the same arguments) or raises
        :class:`RequestIdConflict`; bad arguments raise :class:`InvalidInput`. Nothing
        is written in either case."""
        # Imported here, not with this module: schedules are off the open path (see
        # core/harness/harness.py, issue 36).
        from core.harness.schedules import ScheduleArgs, create_schedule, schedule_view

        check_request_id(request_id)
        try:
            args = ScheduleArgs(
                message=message,
                cron=cron,
                every=every,
                timezone=timezone,
                overlap=overlap,
                catch_up=catch_up,
                until=until,
            )
        except ValidationError as e:
            raise InvalidInput(f"invalid schedule: {e}") from None
        h = self._h
        now = h.clock.now()
        args.cadence(now)  # refused here, before the commit, when it is not a schedule

        async def create(tx: Tx) -> Task:
            return await create_schedule(tx, self.id, args, now=now, request_id=request_id)

        task = await h.session.commit(create)
        h.resume()
        return schedule_view(task, now)

    async def reset(
        self, handoff: str | None = None, *, request_id: str | None = None
    ) -> Submission:
        """Start a new context range: the model sees only ``handoff`` (if given) and what
        follows. Nothing is deleted. When busy, the reset lands after the current run."""
        if handoff is not None:
            check_text(handoff, "handoff")
        draft: JsonObject = {"kind": "reset", "head": "self"}
        if handoff:
            draft["message"] = message_to_json(UserMessage(content=handoff))
        return await self._write(draft, request_id)

    async def _write(self, draft: JsonObject, request_id: str | None) -> Submission:
        check_request_id(request_id)
        h = self._h

        async def admit(tx: Tx) -> SubmissionRecord:
            existing = await seen_request(tx, self.id, request_id, "write", draft)
            if existing is not None:
                return existing
            await self._create_if_new(tx)
            record = await new_submission(tx, self.id, "write", request_id)
            return await admit_write(tx, record, draft)

        record = await h.session.commit(admit)
        self._create_with = None
        return Submission(h, record.id, self.id, record)

    async def agent(self) -> JsonObject:
        """The stored agent document (names only); a deferred root not created yet
        answers the agent it will be created with."""
        if self._create_with is not None and await self._h.session.conversation(self.id) is None:
            return self._h.configured_agent({}, self._create_with)
        return await self._h.agent_doc(self.id)

    async def configure(self, **change: Any) -> JsonObject:
        """Change agent fields in one commit (``None`` clears a field)."""
        h = self._h

        async def apply(tx: Tx) -> JsonObject:
            await self._create_if_new(tx)
            doc = await tx.doc(AGENT, self.id)
            doc.value = h.configured_agent(doc.value, change)
            return dict(doc.value)

        agent = await h.session.commit(apply)
        self._create_with = None
        return agent

    async def context(self) -> ContextView:
        return await self._h.context(self.id)

    async def submission_by_request(self, request_id: str) -> Submission | None:
        """The submission this conversation admitted under ``request_id`` (request ids
        are per conversation), or ``None``: how a client that lost the id finds it."""
        record = await self._h.session.storage.submission_by_request(self.id, request_id)
        if record is None:
            return None
        return Submission(self._h, record.id, record.conversation_id, record)

    async def submissions(
        self,
        *,
        status: SubmissionStatus | None = None,
        order: Order | None = None,
        limit: int = 100,
        cursor: Cursor | None = None,
    ) -> Page[SubmissionRecord]:
        """This conversation's submissions (``status``: only those), oldest first by
        default. ``cursor``: a page's ``next``."""
        return await self._h.session.storage.scan_submissions(
            SubmissionQuery(conversation_id=self.id, status=status, order=order, limit=limit),
            cursor,
        )

    async def entries(
        self, *, limit: int = 100, cursor: Cursor | None = None, order: Order | None = None
    ) -> Page[Entry]:
        """The conversation's history (fork-aware), newest first by default."""
        return await self._h.session.storage.scan_entries(
            EntryQuery(self.id, limit=limit, order=order), cursor
        )

    async def fork(
        self,
        at_entry: int,
        *,
        owner_task_id: int | None = None,
        agent: Mapping[str, Any] | None = None,
    ) -> Conversation:
        """A fork at ``at_entry`` (see :meth:`Harness.fork`); ownerless unless owned by a
        live task."""
        return await self._h.fork(self.id, at_entry, owner_task_id=owner_task_id, agent=agent)

    async def document(
        self, definition: DocDefinition[Any], *, key: str | None = None, at_entry: int | None = None
    ) -> JsonValue:
        """A conversation document's committed value, now or as of the commit of
        ``at_entry`` (rewindable documents only)."""
        at = None
        if at_entry is not None:
            entry = await self._h.session.storage.visible_entry(self.id, at_entry)
            if entry is None:
                raise UnknownRecord(f"entry {at_entry} is not visible in conversation {self.id}")
            at = entry.commit_seq
        if at is None:
            return await self._h.session.document_value(definition, self.id, key)
        return await self._h.session.document_at(definition, self.id, key, at)

    async def abort(self, *, background: bool = False) -> int:
        """Abort this conversation's foreground work (and background work too with
        ``background=True``); queued input is withdrawn. Returns the number of tasks
        marked, once the conversation is idle."""
        return await self._h.abort_conversation(self.id, background=background)

    async def wait_for_idle(self) -> None:
        """Wait until no foreground work reaches this conversation."""
        await self._h.wait_for_conversation(self.id)

    async def view(self) -> JsonObject:
        """The committed view: active entries and current documents."""
        return await self._h.view(self.id)

    async def watch(self) -> Watch:
        """The view, then one delta frame per commit; ``stop()`` when done."""
        return await self._h.watch(self.id)

    async def live(self) -> JsonValue:
        """The ``live`` document as the view shows it: without the usage ledger it keeps
        (:meth:`usage`, and the view's ``usage`` document, read that)."""
        return without_ledger(await self._h.session.document_value(LIVE, self.id))

    async def usage(self, *, include_owned: bool = False) -> Usage:
        """This conversation's usage (its ledger and the current run's, which joins the
        ledger when the run ends); with ``include_owned``, plus that of every
        conversation its tasks own (sub-agents), recursively."""
        live = await self._h.session.document_value(LIVE, self.id)
        total = (await ledger_value(self._h.session, self.id, live)).get("total")
        usage = Usage.model_validate(total) if isinstance(total, dict) else Usage()
        usage = usage + run_usage(live)
        if include_owned:
            storage = self._h.session.storage
            async for conv in scan_all(
                storage.scan_conversations,
                ConversationQuery(owner_conversation_id=self.id, limit=500),
            ):
                usage = usage + await Conversation(self._h, conv.id).usage(include_owned=True)
        return usage

    async def busy(self) -> bool:
        live = await self._h.session.document_value(LIVE, self.id)
        inbox = await self._h.session.document_value(INBOX, self.id)
        return is_running(live) or bool(inbox_items(inbox))
