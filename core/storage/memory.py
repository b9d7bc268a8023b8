"""MemoryStorage: the reference Storage adapter, held in process memory.

Records are kept as JSON text, so every read decodes a fresh, detached copy and every
commit proves its values survive a JSON round-trip, exactly like the SQL adapters.
A :class:`MemoryState` outlives the storage objects opened on it, which lets tests
"reopen" memory storage the way they reopen a file.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from core.errors import StorageClosed, StorageRejected
from core.jsonvalue import JsonObject, loads
from core.readonly import readonly
from core.records import (
    MAX_ID,
    ConversationRecord,
    DocumentRecord,
    DocumentScope,
    DocumentState,
    Entry,
    SubmissionRecord,
    SubmissionStatus,
    Task,
    TaskStatus,
    conversation_from_json,
    entry_from_json,
    submission_from_json,
    task_from_json,
)
from core.storage.batch import CommitPlan, plan_commit
from core.storage.port import (
    ConversationQuery,
    Cursor,
    DocumentQuery,
    EntryQuery,
    Page,
    SubmissionQuery,
    TaskQuery,
    Write,
)
from core.storage.reads import StoredRevision, fold_revisions, fork_chain, historical_read_allowed
from core.storage.scan import ScanPosition, min_cap, next_cursor, start_scan

__all__ = ["MemoryState", "MemoryStorage"]

T = TypeVar("T")


@readonly
class _TaskIndex:
    conversation_id: int
    kind: str
    status: TaskStatus
    abort_requested: bool
    background: bool


@dataclass
class MemoryState:
    """Everything a MemoryStorage holds; survives close so it can be opened again."""

    next_id: int = 2
    next_seq: int = 1
    owners: dict[int, str] = field(default_factory=dict)
    conversations: dict[int, str] = field(default_factory=dict)
    conversation_owners: dict[int, tuple[int | None, int | None]] = field(default_factory=dict)
    entries: dict[int, str] = field(default_factory=dict)
    entries_by_conversation: dict[int, list[int]] = field(default_factory=dict)
    heads_by_conversation: dict[int, list[int]] = field(default_factory=dict)
    tasks: dict[int, str] = field(default_factory=dict)
    task_index: dict[int, _TaskIndex] = field(default_factory=dict)
    submissions: dict[int, str] = field(default_factory=dict)
    submission_index: dict[int, tuple[int, SubmissionStatus]] = field(default_factory=dict)
    requests: dict[tuple[int, str], int] = field(default_factory=dict)
    documents: dict[int, DocumentRecord] = field(default_factory=dict)
    document_versions: dict[int, int] = field(default_factory=dict)
    revisions: dict[int, list[StoredRevision]] = field(default_factory=dict)


class MemoryStorage:
    """Reference :class:`~core.storage.port.Storage` kept in memory."""

    def __init__(self, state: MemoryState | None = None) -> None:
        self.state = state if state is not None else MemoryState()
        self._closed = False

    @property
    def seq(self) -> int:
        """The seq of the newest commit (0 when there is none)."""
        return self.state.next_seq - 1

    # ------------------------------------------------------------------ ids and commits

    async def mint_id(self) -> int:
        self._check()
        s = self.state
        if s.next_id > MAX_ID:
            raise StorageRejected("ID space is exhausted")
        s.next_id += 1
        return s.next_id - 1

    async def commit(self, writes: Sequence[Write]) -> int:
        self._check()
        s = self.state
        plan = plan_commit(list(writes), _View(s), s.next_seq, s.next_id)
        self._apply(plan)
        return plan.seq

    def _apply(self, plan: CommitPlan) -> None:
        s = self.state
        s.owners.update(plan.new_ids)
        for conv, text in plan.conversations:
            s.conversations[conv.id] = text
            s.conversation_owners[conv.id] = (
                conv.owner.conversation_id if conv.owner else None,
                conv.owner.task_id if conv.owner else None,
            )
        for entry, text in plan.entries:
            s.entries[entry.id] = text
            bisect.insort(s.entries_by_conversation.setdefault(entry.conversation_id, []), entry.id)
            if entry.head is not None:
                bisect.insort(
                    s.heads_by_conversation.setdefault(entry.conversation_id, []), entry.id
                )
        for task, text in plan.tasks.values():
            s.tasks[task.id] = text
            s.task_index[task.id] = _TaskIndex(
                task.conversation_id, task.kind, task.status, task.abort_requested, task.background
            )
        for sub, text in plan.submissions.values():
            s.submissions[sub.id] = text
            s.submission_index[sub.id] = (sub.conversation_id, sub.status)
            if sub.request_id is not None:
                s.requests[(sub.conversation_id, sub.request_id)] = sub.id
        for rec in plan.created_documents:
            s.documents[rec.id] = rec
            s.revisions[rec.id] = []
        for rev in plan.revisions:
            s.revisions[rev.document_id].append(
                StoredRevision(rev.seq, rev.base, rev.version, rev.content)
            )
        s.document_versions.update(plan.versions)
        for doc_id in plan.rebased_latest:
            s.revisions[doc_id] = s.revisions[doc_id][-1:]
        for rec in plan.retired:
            s.documents[rec.id] = rec
            s.document_versions.pop(rec.id, None)
            if rec.history == "latest":
                s.revisions[rec.id] = []
        s.next_id = plan.next_id
        s.next_seq = plan.seq + 1

    # ------------------------------------------------------------------ point reads

    async def conversation(self, conversation_id: int) -> ConversationRecord | None:
        self._check()
        return self._conversation(conversation_id)

    async def conversations(self, conversation_ids: Sequence[int]) -> list[ConversationRecord]:
        self._check()
        found = (self._conversation(c) for c in sorted(set(conversation_ids)))
        return [c for c in found if c is not None]

    def _conversation(self, conversation_id: int) -> ConversationRecord | None:
        text = self.state.conversations.get(conversation_id)
        return conversation_from_json(loads(text)) if text is not None else None

    async def entry(self, entry_id: int) -> Entry | None:
        self._check()
        text = self.state.entries.get(entry_id)
        return entry_from_json(loads(text)) if text is not None else None

    async def visible_entry(self, conversation_id: int, entry_id: int) -> Entry | None:
        self._check()
        text = self.state.entries.get(entry_id)
        if text is None:
            fork_chain(conversation_id, self._conversation)  # unknown conversation raises
            return None
        entry = entry_from_json(loads(text))
        for cid, cap in fork_chain(conversation_id, self._conversation):
            if cid == entry.conversation_id:
                return entry if cap is None or entry.id <= cap else None
        return None

    async def latest_head(
        self, conversation_id: int, at_or_before: int | None = None
    ) -> Entry | None:
        self._check()
        best: int | None = None
        for cid, cap in fork_chain(conversation_id, self._conversation):
            bound = min_cap(cap, at_or_before)
            heads = self.state.heads_by_conversation.get(cid, [])
            i = len(heads) if bound is None else bisect.bisect_right(heads, bound)
            if i and (best is None or heads[i - 1] > best):
                best = heads[i - 1]
        return entry_from_json(loads(self.state.entries[best])) if best is not None else None

    async def task(self, task_id: int) -> Task | None:
        self._check()
        text = self.state.tasks.get(task_id)
        return task_from_json(loads(text)) if text is not None else None

    async def submission(self, submission_id: int) -> SubmissionRecord | None:
        self._check()
        text = self.state.submissions.get(submission_id)
        return submission_from_json(loads(text)) if text is not None else None

    async def submission_by_request(
        self, conversation_id: int, request_id: str
    ) -> SubmissionRecord | None:
        self._check()
        sid = self.state.requests.get((conversation_id, request_id))
        return submission_from_json(loads(self.state.submissions[sid])) if sid is not None else None

    async def document(self, document_id: int, at: int | None = None) -> DocumentState | None:
        self._check()
        return _View(self.state).document_state(document_id, at)

    async def find_document(
        self,
        kind: str,
        scope: DocumentScope,
        owner_id: int | None = None,
        key: str | None = None,
        at: int | None = None,
    ) -> DocumentRecord | None:
        self._check()
        for rec in self.state.documents.values():
            if (rec.kind, rec.scope, rec.owner_id, rec.key) == (kind, scope, owner_id, key) and (
                rec.retired_at is None if at is None else rec.alive_at(at)
            ):
                return rec
        return None

    async def current_documents(
        self, kind: str, scope: DocumentScope, owner_ids: Sequence[int], key: str | None = None
    ) -> list[DocumentState]:
        self._check()
        owners = set(owner_ids)
        found = sorted(
            (rec.owner_id, rec.id)
            for rec in self.state.documents.values()
            if rec.kind == kind
            and rec.scope == scope
            and rec.key == key
            and rec.owner_id in owners
            and rec.retired_at is None
        )
        view = _View(self.state)
        states = (view.document_state(doc_id, None) for _, doc_id in found)
        return [state for state in states if state is not None]

    # ------------------------------------------------------------------ scans

    async def scan_conversations(
        self, query: ConversationQuery, cursor: Cursor | None = None
    ) -> Page[ConversationRecord]:
        self._check()
        filters = query.filters()
        pos = start_scan("conversations", filters, query.order, "asc", query.limit, cursor)
        owners = self.state.conversation_owners
        by_conversation, by_task = query.owner_conversation_id, query.owner_task_id

        def keep(i: int) -> bool:
            oc, ot = owners[i]
            return (by_conversation is None or oc == by_conversation) and (
                by_task is None or ot == by_task
            )

        def load(i: int) -> ConversationRecord:
            return conversation_from_json(loads(self.state.conversations[i]))

        return _page(
            "conversations",
            filters,
            pos,
            filter(keep, self.state.conversations),
            load,
        )

    async def scan_entries(self, query: EntryQuery, cursor: Cursor | None = None) -> Page[Entry]:
        self._check()
        filters = query.filters()
        pos = start_scan("entries", filters, query.order, "desc", query.limit, cursor)
        min_id, max_id = query.min_id, query.max_id
        ids: list[int] = []
        for cid, cap in fork_chain(query.conversation_id, self._conversation):
            bound = min_cap(cap, max_id)
            ids.extend(
                i
                for i in self.state.entries_by_conversation.get(cid, [])
                if (bound is None or i <= bound) and (min_id is None or i >= min_id)
            )

        def load(i: int) -> Entry:
            return entry_from_json(loads(self.state.entries[i]))

        return _page("entries", filters, pos, ids, load)

    async def scan_tasks(self, query: TaskQuery, cursor: Cursor | None = None) -> Page[Task]:
        self._check()
        filters = query.filters()
        pos = start_scan("tasks", filters, query.order, "asc", query.limit, cursor)
        idx = self.state.task_index
        q = query

        def keep(i: int) -> bool:
            t = idx[i]
            return (
                (q.conversation_id is None or t.conversation_id == q.conversation_id)
                and (q.kind is None or t.kind == q.kind)
                and (q.status is None or t.status == q.status)
                and (q.abort_requested is None or t.abort_requested == q.abort_requested)
                and (q.background is None or t.background == q.background)
            )

        def load(i: int) -> Task:
            return task_from_json(loads(self.state.tasks[i]))

        return _page("tasks", filters, pos, filter(keep, idx), load)

    async def scan_submissions(
        self, query: SubmissionQuery, cursor: Cursor | None = None
    ) -> Page[SubmissionRecord]:
        self._check()
        filters = query.filters()
        pos = start_scan("submissions", filters, query.order, "asc", query.limit, cursor)
        idx = self.state.submission_index
        conversation_id, status = query.conversation_id, query.status

        def keep(i: int) -> bool:
            c, st = idx[i]
            return (conversation_id is None or c == conversation_id) and (
                status is None or st == status
            )

        def load(i: int) -> SubmissionRecord:
            return submission_from_json(loads(self.state.submissions[i]))

        return _page("submissions", filters, pos, filter(keep, idx), load)

    async def scan_documents(
        self, query: DocumentQuery, cursor: Cursor | None = None
    ) -> Page[DocumentRecord]:
        self._check()
        filters = query.filters()
        pos = start_scan("documents", filters, "asc", "asc", query.limit, cursor)
        docs = self.state.documents
        q = query

        def keep(i: int) -> bool:
            r = docs[i]
            return (
                r.scope == q.scope
                and r.owner_id == q.owner_id
                and (q.kind is None or r.kind == q.kind)
                and (r.retired_at is None if q.at is None else r.alive_at(q.at))
            )

        return _page("documents", filters, pos, filter(keep, docs), docs.__getitem__)

    async def close(self) -> None:
        self._closed = True

    def _check(self) -> None:
        if self._closed:
            raise StorageClosed("storage is closed")


class _View:
    """The planner's view of a MemoryState."""

    def __init__(self, state: MemoryState) -> None:
        self.s = state

    def id_owner(self, record_id: int) -> str | None:
        return self.s.owners.get(record_id)

    def submission_for_request(self, conversation_id: int, request_id: str) -> int | None:
        return self.s.requests.get((conversation_id, request_id))

    def document_record(self, document_id: int) -> DocumentRecord | None:
        return self.s.documents.get(document_id)

    def document_version(self, document_id: int) -> int | None:
        return self.s.document_versions.get(document_id)

    def current_document(
        self, kind: str, scope: str, owner_id: int | None, key: str | None
    ) -> int | None:
        for rec in self.s.documents.values():
            if rec.retired_at is None and (rec.kind, rec.scope, rec.owner_id, rec.key) == (
                kind,
                scope,
                owner_id,
                key,
            ):
                return rec.id
        return None

    def document_state(self, document_id: int, at: int | None) -> DocumentState | None:
        rec = self.s.documents.get(document_id)
        if rec is None:
            return None
        historical_read_allowed(rec, at)
        if not (rec.retired_at is None if at is None else rec.alive_at(at)):
            return None
        revs = self.s.revisions[document_id]
        if at is not None:
            revs = [r for r in revs if r.seq <= at]
        start = max((i for i, r in enumerate(revs) if r.base), default=0)
        return fold_revisions(rec, revs[start:])


def _page(
    scan: str,
    filters: JsonObject,
    pos: ScanPosition,
    ids: Iterable[int],
    load: Callable[[int], T],
) -> Page[T]:
    picked = sorted((i for i in ids if pos.admits(i)), reverse=pos.order == "desc")
    items = [load(i) for i in picked[: pos.limit]]
    more = len(picked) > pos.limit
    return Page(items, next_cursor(scan, filters, pos, picked[pos.limit - 1]) if more else None)


if TYPE_CHECKING:  # mypy proves the adapter satisfies its port
    from core.storage.port import Storage

    def _conforms(adapter: MemoryStorage) -> Storage:
        return adapter
