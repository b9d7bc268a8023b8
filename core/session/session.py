"""Session: the one mutation line over a Storage.

``session.commit(fn)`` runs ``fn(tx)`` serially with every other commit. The writes it
stages go to ``storage.commit`` as one batch; only after storage succeeded does the
session adopt them (live tasks, document values, conversation cache) and notify commit
listeners, synchronously and still on the line, so no listener ever sees state that is
not durable. Failure classes:

* ``fn`` raises, or staging fails: nothing is written, the session stays usable;
* storage raises :class:`~core.errors.StorageRejected`: nothing was written, usable;
* storage raises anything else: the outcome is unknown, so the session is *poisoned*
  and every later call raises :class:`~core.errors.SessionPoisoned` until the storage
  is reopened.

Once ``fn`` has returned, the storage commit is shielded from the caller's
cancellation: it lands (or fails) and is adopted regardless, and the line is released
only then.

The session keeps records; tasks are the task layer's (``core.tasks``): it creates
them and joins commits through the one :class:`~core.session.transaction.TaskLayer`
attached as :attr:`Session.task_layer`, and derives ownership from the record indexes
kept here (:meth:`Session.owned_by`, :meth:`Session.rootless_owned_by`,
:meth:`Session.waiting_on`).

Size: just over 600 lines because the line (commit, flush, adoption), the caches and
indexes it keeps in step with every commit, and the reads served from them are one
state; a split would pass that state between modules.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Iterable
from contextvars import ContextVar
from dataclasses import field, replace
from typing import Any, TypeVar, cast, overload

from core.clock import Clock
from core.docops import diff
from core.errors import SessionClosed, SessionPoisoned, StorageRejected
from core.jsonvalue import JsonValue, json_copy, json_equal
from core.readonly import readonly
from core.records import (
    ConversationRecord,
    DocumentRecord,
    DocumentState,
    Entry,
    SubmissionRecord,
    Task,
    TaskStatus,
    Terminal,
    Waiting,
)
from core.session.documents import DocDefinition, DocHandle
from core.session.landing import land_shielded
from core.session.transaction import TaskLayer, Tx
from core.session.waiters import WaiterRegistry
from core.storage.paging import scan_all
from core.storage.port import (
    DeferringStorage,
    DocumentChange,
    DocumentCreate,
    DocumentQuery,
    DocumentRetire,
    SequencedStorage,
    Storage,
    TaskQuery,
    Write,
)
from core.telemetry import NO_TELEMETRY, Telemetry

__all__ = ["CommitEvent", "DocumentEvent", "Session", "ensure_outside_commit", "in_commit"]

T = TypeVar("T")

_IN_COMMIT: ContextVar[bool] = ContextVar("perdure_in_commit", default=False)


def in_commit() -> bool:
    """True while the calling code runs inside a commit callback (or a task it spawned)."""
    return _IN_COMMIT.get()


def ensure_outside_commit(what: str) -> None:
    """Refuse to start an external effect (a phase, a model request, a tool call) from
    inside a commit callback: effects must never run while the line is held."""
    if _IN_COMMIT.get():
        raise RuntimeError(f"{what} must not run inside a commit callback")


DocAddress = tuple[str, str, int | None, str | None]
_LIVE_STATUSES: tuple[TaskStatus, ...] = ("pending", "running", "waiting", "completing")


@readonly
class DocumentEvent:
    """A document change as committed: ``ops`` is ``None`` for a base (creation, version
    change, or a base decision), otherwise the delta that was stored."""

    record: DocumentRecord
    version: int
    value: JsonValue
    ops: list[JsonValue] | None
    created: bool = False
    retired: bool = False


@readonly
class CommitEvent:
    """Everything one commit changed, delivered to listeners after storage success."""

    seq: int
    conversations: list[ConversationRecord] = field(default_factory=list)
    entries: list[Entry] = field(default_factory=list)
    tasks: list[Task] = field(default_factory=list)
    submissions: list[SubmissionRecord] = field(default_factory=list)
    documents: list[DocumentEvent] = field(default_factory=list)


class Session:
    """The mutation line, committed-state caches and commit listeners of one storage."""

    def __init__(self, storage: Storage, clock: Clock) -> None:
        self.storage = storage
        self.clock = clock
        self.tasks: dict[int, Task] = {}
        """Every live (non-terminal) task record, as committed."""
        self.unstored: set[int] = set()
        """Live tasks whose record was never written (``Tx.leave_unstored``): gone with
        the process; their creator's checkpoint lets a recovery create them again."""
        self.last_seq: int | None = None
        self.task_layer: TaskLayer | None = None
        """Creates tasks for ``Tx.create_task`` and joins every commit that stages task
        writes (the scheduler reserves what the commit made runnable, in that commit);
        attached once by the engine (a bare ``core.tasks.TaskFactory`` in kernel tests)."""
        self.report: Callable[[BaseException], None] = _report
        self.telemetry: Telemetry = NO_TELEMETRY
        """The host's logs and traces (see :mod:`core.telemetry`); set by the harness."""
        self._registries: list[WaiterRegistry[Any, Any]] = []
        """Every registry :meth:`waiters` handed out: failed at once, synchronously, when an
        uncertain storage failure poisons the session, since nothing will settle them."""
        self._line = asyncio.Lock()
        self._sealed = False
        self._closed = False
        self._poison: BaseException | None = None
        self._listeners: list[Callable[[CommitEvent], None]] = []
        self._conversations: dict[int, ConversationRecord] = {}
        # Committed current documents (frozen: the answers of current_document, shared;
        # their values are never mutated, handles and readers get copies).
        self._docs: dict[int, DocumentState] = {}
        self._addresses: dict[DocAddress, int | None] = {}
        self._unborn: dict[DocAddress, int] = {}
        """The id minted for each document a commit opened where none existed and left
        at its initial value (not created: ``_document_writes``). The next commit that
        opens it takes the same id, so a document that stays initial (most inboxes)
        costs one id per open session, not one per commit that looks at it, and the ids
        of everything else stay what they were when such a document was created."""
        self._task_docs: dict[int, set[int]] = {}
        """Current task-scoped documents per task, for tasks whose set is known."""
        # Indexes over ``tasks`` (kept in step with it by ``_track``) and over the cached
        # conversations, so that ownership and wake-up questions cost the size of the
        # answer rather than a scan of every live task on each commit.
        self._by_owner: dict[int, set[int]] = {}
        """Live task ids by their ``owner`` field."""
        self._rootless: dict[int, set[int]] = {}
        """Live owner-less task ids by conversation."""
        self._owned_conversations: dict[int, set[int]] = {}
        """Cached conversation ids by the task that owns them."""
        self._waiters: dict[int, set[int]] = {}
        """Live waiting task ids by each task id their ``Waiting.on`` names."""

    @classmethod
    async def open(cls, storage: Storage, clock: Clock) -> Session:
        """Load the live tasks (and their conversations) from storage. Writes nothing."""
        session = cls(storage, clock)
        if isinstance(storage, SequencedStorage):
            session.last_seq = storage.seq
        for status in _LIVE_STATUSES:
            async for task in scan_all(storage.scan_tasks, TaskQuery(status=status, limit=1000)):
                session._track(task)
        # One read for all of them (a recovering host may have hundreds of live tasks).
        live_conversations = {t.conversation_id for t in session.tasks.values()}
        for conversation in await storage.conversations(sorted(live_conversations)):
            session._cache_conversation(conversation)
        return session

    # ------------------------------------------------------------------ status

    @property
    def closed(self) -> bool:
        return self._sealed

    @property
    def poisoned(self) -> BaseException | None:
        return self._poison

    def check_open(self) -> None:
        if self._poison is not None:
            raise SessionPoisoned(
                "an uncertain storage failure poisoned the session; reopen the storage"
            ) from self._poison
        if self._sealed:
            raise SessionClosed("the session is closed")

    def waiters(self) -> WaiterRegistry[Any, Any]:
        """A new registry of waiting callers, failed by this session if it is poisoned."""
        registry: WaiterRegistry[Any, Any] = WaiterRegistry()
        self._registries.append(registry)
        return registry

    def subscribe(self, listener: Callable[[CommitEvent], None]) -> Callable[[], None]:
        """Call ``listener`` after every successful commit, on the line. Returns an unsubscriber."""
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe

    # ------------------------------------------------------------------ the line

    @overload
    async def commit(self, fn: Callable[[Tx], Awaitable[T]]) -> T: ...

    @overload
    async def commit(self, fn: Callable[[Tx], T]) -> T: ...

    async def commit(self, fn: Callable[[Tx], Any]) -> Any:
        """Run ``fn(tx)`` on the mutation line and commit what it staged.

        Never await a model, tool or network call inside ``fn``: it holds the line.
        """
        self.check_open()
        await self._line.acquire()
        handed_over = False
        try:
            self.check_open()
            tx = Tx(self)
            marker = _IN_COMMIT.set(True)
            try:
                result = fn(tx)
                if inspect.isawaitable(result):
                    result = await result
                if tx.tasks and self.task_layer is not None:
                    await self.task_layer.before_prepare(tx)
                batch = await self._prepare(tx) if not tx.empty else None
            finally:
                _IN_COMMIT.reset(marker)
                tx.settle()
            if batch is None or not batch[0]:
                return result
            handed_over = True  # _land releases the line, even if we are cancelled now
            await land_shielded(self._land(tx, *batch))
            return result
        finally:
            if not handed_over:
                self._line.release()

    async def flush(self) -> None:
        """Make the commits that returned durable (a :class:`DeferringStorage`'s) before
        acting on them elsewhere: a tool that is not ``safe`` (invariant 4). Fails as a
        commit does. Tools started together queue their intents first: one write."""
        self.check_open()
        if not isinstance(storage := self.storage, DeferringStorage) or not storage.pending:
            return
        await asyncio.sleep(0)  # ready tasks run a step: their commits queue first
        async with self._line:
            self.check_open()
            await land_shielded(self._flush(storage))  # as a commit: never cut off midway

    async def _flush(self, storage: DeferringStorage) -> None:
        try:
            await storage.flush()
        except StorageRejected:
            raise
        except BaseException as e:
            raise self._poisoned(e, f"storage flush failed: {e!r}") from e

    def _poisoned(self, error: BaseException, message: str) -> SessionPoisoned:
        self._poison = error
        poisoned = SessionPoisoned(message)
        poisoned.__cause__ = error
        for registry in self._registries:
            registry.fail_all(poisoned)
        return poisoned

    async def _land(
        self, tx: Tx, writes: list[Write], events: list[DocumentEvent], retire_tasks: set[int]
    ) -> None:
        try:
            try:
                seq = await self.storage.commit(writes)
            except StorageRejected:
                raise
            except BaseException as e:
                message = f"storage commit failed with an uncertain outcome: {e!r}"
                raise self._poisoned(e, message) from e
            self._adopt(seq, tx, events, retire_tasks)
            for callback in tx.after_commit:
                try:
                    callback()
                except Exception as e:  # the commit is durable whatever a callback does
                    self.report(e)
        finally:
            self._line.release()

    async def _prepare(self, tx: Tx) -> tuple[list[Write], list[DocumentEvent], set[int]]:
        writes: list[Write] = [*tx.conversations.values(), *tx.entries]
        tasks_at = len(writes)  # where the task records go, once decided (below)
        writes += tx.submissions.values()
        writes += tx.extra_writes
        events: list[DocumentEvent] = []
        retiring: set[int] = set()
        # Task-scoped documents end with their task, in the commit that ends it.
        ended = [t.id for t in tx.tasks.values() if isinstance(t.state, Terminal)]
        for task_id in ended:
            for doc_id in await self._task_documents(task_id):
                retiring.add(doc_id)
        for handle in tx.docs.values():
            if handle.record.scope == "task" and handle.record.owner_id in ended:
                handle.retire()
            change = _document_writes(handle)
            writes += change[0]
            if change[1] is not None:
                events.append(change[1])
            retiring.discard(handle.id)
        for doc_id in sorted(retiring):
            cached = self._docs.get(doc_id)
            writes.append(DocumentRetire(doc_id))
            if cached is not None:
                events.append(
                    DocumentEvent(
                        replace(cached.record, retired_at=0),
                        cached.version,
                        None,
                        None,
                        retired=True,
                    )
                )
        writes[tasks_at:tasks_at] = self._task_writes(tx, bool(writes))
        return writes, events, set(ended)

    def _task_writes(self, tx: Tx, others: bool) -> list[Task]:
        """The task records ``tx`` writes: every staged one but those kept out of storage
        (``Tx.leave_unstored``) — at their creation, and at an end that appends their own
        entry — unless a record this commit stages names one as its owner (then its
        current record is written too). Sets ``tx.unwritten``. ``others``: the commit
        writes something besides tasks; if not, every task is written (a commit is never
        made of left-out records only)."""
        if not (tx.unstored or self.unstored) or not others:
            return list(tx.tasks.values())
        unstored = self.unstored | tx.unstored
        named = _owners_named(tx) & unstored
        ended_by_own_entry = {e.by_task_id for e in tx.entries}
        writes: list[Task] = []
        for task in tx.tasks.values():
            if (
                task.id in unstored
                and task.id not in named
                and (
                    task.id in tx.unstored
                    or (isinstance(task.state, Terminal) and task.id in ended_by_own_entry)
                )
            ):
                tx.unwritten.add(task.id)
                continue
            writes.append(task)
        writes += (self.tasks[i] for i in named if i not in tx.tasks and i in self.tasks)
        return writes

    def _adopt(self, seq: int, tx: Tx, events: list[DocumentEvent], ended_tasks: set[int]) -> None:
        self.last_seq = seq
        for conv in tx.conversations.values():
            self._cache_conversation(conv)
        if tx.unstored or self.unstored:
            # Written or ended tasks leave the set; the ones created and left out join it.
            self.unstored -= tx.tasks.keys() | _owners_named(tx)
            self.unstored.update(
                i for i in tx.unwritten if not isinstance(tx.tasks[i].state, Terminal)
            )
        for task in tx.tasks.values():
            self._track(task)
            if not isinstance(task.state, Terminal) and task.id in tx.minted:
                self._task_docs.setdefault(task.id, set())
        stamped: list[DocumentEvent] = []
        for ev in events:
            rec = ev.record
            if ev.retired:
                rec = replace(rec, retired_at=seq)
                self._docs.pop(rec.id, None)
                self._addresses[(rec.kind, rec.scope, rec.owner_id, rec.key)] = None
                if rec.scope == "task" and rec.owner_id is not None:
                    self._task_docs.get(rec.owner_id, set()).discard(rec.id)
            else:
                if ev.created:
                    rec = replace(rec, created_at=seq)
                    address: DocAddress = (rec.kind, rec.scope, rec.owner_id, rec.key)
                    self._addresses[address] = rec.id
                    self._unborn.pop(address, None)
                    if rec.scope == "task" and rec.owner_id is not None:
                        self._task_docs.setdefault(rec.owner_id, set()).add(rec.id)
                prev = self._docs.get(rec.id)
                deltas = 0 if ev.ops is None else (prev.deltas_since_base + 1 if prev else 1)
                self._docs[rec.id] = DocumentState(rec, ev.version, ev.value, deltas)
            # Only a creation or retirement stamps the record; a change's event is final.
            stamped.append(ev if rec is ev.record else replace(ev, record=rec))
        for task_id in ended_tasks:
            self._task_docs.pop(task_id, None)
        if ended_tasks and self._unborn:  # an ended task's documents are never created
            for address in [a for a in self._unborn if a[1] == "task" and a[2] in ended_tasks]:
                del self._unborn[address]
        event = CommitEvent(
            seq=seq,
            conversations=list(tx.conversations.values()),
            entries=[e.stamped(seq) for e in tx.entries],
            tasks=list(tx.tasks.values()),
            submissions=list(tx.submissions.values()),
            documents=stamped,
        )
        for listener in list(self._listeners):
            try:
                listener(event)
            except Exception as e:  # a failing listener must not undo a durable commit
                self.report(e)

    # ------------------------------------------------------------------ committed reads

    async def conversation(self, conversation_id: int) -> ConversationRecord | None:
        """A conversation record (cached: conversations never change)."""
        cached = self._conversations.get(conversation_id)
        if cached is not None:
            return cached
        self.check_open()
        conv = await self.storage.conversation(conversation_id)
        if conv is not None:
            self._cache_conversation(conv)
        return conv

    def _cache_conversation(self, conv: ConversationRecord) -> None:
        self._conversations[conv.id] = conv
        if conv.owner is not None:
            self._owned_conversations.setdefault(conv.owner.task_id, set()).add(conv.id)

    def _track(self, task: Task) -> None:
        """Put a committed task record into ``tasks`` (a terminal one leaves it) and keep
        the indexes in step. Owner, conversation and background never change."""
        before = self.tasks.get(task.id)
        if before is not None and isinstance(before.state, Waiting):
            for member in before.state.on:
                waiting = self._waiters.get(member)
                if waiting is not None:
                    waiting.discard(task.id)
                    if not waiting:
                        del self._waiters[member]
        if isinstance(task.state, Terminal):
            if before is not None:
                del self.tasks[task.id]
                _unindex(self._by_owner, self._rootless, task)
            return
        self.tasks[task.id] = task
        if before is None:
            if task.owner is not None:
                self._by_owner.setdefault(task.owner, set()).add(task.id)
            else:
                self._rootless.setdefault(task.conversation_id, set()).add(task.id)
        if isinstance(task.state, Waiting):
            for member in task.state.on:
                self._waiters.setdefault(member, set()).add(task.id)

    def owned_by(self, task_id: int) -> set[int]:
        """Ids of the live tasks whose ``owner`` field is ``task_id`` (shared: do not mutate)."""
        return self._by_owner.get(task_id, _NONE)

    def waiting_on(self, task_id: int) -> set[int]:
        """Ids of the live waiting tasks whose ``Waiting.on`` names ``task_id`` (shared)."""
        return self._waiters.get(task_id, _NONE)

    def rootless_owned_by(self, task_id: int) -> Iterable[int]:
        """Ids of the live owner-less tasks in the cached conversations ``task_id`` owns."""
        for conv_id in self._owned_conversations.get(task_id, ()):
            yield from self._rootless.get(conv_id, ())

    def cached_conversation(self, conversation_id: int) -> ConversationRecord | None:
        return self._conversations.get(conversation_id)

    async def task(self, task_id: int) -> Task | None:
        live = self.tasks.get(task_id)
        if live is not None:
            return live
        self.check_open()
        return await self.storage.task(task_id)

    async def current_document(
        self, definition: DocDefinition[Any], owner_id: int | None, key: str | None
    ) -> DocumentState | None:
        """The committed current value of a document (shared: do not mutate)."""
        address: DocAddress = (definition.kind, definition.scope, owner_id, key)
        if address in self._addresses:
            doc_id = self._addresses[address]
            if doc_id is None:
                return None
            cached = self._docs.get(doc_id)
            if cached is not None:
                return cached
        self.check_open()
        record = await self.storage.find_document(definition.kind, definition.scope, owner_id, key)
        if record is None:
            self._addresses[address] = None
            return None
        state = await self.storage.document(record.id)
        if state is None:
            return None
        self._addresses[address] = record.id
        self._docs[record.id] = state
        return state

    async def unborn_document_id(self, address: DocAddress) -> int:
        """The id the document at ``address``, which does not exist, gets when a commit
        creates it: minted on first ask and kept until that creation lands (or its task
        ends). Only on the mutation line."""
        doc_id = self._unborn.get(address)
        if doc_id is None:
            doc_id = self._unborn[address] = await self.storage.mint_id()
        return doc_id

    async def prefetch_docs(self, definition: DocDefinition[Any], ids: Iterable[int]) -> None:
        """Read the committed current values of ``definition``'s (keyless) documents owned
        by ``ids`` into the cache :meth:`current_document` answers from, in one storage
        read (not two per owner). Only on the mutation line (inside a commit's ``fn``),
        where no commit lands between the read and the cache it fills."""
        kind, scope = definition.kind, definition.scope
        missing = {o for o in ids if (kind, scope, o, None) not in self._addresses}
        if not missing:
            return
        self.check_open()
        for state in await self.storage.current_documents(kind, scope, sorted(missing)):
            rec = state.record
            self._addresses[(kind, scope, rec.owner_id, None)] = rec.id
            self._docs[rec.id] = state
            missing.discard(cast(int, rec.owner_id))
        for owner_id in missing:
            self._addresses[(kind, scope, owner_id, None)] = None

    async def document_value(
        self, definition: DocDefinition[Any], owner_id: int | None = None, key: str | None = None
    ) -> JsonValue:
        """A detached copy of a document's committed value (migrated in memory if the
        stored version is older), or its initial value if it does not exist. Never writes."""
        state = await self.current_document(definition, owner_id, key)
        if state is None:
            return json_copy(definition.initial())
        return definition.upgrade(json_copy(state.value), state.version)

    async def document_at(
        self,
        definition: DocDefinition[Any],
        owner_id: int | None = None,
        key: str | None = None,
        at: int | None = None,
    ) -> JsonValue:
        """A document's value as of commit ``at`` (``None``: now), migrated in memory;
        ``None`` if no incarnation was alive then. Historical reads need a rewindable
        document (storage refuses the others)."""
        self.check_open()
        record = await self.storage.find_document(
            definition.kind, definition.scope, owner_id, key, at
        )
        if record is None:
            return None
        state = await self.storage.document(record.id, at)
        if state is None:
            return None
        return definition.upgrade(json_copy(state.value), state.version)

    async def _task_documents(self, task_id: int) -> set[int]:
        known = self._task_docs.get(task_id)
        if known is not None:
            return set(known)
        found = {
            r.id
            async for r in scan_all(
                self.storage.scan_documents, DocumentQuery("task", owner_id=task_id, limit=500)
            )
        }
        for doc_id in found:
            if doc_id not in self._docs:
                state = await self.storage.document(doc_id)
                if state is not None:
                    self._docs[doc_id] = state
        return found

    # ------------------------------------------------------------------ close

    async def close(self) -> None:
        """Seal, wait for the commit on the line to land, and close the storage."""
        if self._closed:
            return
        self._sealed = True
        async with self._line:
            self._closed = True
        await self.storage.close()


