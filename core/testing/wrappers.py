"""Storage wrappers for tests: reopen after every commit, inject failures, simulate crashes."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from core.errors import StorageClosed, StorageError, StorageRejected
from core.records import (
    ConversationRecord,
    DocumentRecord,
    DocumentScope,
    DocumentState,
    Entry,
    SubmissionRecord,
    Task,
)
from core.storage.port import (
    ConversationQuery,
    Cursor,
    DeferringStorage,
    DocumentQuery,
    EntryQuery,
    Page,
    Storage,
    SubmissionQuery,
    TaskQuery,
    Write,
)

__all__ = [
    "CommitFault",
    "DelegatingStorage",
    "FaultyStorage",
    "ReopeningStorage",
    "StorageCrashed",
]


class DelegatingStorage:
    """A Storage that forwards every call to ``self.inner``; wrappers override some."""

    inner: Storage

    async def mint_id(self) -> int:
        return await self.inner.mint_id()

    async def commit(self, writes: Sequence[Write]) -> int:
        return await self.inner.commit(writes)

    async def conversation(self, conversation_id: int) -> ConversationRecord | None:
        return await self.inner.conversation(conversation_id)

    async def conversations(self, conversation_ids: Sequence[int]) -> list[ConversationRecord]:
        return await self.inner.conversations(conversation_ids)

    async def entry(self, entry_id: int) -> Entry | None:
        return await self.inner.entry(entry_id)

    async def visible_entry(self, conversation_id: int, entry_id: int) -> Entry | None:
        return await self.inner.visible_entry(conversation_id, entry_id)

    async def latest_head(
        self, conversation_id: int, at_or_before: int | None = None
    ) -> Entry | None:
        return await self.inner.latest_head(conversation_id, at_or_before)

    async def task(self, task_id: int) -> Task | None:
        return await self.inner.task(task_id)

    async def submission(self, submission_id: int) -> SubmissionRecord | None:
        return await self.inner.submission(submission_id)

    async def submission_by_request(
        self, conversation_id: int, request_id: str
    ) -> SubmissionRecord | None:
        return await self.inner.submission_by_request(conversation_id, request_id)

    async def document(self, document_id: int, at: int | None = None) -> DocumentState | None:
        return await self.inner.document(document_id, at)

    async def find_document(
        self,
        kind: str,
        scope: DocumentScope,
        owner_id: int | None = None,
        key: str | None = None,
        at: int | None = None,
    ) -> DocumentRecord | None:
        return await self.inner.find_document(kind, scope, owner_id, key, at)

    async def current_documents(
        self, kind: str, scope: DocumentScope, owner_ids: Sequence[int], key: str | None = None
    ) -> list[DocumentState]:
        return await self.inner.current_documents(kind, scope, owner_ids, key)

    async def scan_conversations(
        self, query: ConversationQuery, cursor: Cursor | None = None
    ) -> Page[ConversationRecord]:
        return await self.inner.scan_conversations(query, cursor)

    async def scan_entries(self, query: EntryQuery, cursor: Cursor | None = None) -> Page[Entry]:
        return await self.inner.scan_entries(query, cursor)

    async def scan_tasks(self, query: TaskQuery, cursor: Cursor | None = None) -> Page[Task]:
        return await self.inner.scan_tasks(query, cursor)

    async def scan_submissions(
        self, query: SubmissionQuery, cursor: Cursor | None = None
    ) -> Page[SubmissionRecord]:
        return await self.inner.scan_submissions(query, cursor)

    async def scan_documents(
        self, query: DocumentQuery, cursor: Cursor | None = None
    ) -> Page[DocumentRecord]:
        return await self.inner.scan_documents(query, cursor)

    @property
    def pending(self) -> int:
        """The inner storage's commits not durable yet (0 unless it defers durability)."""
        return self.inner.pending if isinstance(self.inner, DeferringStorage) else 0

    async def flush(self) -> None:
        if isinstance(self.inner, DeferringStorage):
            await self.inner.flush()

    async def close(self) -> None:
        await self.inner.close()


