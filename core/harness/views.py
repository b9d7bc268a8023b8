"""Views: what a reader sees of the committed state, once or as a watch.

:class:`Views` builds the committed view of a conversation, the live task graph and a
document's value, and keeps the mounts (:mod:`core.harness.watch`) that turn every
later commit into delta frames for their watches. One mount per watched thing, shared
by all its watches, mounted on the mutation line so no commit lands between a view and
its first delta. The harness owns one ``Views``, hands it each commit
(:meth:`Views.on_commit`) and ends its watches when it closes; it is reached here as
:class:`ViewOwner`, so this module does not import :mod:`~core.harness.harness`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from core.clock import Clock
from core.errors import UnknownRecord
from core.harness.builtin_documents import BUILTIN_DOCUMENTS
from core.harness.context import ContextView
from core.harness.settings import HarnessSettings
from core.harness.task_graph import live_task_graph
from core.harness.usage_ledger import present
from core.harness.watch import (
    ConversationMount,
    DocumentMount,
    Mount,
    TaskGraphMount,
    Watch,
    document_name,
)
from core.jsonvalue import JsonObject, json_copy
from core.session.documents import DocDefinition
from core.session.session import CommitEvent, Session
from core.session.transaction import Tx
from core.storage.paging import scan_all
from core.storage.port import DocumentQuery

__all__ = ["ViewOwner", "Views"]


class ViewOwner(Protocol):
    """What the views read of the harness (the :class:`~core.harness.harness.Harness`,
    which satisfies it)."""

    @property
    def session(self) -> Session:
        """The open session: records, documents and the mutation line."""
        ...

    @property
    def clock(self) -> Clock:
        """The session's clock (mounts pace their wakes by it)."""
        ...

    @property
    def settings(self) -> HarnessSettings:
        """Limits and policies (``progress.watch_wake_ms`` paces the mounts)."""
        ...

    async def context(self, conversation_id: int, cutoff: int | None = None) -> ContextView:
        """The derived context of the conversation (its active entries). Reads only."""
        ...


class Views:
    """The views of one harness and the mounts its watches read from."""

    def __init__(self, owner: ViewOwner) -> None:
        self._owner = owner
        self.mounts: dict[tuple[object, ...], Mount] = {}
        """What is mounted, by what it watches; a mount drops itself when its last
        watch stops."""

    async def view(self, conversation_id: int) -> JsonObject:
        """The committed view of a conversation: its record, its active entries and its
        current documents, with every built-in one (at its initial value when it does
        not exist) and the usage ledger as the ``usage`` document (see
        :mod:`core.harness.usage_ledger`). :class:`UnknownRecord` for an unknown
        conversation."""
        session = self._owner.session
        conv = await session.conversation(conversation_id)
        if conv is None:
            raise UnknownRecord(f"Unknown conversation {conversation_id}")
        ctx = await self._owner.context(conversation_id)
        storage = session.storage
        docs: JsonObject = {}
        async for record in scan_all(
            storage.scan_documents,
            DocumentQuery("conversation", owner_id=conversation_id, limit=500),
        ):
            state = await storage.document(record.id)
            if state is not None:
                docs[document_name(record.kind, record.key)] = state.value
        for kind, definition in BUILTIN_DOCUMENTS.items():
            # A built-in document is created only once it leaves its initial value (an
            # inbox nothing was ever queued in is never stored): the view reads a
            # missing one as that value, as every reader does.
            if kind not in docs:
                docs[kind] = json_copy(definition.initial())
        present(docs)  # the usage ledger, kept in live, as the usage document it was
        return {
            "conversation": conv.to_json(),
            "entries": [e.to_json() for e in ctx.entries],
            "docs": docs,
        }

    async def watch(self, conversation_id: int) -> Watch:
        """The view, then one delta frame per commit (see :mod:`core.harness.watch`)."""

        async def build() -> Mount:
            value = await self.view(conversation_id)
            return ConversationMount(conversation_id, value, self._unmount(key))

        key: tuple[object, ...] = ("conversation", conversation_id)
        return (await self._mount(key, build)).watch()

    def task_graph(self) -> JsonObject:
        """Every live task with its state and owner edges, keyed by id."""
        return live_task_graph(self._owner.session.tasks.values())

    async def watch_task_graph(self) -> Watch:
        """The task graph, then its changes (a task leaves it when it ends)."""
        key: tuple[object, ...] = ("graph",)

        async def build() -> Mount:
            return TaskGraphMount(self.task_graph(), self._unmount(key))

        return (await self._mount(key, build)).watch()

    async def watch_document(
        self, definition: DocDefinition[Any], owner_id: int | None = None, key: str | None = None
    ) -> Watch:
        """``{"value": ...}`` of one document, then its changes; ends ``retired`` with it.
        A ``latest`` document not created yet (one is stored once it leaves its initial
        value) is watched from its initial value, under the id its creation will take;
        :class:`UnknownRecord` for a missing ``rewindable`` one."""
        session = self._owner.session
        state = await session.current_document(definition, owner_id, key)
        if state is not None:
            doc_id = state.record.id
        else:

            async def unborn(tx: Tx) -> int:
                # Opened and left at its initial value: nothing is written, and the id
                # stays the one a later creation takes (Session.unborn_document_id).
                handle = await tx.doc(definition, owner_id, key)
                if definition.history != "latest":  # opening would create it: not here
                    raise UnknownRecord(f"no current {definition.kind!r} document there")
                return handle.id

            doc_id = await session.commit(unborn)
        mount_key: tuple[object, ...] = ("document", doc_id)

        async def build() -> Mount:
            current = await session.storage.document(doc_id)
            value = current.value if current is not None else None
            if current is None and state is None:
                value = json_copy(definition.initial())
            return DocumentMount(doc_id, {"value": value}, self._unmount(mount_key))

        return (await self._mount(mount_key, build)).watch()

    def on_commit(self, event: CommitEvent) -> None:
        """Hand a commit to every mount (each emits its watches' delta frame)."""
        for mount in list(self.mounts.values()):
            mount.seq = event.seq
            mount.on_commit(event)

    def close(self) -> None:
        """End every watch ``closed`` and drop the mounts."""
        for mount in list(self.mounts.values()):
            mount.end_all("closed")
        self.mounts.clear()

    async def _mount(self, key: tuple[object, ...], build: Callable[[], Awaitable[Mount]]) -> Mount:
        existing = self.mounts.get(key)
        if existing is not None:
            return existing
        owner = self._owner

        async def attach(tx: Tx) -> Mount:
            # Built on the mutation line, so no commit can land between the view and the
            # mount that follows it.
            found = self.mounts.get(key)
            if found is None:
                found = await build()
                found.seq = owner.session.last_seq  # built on the line: no commit since
                found.pace_wakes(owner.clock, owner.settings.progress.watch_wake_ms)
                self.mounts[key] = found
            return found

        return await owner.session.commit(attach)

    def _unmount(self, key: tuple[object, ...]) -> Callable[[Mount], None]:
        def drop(mount: Mount) -> None:
            if self.mounts.get(key) is mount:
                del self.mounts[key]

        return drop
