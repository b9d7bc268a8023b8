"""Tx: what a commit callback sees and stages.

The rules a transaction enforces, so every commit is well-formed before storage sees it:

* **read before write**: table reads (conversations, entries, tasks, submissions) are
  allowed only before the first table write (:class:`ReadAfterWrite` otherwise), so a
  commit never mixes a decision with state it has already changed. Documents stay
  readable and writable throughout.
* every value is plain JSON (:class:`~core.errors.InvalidJson` before anything is staged);
* record rules: new owned work needs a live owner that is neither completing, terminal
  nor abort-marked (:meth:`Tx.live_owner`); a task's conversation, kind, owner and
  background flag never change; terminal tasks never change.

Which tasks may be created (definitions, child rules) is the task layer's decision
(``core.tasks.creation``), reached through :class:`TaskLayer`; so are ownership
queries (``core.tasks.ownership``).

Size: over 600 lines because :class:`Tx` is one class with one job, staging a
well-formed commit, and the JSON gate of its task records (``_checked_task``, which
:meth:`Tx.put_task` applies and whose sharing rule depends on what ``put_task`` passes
as ``before``) belongs beside it rather than in a module of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any, Literal, Protocol, cast

from core.clock import Clock
from core.errors import (
    DocumentError,
    ReadAfterWrite,
    TaskNotFound,
    TaskStateError,
    TransactionSettled,
    UnknownRecord,
    UnknownTaskKind,
)
from core.jsonvalue import (
    JsonObject,
    JsonValue,
    check_text,
    copy_admitted,
    json_check,
    json_copy,
)
from core.readonly import readonly
from core.records import (
    ROOT_CONVERSATION_ID,
    Aborted,
    Completed,
    Completing,
    ConversationOwner,
    ConversationParent,
    ConversationRecord,
    DocumentRecord,
    DocumentState,
    Entry,
    Failed,
    Faulted,
    Orphaned,
    Outcome,
    Pending,
    Running,
    SubmissionRecord,
    Task,
    TaskState,
    Terminal,
    Waiting,
)
from core.session.documents import DocDefinition, DocHandle
from core.storage.port import (
    Cursor,
    DocumentCopy,
    DocumentCreate,
    EntryQuery,
    Page,
    Storage,
    SubmissionQuery,
    TaskQuery,
)
from core.telemetry import Telemetry

__all__ = ["TaskLayer", "TaskSpec", "Tx", "TxSession"]

DocAddress = tuple[str, str, int | None, str | None]


@readonly
class TaskSpec:
    """What a new task is to be: everything :meth:`Tx.create_task` was asked (see there
    for each field), handed to the task layer as one record instead of being restated
    at every layer it passes."""

    definition: Any
    """A ``TaskDefinition`` or a registered kind name (the session layer cannot name the
    task layer's type)."""
    input: JsonValue = None
    conversation_id: int | None = None
    owner: int | None = None
    background: bool = False
    checkpoint: JsonObject | None = None
    until: int | None = None
    continues: Task | None = None
    again: int | None = None


class TaskLayer(Protocol):
    """The task layer's part in a session's commits.

    ``core.tasks`` implements it (the scheduler; a bare ``TaskFactory`` when nothing
    schedules) and the engine attaches it as ``Session.task_layer``. It is named here
    because the session layer may not import the task layer above it.
    """

    async def create_task(self, tx: Tx, spec: TaskSpec) -> Task:
        """Stage the task ``spec`` describes in ``tx`` and return its record (see
        :meth:`Tx.create_task`).

        ``spec.definition`` is a task definition or a registered kind name. Raises
        ``UnknownTaskKind``, ``TaskStateError``, ``UnknownRecord`` or ``InvalidJson``
        with nothing staged for the task.
        """
        ...

    async def before_prepare(self, tx: Tx) -> None:
        """Join a commit: called on the line once the commit callback has returned, only
        if it staged task writes, before the batch goes to storage. May stage more task
        writes and ``tx.after_commit`` callbacks; raising fails the commit, nothing written."""
        ...


class TxSession(Protocol):
    """What a transaction reads of its session: committed state, storage and clock."""

    @property
    def storage(self) -> Storage: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def telemetry(self) -> Telemetry: ...

    @property
    def tasks(self) -> dict[int, Task]:
        """Every live task record, as committed (shared: do not mutate)."""
        ...

    @property
    def task_layer(self) -> TaskLayer | None: ...

    async def conversation(self, conversation_id: int) -> ConversationRecord | None: ...

    async def task(self, task_id: int) -> Task | None: ...

    async def current_document(
        self, definition: DocDefinition[Any], owner_id: int | None, key: str | None
    ) -> DocumentState | None: ...

    async def prefetch_docs(self, definition: DocDefinition[Any], ids: Iterable[int]) -> None: ...

    async def unborn_document_id(self, address: DocAddress) -> int:
        """The id for a document that does not exist at ``address``: the same one each
        time until a commit creates it there (a document left at its initial value is
        not created, and its id is kept for the next commit that opens it)."""
        ...


class Tx:
    """A transaction on the session's mutation line. Valid only inside its callback."""

    def __init__(self, session: TxSession) -> None:
        self._session = session
        self._settled = False
        self._wrote = False
        self._now: int | None = None
        self.minted: set[int] = set()
        self.conversations: dict[int, ConversationRecord] = {}
        self.entries: list[Entry] = []
        self.tasks: dict[int, Task] = {}
        self.unstored: set[int] = set()
        """Tasks this commit creates and leaves out of storage (:meth:`leave_unstored`)."""
        self.unwritten: set[int] = set()
        """The staged tasks the commit did not write (set as it is prepared)."""
        self.submissions: dict[int, SubmissionRecord] = {}
        self.docs: dict[DocAddress, DocHandle] = {}
        self.extra_writes: list[Any] = []
        self.after_commit: list[Callable[[], None]] = []
        """Called (on the line) once this transaction's commit is durable and adopted."""

    # ------------------------------------------------------------------ state

    @property
    def session(self) -> TxSession:
        return self._session

    def now(self) -> int:
        """The session clock, read once per transaction."""
        if self._now is None:
            self._now = self._session.clock.now()
        return self._now

    def _live(self) -> None:
        if self._settled:
            raise TransactionSettled("the transaction has settled; it can no longer be used")

    def _read(self) -> None:
        self._live()
        if self._wrote:
            raise ReadAfterWrite(
                "table reads are allowed only before the first table write of a transaction"
            )

    def _write(self) -> None:
        self._live()
        self._wrote = True

    def settle(self) -> None:
        self._settled = True

    @property
    def empty(self) -> bool:
        return not (
            self.conversations
            or self.entries
            or self.tasks
            or self.submissions
            or self.docs
            or self.extra_writes
        )

    # ------------------------------------------------------------------ table reads

    async def conversation(self, conversation_id: int) -> ConversationRecord | None:
        self._read()
        return await self._session.conversation(conversation_id)

    async def entry(self, entry_id: int) -> Entry | None:
        self._read()
        return await self._session.storage.entry(entry_id)

    async def task(self, task_id: int) -> Task | None:
        self._read()
        return await self._session.task(task_id)

    async def submission(self, submission_id: int) -> SubmissionRecord | None:
        self._read()
        return await self._session.storage.submission(submission_id)

    async def submission_by_request(
        self, conversation_id: int, request_id: str
    ) -> SubmissionRecord | None:
        self._read()
        return await self._session.storage.submission_by_request(conversation_id, request_id)

    async def scan_tasks(self, query: TaskQuery, cursor: Cursor | None = None) -> Page[Task]:
        self._read()
        return await self._session.storage.scan_tasks(query, cursor)

    async def scan_submissions(
        self, query: SubmissionQuery, cursor: Cursor | None = None
    ) -> Page[SubmissionRecord]:
        self._read()
        return await self._session.storage.scan_submissions(query, cursor)

    async def scan_entries(self, query: EntryQuery, cursor: Cursor | None = None) -> Page[Entry]:
        self._read()
        return await self._session.storage.scan_entries(query, cursor)

    # ------------------------------------------------------------------ staged state

    def staged_task(self, task_id: int) -> Task | None:
        """A task as this transaction has staged it, else as committed (live tasks only)."""
        return self.tasks.get(task_id) or self._session.tasks.get(task_id)

    async def mint_id(self) -> int:
        self._live()
        new_id = await self._session.storage.mint_id()
        self.minted.add(new_id)
        return new_id

    # ------------------------------------------------------------------ conversations

    async def create_conversation(
        self,
        *,
        parent: ConversationParent | None = None,
        owner_task_id: int | None = None,
    ) -> ConversationRecord:
        """Create a conversation: a fork of ``parent`` and/or one owned by a live task."""
        self._live()
        owner: ConversationOwner | None = None
        if parent is not None:
            if await self.conversation_exists(parent.conversation_id) is False:
                raise UnknownRecord(f"Unknown conversation {parent.conversation_id}")
            visible = await self._session.storage.visible_entry(
                parent.conversation_id, parent.at_entry
            )
            if visible is None:
                raise UnknownRecord(
                    f"entry {parent.at_entry} is not visible in conversation "
                    f"{parent.conversation_id}"
                )
        if owner_task_id is not None:
            owning = self.live_owner(owner_task_id)
            owner = ConversationOwner(owning.conversation_id, owning.id)
        conv = ConversationRecord(await self.mint_id(), parent, owner)
        self.put_conversation(conv)
        return conv

    def put_conversation(self, conversation: ConversationRecord) -> None:
        """Stage a conversation record (created once; conversations are immutable)."""
        self._write()
        self.conversations[conversation.id] = conversation

    async def ensure_root(self) -> None:
        """Stage the root conversation (id 1) unless it exists."""
        if ROOT_CONVERSATION_ID not in self.conversations and not await self.conversation_exists(
            ROOT_CONVERSATION_ID
        ):
            self.put_conversation(ConversationRecord(ROOT_CONVERSATION_ID))

    async def conversation_exists(self, conversation_id: int) -> bool:
        """Whether the conversation is staged here or committed (not a table read: it
        stays allowed after writes, as the staging rules need it)."""
        if conversation_id in self.conversations:
            return True
        return await self._session.conversation(conversation_id) is not None

    # ------------------------------------------------------------------ entries

    async def append_entry(
        self,
        conversation_id: int,
        kind: str,
        *,
        message: JsonValue = None,
        data: JsonValue = None,
        head: int | Literal["self"] | None = None,
        edits: list[JsonValue] | None = None,
        by_task_id: int | None = None,
        owned: bool = False,
    ) -> Entry:
        """Append an immutable entry. ``head="self"`` makes it a head marker for itself.

        ``owned``: ``message`` and ``data`` were built for this entry and are handed over
        (no part of them is held elsewhere): checked as JSON, not copied."""
        self._live()
        if not await self.conversation_exists(conversation_id):
            raise UnknownRecord(f"Unknown conversation {conversation_id}")
        if not kind or type(kind) is not str:
            raise ValueError("an entry kind is a non-empty string")
        check_text(kind, "entry kind")
        admit = json_check if owned else json_copy
        entry_id = await self.mint_id()
        entry = Entry(
            id=entry_id,
            conversation_id=conversation_id,
            kind=kind,
            message=admit(message, "entry message"),
            data=admit(data, "entry data"),
            head=entry_id if head == "self" else head,
            edits=None
            if edits is None
            else cast("list[JsonValue]", json_copy(edits, "entry edits")),
            by_task_id=by_task_id,
            created_at=self.now(),
        )
        self._write()
        self.entries.append(entry)
        return entry

    # ------------------------------------------------------------------ submissions

    def put_submission(self, submission: SubmissionRecord) -> None:
        """Stage a submission record (full replacement)."""
        self._write()
        if submission.detail is not None:
            submission = replace(
                submission, detail=json_copy(submission.detail, "submission detail")
            )
        self.submissions[submission.id] = submission

    # ------------------------------------------------------------------ tasks

    async def create_task(
        self,
        definition: Any,
        input: JsonValue = None,
        *,
        conversation_id: int | None = None,
        owner: int | None = None,
        background: bool = False,
        checkpoint: JsonObject | None = None,
        until: int | None = None,
        continues: Task | None = None,
        again: int | None = None,
    ) -> Task:
        """Create a task, ready to run (``waiting`` on nothing) at its initial checkpoint
        (or at ``checkpoint``, when the creator has already done the first phase's work);
        with ``until`` (epoch ms) it waits for that time first.

        ``definition`` is a ``TaskDefinition`` or a registered kind name. ``owner`` makes
        it a child of a live task (same conversation, never background); otherwise it is
        owned by its conversation (the root conversation by default, created on demand).
        The task's spans belong to its owner's trace; ``continues`` names a task whose
        work this one carries on (a run's next round), so they belong to that task's
        trace instead of beginning one (see :meth:`core.telemetry.Telemetry.trace_for`).
        ``again`` is the id of a task kept out of storage (:meth:`leave_unstored`) that
        a restart lost: it is created again under that id, so its identity (and the op
        ids derived from it) stays what it was. The caller has checked that no record
        holds that id (ids minted before a commit are never minted again: see
        ``Storage.mint_id``).
        The session's task layer decides and stages it (see :class:`TaskLayer`); a
        session without one creates no tasks (``UnknownTaskKind``).
        """
        self._live()
        layer = self._session.task_layer
        if layer is None:
            raise UnknownTaskKind(f"no task layer is attached to create {definition!r}")
        if again is not None:
            if self.staged_task(again) is not None:
                raise TaskStateError(f"Task {again} is live: it cannot be created again")
            self.minted.add(again)
        return await layer.create_task(
            self,
            TaskSpec(
                definition,
                input,
                conversation_id,
                owner,
                background,
                checkpoint,
                until,
                continues,
                again,
            ),
        )

    def live_owner(self, owner_id: int) -> Task:
        """The live task (staged or committed) that new owned work may name as owner:
        neither completing, terminal nor abort-marked; ``TaskStateError`` otherwise."""
        owner = self.staged_task(owner_id)
        if owner is None:
            raise TaskStateError(f"owner task {owner_id} does not exist or is terminal")
        if owner.abort_requested:
            raise TaskStateError(f"owner task {owner_id} has a durable abort mark")
        if isinstance(owner.state, Completing | Terminal):
            raise TaskStateError(f"owner task {owner_id} is {owner.status}")
        return owner

    async def put_task(self, task: Task) -> Task:
        """Stage a full replacement of a live task record; return what was staged.

        Payloads are copied and checked as JSON; the conversation, kind and owner of a
        task never change, terminal tasks never change, and terminal or completing
        records drop their memos.
        """
        self._live()
        before = self.staged_task(task.id)
        if before is None and task.id not in self.minted:
            stored = await self._session.storage.task(task.id)
            if stored is not None and isinstance(stored.state, Terminal):
                raise TaskStateError(f"Task {task.id} is terminal")
            if stored is None:
                raise TaskNotFound(f"Task {task.id} does not exist")
            before = stored
        if before is not None and (
            before.conversation_id != task.conversation_id
            or before.kind != task.kind
            or before.owner != task.owner
            or before.background != task.background
        ):
            raise TaskStateError(
                f"Task {task.id}: conversation, kind, owner and background never change"
            )
        task = _checked_task(task, before)
        self._write()
        self.tasks[task.id] = task
        return task

    def stage_created_task(self, task: Task, *, input_admitted: bool) -> Task:
        """Stage a task minted by this commit as the task layer's creation built it: at a
        ``Waiting`` state whose checkpoint the creation copied and checked itself (a copy
        nobody else holds), staged as it is, like ``input`` with ``input_admitted``; the
        rest is copied and checked as :meth:`put_task` does. Copying those again cost two
        copies per task created (two a tool round)."""
        self._live()
        if task.id not in self.minted or self.staged_task(task.id) is not None:
            raise TaskStateError(f"Task {task.id} is not a task this commit creates")
        if type(task.state) is not Waiting or task.state.on:
            raise TaskStateError(f"Task {task.id} is created waiting on nothing")
        task = _checked_task(task, state_admitted=True, input_admitted=input_admitted)
        self._write()
        self.tasks[task.id] = task
        return task

    def leave_unstored(self, task_id: int) -> None:
        """Keep ``task_id``, a task this commit creates, out of storage for as long as
        nothing but its own run and end would be written (docs/design.md, "Tasks kept
        in memory"): the creator's checkpoint, written by this commit, records what a
        recovery needs to create it again, and the entry it appends as it ends is its
        end. Its row is written after all as soon as anything else would change or name
        it: a checkpoint, a wait or an abort mark before its end, an end that appends no
        entry of its own, a memo, or a task, conversation or document it owns."""
        self._live()
        if task_id not in self.minted or task_id not in self.tasks:
            raise TaskStateError(f"Task {task_id} is not a task this commit creates")
        self.unstored.add(task_id)

    # ------------------------------------------------------------------ documents

    async def prefetch_docs(self, definition: DocDefinition[Any], ids: Iterable[int]) -> None:
        """Read ``definition``'s documents owned by ``ids`` at once, to :meth:`doc` each."""
        self._live()
        await self._session.prefetch_docs(definition, ids)

    async def doc(
        self, definition: DocDefinition[Any], owner_id: int | None = None, key: str | None = None
    ) -> DocHandle:
        """The handle of a document's current incarnation, or of a new one at its initial
        value (a ``latest`` one left at that value is not created by the commit)."""
        self._live()
        address: DocAddress = (definition.kind, definition.scope, owner_id, key)
        handle = self.docs.get(address)
        if handle is not None:
            return handle
        await self._check_doc_owner(definition, owner_id)
        state = await self._session.current_document(definition, owner_id, key)
        if state is None:
            value = definition.validate(
                json_copy(definition.initial(), f"initial {definition.kind!r}")
            )
            record = DocumentRecord(
                id=await self._session.unborn_document_id(address),
                kind=definition.kind,
                scope=definition.scope,
                owner_id=owner_id,
                key=key,
                history=definition.history,
            )
            handle = DocHandle(definition, record, definition.version, None, value, 0, True)
        else:
            if (state.record.history, state.record.scope) != (definition.history, definition.scope):
                raise DocumentError(
                    f"document {definition.kind!r} is stored as {state.record.scope}/"
                    f"{state.record.history}, not {definition.scope}/{definition.history}"
                )
            # The committed value was admitted when it was written: copied, not checked.
            value = definition.upgrade(copy_admitted(state.value), state.version)
            handle = DocHandle(
                definition,
                state.record,
                state.version,
                state.value,
                value,
                state.deltas_since_base,
                False,
            )
        self.docs[address] = handle
        return handle

    async def _check_doc_owner(self, definition: DocDefinition[Any], owner_id: int | None) -> None:
        if definition.scope == "session":
            if owner_id is not None:
                raise DocumentError(f"session document {definition.kind!r} has no owner")
        elif type(owner_id) is not int:
            raise DocumentError(
                f"{definition.scope} document {definition.kind!r} needs an owner id"
            )
        elif definition.scope == "conversation":
            if not await self.conversation_exists(owner_id):
                raise UnknownRecord(f"Unknown conversation {owner_id}")
        else:
            owner = self.staged_task(owner_id)
            if owner is None or isinstance(owner.state, Terminal):
                raise DocumentError(f"task document {definition.kind!r} needs a live task")

    def stage_document_write(self, write: DocumentCreate | DocumentCopy) -> None:
        """Stage a raw document creation (forks use it to copy documents into a child)."""
        self._live()
        self.extra_writes.append(write)


# ---------------------------------------------------------------------- the task gate


def _checked_task(
    task: Task,
    before: Task | None = None,
    *,
    state_admitted: bool = False,
    input_admitted: bool = False,
) -> Task:
    """Copy and JSON-check every payload of a task record (input, checkpoint, outcome,
    memos) as :meth:`Tx.put_task` stages it.

    Payload objects shared with ``before`` (the kernel's own committed or staged record,
    which no caller can reach) were checked when they were admitted and are reused, as
    are the state and the input where the caller says it admitted them itself (the task
    layer's creation: fresh copies nobody else holds). A record whose payloads all are
    such parts is staged as it is (no copy of the record).
    """
    state = task.state
    where = f"task {task.id}"
    new_state: TaskState
    if state_admitted or (before is not None and state is before.state):
        new_state = state
    elif isinstance(state, Waiting):
        on = tuple(state.on)
        if any(type(t) is not int for t in on):
            raise TaskStateError(f"{where}: waiting on non-task ids {on!r}")
        if state.policy not in ("all_settled", "fail_fast"):
            raise TaskStateError(f"{where}: unknown wait policy {state.policy!r}")
        if state.until is not None and type(state.until) is not int:
            raise TaskStateError(f"{where}: until must be epoch milliseconds (int)")
        new_state = Waiting(_checkpoint(state.checkpoint, where), on, state.policy, state.until)
    elif isinstance(state, Pending | Running):
        checkpoint = state.checkpoint
        if before is None or checkpoint is not before.checkpoint:
            new_state = type(state)(_checkpoint(checkpoint, where))
        elif type(state) is Pending or type(state) is Running:
            # The state object holds nothing but the admitted checkpoint: kept as it is
            # (a reservation stages one per task it starts).
            new_state = state
        else:
            new_state = type(state)(checkpoint)
    elif isinstance(state, Completing | Terminal):
        new_state = type(state)(_outcome(state.outcome, where))
    else:
        raise TaskStateError(f"{where}: unknown state {state!r}")
    memos = task.memos
    if isinstance(new_state, Completing | Terminal):
        memos = {}  # settled records drop their memos
    elif before is not None and memos is before.memos:
        pass  # admitted with the record before
    elif type(memos) is dict and not memos:
        memos = {}  # nothing to check (the caller's dict stays the caller's)
    else:
        memos = cast("dict[str, JsonValue]", json_copy(memos, f"{where} memos"))
    value = task.input
    if not input_admitted and (before is None or value is not before.input):
        value = json_copy(value, f"{where} input")
    if new_state is state and memos is task.memos and value is task.input:
        return task  # every payload is an admitted one: the record itself is staged
    return task.evolve(input=value, state=new_state, memos=memos)


def _checkpoint(checkpoint: object, where: str) -> JsonObject:
    value = json_copy(checkpoint, f"{where} checkpoint")
    if type(value) is not dict or type(value.get("phase")) is not str:
        raise TaskStateError(f"{where}: a checkpoint is an object with a string 'phase'")
    return value


def _outcome(outcome: Outcome, where: str) -> Outcome:
    w = f"{where} outcome"
    if isinstance(outcome, Completed):
        return Completed(json_copy(outcome.result, w))
    if isinstance(outcome, Failed):
        return Failed(
            replace(outcome.error, detail=json_copy(outcome.error.detail, w)),
            json_copy(outcome.result, w),
        )
    if isinstance(outcome, Aborted):
        return Aborted(outcome.reason, json_copy(outcome.result, w))
    if isinstance(outcome, Faulted):
        return Faulted(replace(outcome.error, detail=json_copy(outcome.error.detail, w)))
    if isinstance(outcome, Orphaned):
        return outcome
    raise TaskStateError(f"{where}: unknown outcome {outcome!r}")