class ReopeningStorage(DelegatingStorage):
    """Closes the inner storage and opens it again after every successful commit.

    Proves that nothing an adapter keeps in memory is needed for correctness: every
    later read must come from what the commit persisted.
    """

    def __init__(self, inner: Storage, reopen: Callable[[], Awaitable[Storage]]) -> None:
        self.inner = inner
        self._reopen = reopen
        self._closed = False
        self.reopens = 0

    @classmethod
    async def open(cls, opener: Callable[[], Awaitable[Storage]]) -> ReopeningStorage:
        return cls(await opener(), opener)

    async def mint_id(self) -> int:
        self._check()
        return await self.inner.mint_id()

    async def commit(self, writes: Sequence[Write]) -> int:
        self._check()
        seq = await self.inner.commit(writes)
        await self.inner.close()
        self.inner = await self._reopen()
        self.reopens += 1
        return seq

    async def close(self) -> None:
        self._closed = True
        await self.inner.close()

    def _check(self) -> None:
        if self._closed:
            raise StorageClosed("storage is closed")


class StorageCrashed(StorageError):
    """Raised by every call of a :class:`FaultyStorage` after :meth:`FaultyStorage.crash`."""


@dataclass
class CommitFault:
    """Fail the ``nth`` commit (1-based, counted by this wrapper) or the commits ``match``
    selects.

    ``when``: ``"before"`` raises :class:`StorageRejected` and writes nothing;
    ``"during"`` raises an uncertain error and writes nothing; ``"after"`` lets the
    commit land, then raises an uncertain error (the caller cannot tell it landed).
    ``times`` limits how often the fault fires (``None``: every time it matches).
    """

    when: Literal["before", "during", "after"]
    nth: int | None = None
    match: Callable[[Sequence[Write]], bool] | None = None
    times: int | None = 1
    error: Callable[[], Exception] | None = None

    def matches(self, n: int, writes: Sequence[Write]) -> bool:
        if self.times is not None and self.times <= 0:
            return False
        if self.nth is not None and self.nth != n:
            return False
        return self.match is None or self.match(writes)


class FaultyStorage(DelegatingStorage):
    """Wraps a Storage to fail chosen commits, hold commits, or crash.

    ``hold_commits()`` makes every later commit wait (before reaching the inner
    storage) until ``release_commits()``; ``crash()`` makes every later call raise
    :class:`StorageCrashed`, which is how tests stand in for a dead process whose
    storage is then reopened from the same underlying state.
    """

    def __init__(self, inner: Storage, faults: Sequence[CommitFault] = ()) -> None:
        self.inner = inner
        self.faults = list(faults)
        self.commits = 0
        self.committed: list[list[Write]] = []
        self._crashed = False
        self._gate: asyncio.Event | None = None

    def add(self, fault: CommitFault) -> None:
        self.faults.append(fault)

    def crash(self) -> None:
        self._crashed = True

    def hold_commits(self) -> None:
        self._gate = asyncio.Event()

    def release_commits(self) -> None:
        if self._gate is not None:
            self._gate.set()
            self._gate = None

    async def mint_id(self) -> int:
        self._alive()
        return await self.inner.mint_id()

    async def commit(self, writes: Sequence[Write]) -> int:
        self._alive()
        batch = list(writes)
        self.commits += 1
        n = self.commits
        if self._gate is not None:
            await self._gate.wait()
            self._alive()
        fault = next((f for f in self.faults if f.matches(n, batch)), None)
        if fault is not None and fault.times is not None:
            fault.times -= 1
        if fault is not None and fault.when == "before":
            raise (
                fault.error()
                if fault.error
                else StorageRejected(f"injected rejection of commit {n}")
            )
        if fault is not None and fault.when == "during":
            raise fault.error() if fault.error else OSError(f"injected failure during commit {n}")
        seq = await self.inner.commit(batch)
        self.committed.append(batch)
        if fault is not None:
            raise fault.error() if fault.error else OSError(f"injected failure after commit {n}")
        return seq

    async def close(self) -> None:
        await self.inner.close()

    def __getattribute__(self, name: str) -> Any:
        # After crash() every public Storage call fails, reads included.
        if (
            not name.startswith("_")
            and name in _STORAGE_CALLS
            and object.__getattribute__(self, "_crashed")
        ):
            raise StorageCrashed("storage crashed")
        return object.__getattribute__(self, name)

    def _alive(self) -> None:
        if self._crashed:
            raise StorageCrashed("storage crashed")


_STORAGE_CALLS = frozenset(
    name
    for name in vars(DelegatingStorage)
    # close() still works after a crash: it stands in for the OS releasing the file.
    if not name.startswith("_") and name not in ("inner", "close")
)

if TYPE_CHECKING:  # mypy proves the adapter satisfies its port

    def _conforms(adapter: DelegatingStorage) -> Storage:
        return adapter
