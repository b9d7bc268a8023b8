"""Tool sources: tools an extension lists from somewhere else (an MCP server), kept in a
conversation document so that resolving an agent never does I/O.

A :class:`~core.harness.registry.ToolSource` is installed with its extension
(``define_extension(sources=)``). Its *listing* — whatever JSON the source needs to
build its tools: names, schemas, replay policies, when it was fetched — lives under the
source's name in the conversation's ``tool_sources`` document. Every resolution of the
agent builds the source's tools from that committed listing (``ToolSource.tools``,
pure), so a recovered run, a tool call after a restart and the model request all see the
tools the conversation last listed, without reaching the source. Before each model
request the generation asks every source of the agent whether its listing is due
(``ToolSource.due``: never listed, too old, or marked changed) and, if it is, fetches a
new one outside any commit and commits it (:func:`refresh_listings`).

A tool's result can mark its source's listing changed (:func:`mark_changed`, from
``ToolResult.apply``), so the next request lists again: how an MCP server's
``notifications/tools/list_changed`` reaches the conversation.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from core.jsonvalue import JsonObject, JsonValue
from core.session.documents import DocDefinition, define_doc
from core.session.transaction import Tx

if TYPE_CHECKING:
    from core.harness.registry import ResolvedAgent
    from core.harness.services import HarnessServices
    from core.records import Task
    from core.tasks.runtime import TaskRuntime

__all__ = ["TOOL_SOURCES", "listing_of", "mark_changed", "refresh_listings"]

TOOL_SOURCES: DocDefinition[Any] = define_doc(
    "tool_sources", scope="conversation", fork="current", initial=lambda: {}
)
"""``{source name: listing}`` of one conversation; a fork starts with its parent's."""


def listing_of(listings: JsonValue, name: str) -> JsonValue:
    """The listing of source ``name`` in a ``tool_sources`` value (``None`` if absent)."""
    return listings.get(name) if isinstance(listings, dict) else None


async def refresh_listings(h: HarnessServices, rt: TaskRuntime, agent: ResolvedAgent) -> bool:
    """Fetch every listing of ``agent``'s sources that is due and commit the new ones
    in one commit (no task state changes). Returns whether anything was committed."""
    conv = rt.conversation_id
    listings = await h.session.document_value(TOOL_SOURCES, conv)
    now = rt.now()
    fresh: JsonObject = {}
    for source in agent.sources:
        current = listing_of(listings, source.name)
        if not source.due(current, now):
            continue
        try:
            fresh[source.name] = await source.fetch(current, now)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # an unreachable source keeps its last listing
            h.report(e)
    if not fresh:
        return False

    async def store(tx: Tx, current: Task) -> None:
        doc = await tx.doc(TOOL_SOURCES, conv)
        value = dict(doc.value) if isinstance(doc.value, dict) else {}
        value.update(fresh)
        doc.value = value

    await rt.commit(store)
    return True


async def mark_changed(tx: Tx, conversation_id: int, name: str) -> None:
    """Inside a commit: mark source ``name``'s listing changed, so it is fetched again
    before the next model request (see ``ToolSource.due``)."""
    doc = await tx.doc(TOOL_SOURCES, conversation_id)
    value = doc.value if isinstance(doc.value, dict) else {}
    listing = value.get(name)
    if isinstance(listing, dict):
        doc.value = {**value, name: {**listing, "changed": True}}