def _document_writes(handle: DocHandle) -> tuple[list[Write], DocumentEvent | None]:
    """The writes (and event) one document handle stages, or nothing if unchanged."""
    defn = handle.definition
    rec = handle.record
    writes: list[Write] = []
    where = f"document {defn.kind!r}"
    base = handle.created or handle.stored_version != defn.version
    value = defn.validate(json_copy(handle.value, where))
    if handle.created and _initial_and_latest(defn, value, where):
        # Not created: every reader of a missing document gets its initial value, so
        # storing that value adds rows and nothing a reader can see (a conversation's
        # inbox is opened by every admission and stays empty in most of them).
        return writes, None
    ops = [] if base else diff(handle.original, value)
    if handle.created:
        writes.append(
            DocumentCreate(
                rec.id, rec.kind, rec.scope, rec.owner_id, rec.key, rec.history, defn.version, value
            )
        )
        event: DocumentEvent | None = DocumentEvent(rec, defn.version, value, None, created=True)
    elif handle.stored_version != defn.version:
        writes.append(DocumentChange(rec.id, defn.version, value=value))
        event = DocumentEvent(rec, defn.version, value, None)
    elif not ops:
        event = None
    elif defn.checkpoint_when(value, ops, handle.deltas_since_base):
        writes.append(DocumentChange(rec.id, defn.version, value=value))
        event = DocumentEvent(rec, defn.version, value, None)
    else:
        writes.append(DocumentChange(rec.id, defn.version, ops=ops))
        event = DocumentEvent(rec, defn.version, value, ops)
    if handle.retired:
        writes.append(DocumentRetire(rec.id))
        event = DocumentEvent(rec, defn.version, None, None, created=False, retired=True)
    return writes, event


