"""Forks: a new conversation that sees another's history up to an entry.

A fork copies no entries: the child's ``parent`` link (conversation and entry) makes
the storage show it the parent's history up to that point. Its documents are copied by
each kind's fork policy (see :func:`fork_conversation`). :meth:`Harness.fork
<core.harness.harness.Harness.fork>` hands the child out as a
:class:`~core.harness.conversation.Conversation` handle; the harness is reached here
as :class:`ForkOwner`, so this module does not import :mod:`~core.harness.harness`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from core.errors import UnknownRecord
from core.harness.builtin_documents import AGENT, BUILTIN_DOCUMENTS
from core.harness.events import EVENTS
from core.harness.registry import Registry
from core.harness.tool_sources import TOOL_SOURCES
from core.jsonvalue import JsonObject, JsonValue
from core.records import ConversationParent, DocumentRecord
from core.session.documents import DocDefinition
from core.session.session import Session
from core.session.transaction import Tx
from core.storage.paging import scan_all
from core.storage.port import DocumentCopy, DocumentCreate, DocumentQuery, Storage

__all__ = ["ForkOwner", "document_definition", "fork_conversation"]


class ForkOwner(Protocol):
    """What a fork uses of the harness (the :class:`~core.harness.harness.Harness`,
    which satisfies it)."""

    @property
    def session(self) -> Session:
        """The open session the fork is committed through."""
        ...

    def document_definition(self, kind: str) -> DocDefinition[Any] | None:
        """The definition of a document kind (``None``: nobody registered it). Pure."""
        ...

    def configured_agent(self, current: JsonValue, change: Mapping[str, Any]) -> JsonObject:
        """``current`` with ``change`` applied and validated; pure, writes nothing.
        Raises ``InvalidInput`` for a bad change."""
        ...


def document_definition(registry: Registry, kind: str) -> DocDefinition[Any] | None:
    """A built-in document kind, or one an installed extension registered."""
    if kind == EVENTS.kind:
        return EVENTS
    if kind == TOOL_SOURCES.kind:
        return TOOL_SOURCES
    return BUILTIN_DOCUMENTS.get(kind) or registry.document(kind)


async def fork_conversation(
    owner: ForkOwner,
    conversation_id: int,
    at_entry: int,
    *,
    owner_task_id: int | None = None,
    agent: Mapping[str, Any] | None = None,
) -> int:
    """Create, in one commit, a conversation that sees ``conversation_id``'s history up
    to ``at_entry`` (not copied); returns its id. Documents are copied by their fork
    policy: ``as_of`` — the value when ``at_entry`` was committed; ``current`` — the
    value now; ``initial`` — nothing copied. Kinds nobody registered are not copied.
    ``agent`` changes the child's agent.

    Raises :class:`UnknownRecord` when the entry is not visible in the conversation and
    what :meth:`ForkOwner.configured_agent` raises for a bad ``agent``; both before
    anything is written."""
    session = owner.session
    storage = session.storage
    entry = await storage.visible_entry(conversation_id, at_entry)
    if entry is None or entry.commit_seq is None:
        raise UnknownRecord(f"entry {at_entry} is not visible in conversation {conversation_id}")
    change = dict(agent or {})
    if change:
        owner.configured_agent({}, change)  # refuse a bad change before anything is written

    def policy(kind: str) -> str:
        definition = owner.document_definition(kind)
        return definition.fork if definition is not None else "initial"

    async def create(tx: Tx) -> int:
        child = await tx.create_conversation(
            parent=ConversationParent(conversation_id, at_entry), owner_task_id=owner_task_id
        )
        picks: list[tuple[DocumentRecord, int | None]] = [
            (rec, entry.commit_seq)
            for rec in await _documents(storage, entry.conversation_id, entry.commit_seq)
            if policy(rec.kind) == "as_of"
        ] + [
            (rec, None)
            for rec in await _documents(storage, conversation_id, None)
            if policy(rec.kind) == "current"
        ]
        agent_copied = False
        for rec, at in picks:
            new_id = await tx.mint_id()
            if rec.kind == AGENT.kind and rec.key is None and change:
                state = await storage.document(rec.id, at)
                base = state.value if state is not None else {}
                tx.stage_document_write(
                    DocumentCreate(
                        new_id,
                        rec.kind,
                        "conversation",
                        child.id,
                        None,
                        rec.history,
                        state.version if state is not None else AGENT.version,
                        owner.configured_agent(base, change),
                    )
                )
                agent_copied = True
            else:
                tx.stage_document_write(
                    DocumentCopy(
                        new_id,
                        rec.kind,
                        "conversation",
                        child.id,
                        rec.key,
                        rec.history,
                        rec.id,
                        at,
                    )
                )
        if change and not agent_copied:
            doc = await tx.doc(AGENT, child.id)
            doc.value = owner.configured_agent({}, change)
        return child.id

    return await session.commit(create)


async def _documents(
    storage: Storage, conversation_id: int, at: int | None
) -> list[DocumentRecord]:
    """The conversation's documents (as of commit ``at``, or now)."""
    return [
        record
        async for record in scan_all(
            storage.scan_documents,
            DocumentQuery("conversation", owner_id=conversation_id, at=at, limit=500),
        )
    ]