def _initial_and_latest(defn: DocDefinition[Any], value: JsonValue, where: str) -> bool:
    """Whether a document this commit would create may be left uncreated: ``value`` is
    its definition's initial value and it keeps no history (a ``rewindable`` one is
    created as before: a read as of an earlier commit tells "no incarnation yet" from
    "initial", and so does an ``as_of`` fork)."""
    if defn.history != "latest" or value != defn.initial():
        return False  # ``!=`` first: in C, and most creations differ (json_equal would not)
    # Equal as Python values: equal as JSON too (``==`` takes ``1`` for ``True``)?
    return json_equal(value, defn.validate(json_copy(defn.initial(), where)))


_NONE: set[int] = set()  # the empty answer of the index reads; never mutated


def _owners_named(tx: Tx) -> set[int]:
    """The tasks that records ``tx`` stages name as their owner (a task, a conversation,
    a task-scoped document): an owner's row must exist for them."""
    named = {t.owner for t in tx.tasks.values() if t.owner is not None}
    named.update(c.owner.task_id for c in tx.conversations.values() if c.owner is not None)
    named.update(
        h.record.owner_id
        for h in tx.docs.values()
        if h.record.scope == "task" and h.record.owner_id is not None
    )
    return named


def _unindex(by_owner: dict[int, set[int]], rootless: dict[int, set[int]], task: Task) -> None:
    if task.owner is not None:
        index, key = by_owner, task.owner
    else:
        index, key = rootless, task.conversation_id
    ids = index.get(key)
    if ids is not None:
        ids.discard(task.id)
        if not ids:
            del index[key]


def _report(error: BaseException) -> None:
    # Default reporter: surface the error on the loop's exception handler instead of
    # swallowing it. Hosts replace Session.report with their logger.
    loop = asyncio.get_running_loop()
    loop.call_exception_handler({"message": "perdure: reported error", "exception": error})
