"""Listing and history routes: the host's actors, an actor's conversations, and a
conversation's submissions and entries, each one page at a time.

Pages are bounded (``limit``) and continue from the previous page's ``next`` (an opaque
cursor) or, for actors, ``next_after`` (the last id). A listing reads committed records
only; listing the actors opens none of them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request

from core.records import SubmissionStatus
from remote_env.json_body import UniqueKeysRoute
from runtimes.actor.api.pages import (
    MAX_CURSOR_CHARS,
    ActorPage,
    ActorSummary,
    ConversationPage,
    ConversationSummary,
    CursorCodec,
    EntryPage,
    SubmissionPage,
    SubmissionSummary,
)
from runtimes.actor.api.routes import (
    API_ERRORS,
    ActorId,
    ConversationId,
    HostDep,
)
from runtimes.actor.ids import ACTOR_ID_PATTERN

__all__ = ["router"]

MAX_PAGE = 1000

Limit = Annotated[int, Query(ge=1, le=MAX_PAGE, description="at most this many items")]
Cursor = Annotated[
    str | None,
    Query(
        min_length=1,
        max_length=MAX_CURSOR_CHARS,
        pattern=r"^[A-Za-z0-9_-]+$",
        description="the previous page's ``next`` (opaque); omit for the first page",
    ),
]
Order = Annotated[Literal["asc", "desc"], Query(description="by id")]


async def _cursors(request: Request) -> CursorCodec:
    cursors: CursorCodec = request.app.state.cursors
    return cursors


Cursors = Annotated[CursorCodec, Depends(_cursors)]

_UNSUPPORTED: dict[int | str, dict[str, Any]] = {
    501: {"description": "the host keeps no index of its actors", "content": {}}  # _ERRORS
}

# auth and the JSON gate: see routes.router
router = APIRouter(prefix="/v1/actors", responses=API_ERRORS, route_class=UniqueKeysRoute)


@router.get("", response_model=ActorPage, responses=_UNSUPPORTED)
async def list_actors(
    host: HostDep,
    after: Annotated[
        str | None,
        Query(pattern=ACTOR_ID_PATTERN, description="list the actors after this id"),
    ] = None,
    limit: Limit = 100,
) -> ActorPage:
    """The host's actors, ascending by id, without opening any. ``501 not_supported`` on
    a host that keeps no index of its actors (see docs/hosts.md: the Cloudflare Worker and
    the AWS Lambda host)."""
    names = await host.actors(after=after, limit=limit + 1)
    page = names[:limit]
    more = len(names) > limit
    return ActorPage(
        actors=[ActorSummary(id=n) for n in page], next_after=page[-1] if more else None
    )


@router.get("/{actor}/conversations", response_model=ConversationPage)
async def list_conversations(
    actor: ActorId, host: HostDep, cursors: Cursors, limit: Limit = 100, cursor: Cursor = None
) -> ConversationPage:
    """The actor's conversations, ascending by id: the root, forks (``parent``: where
    they branched) and sub-agents (``owner``: the task that runs them)."""
    after = cursors.decode(cursor)  # before the actor is opened
    async with host.use(actor) as harness:
        page = await harness.conversations(limit=limit, cursor=after)
    return ConversationPage(
        conversations=[ConversationSummary.model_validate(c.to_json()) for c in page.items],
        next=cursors.encode(page.next),
    )


@router.get("/{actor}/conversations/{conversation_id}/submissions", response_model=SubmissionPage)
async def list_submissions(
    actor: ActorId,
    conversation_id: ConversationId,
    host: HostDep,
    cursors: Cursors,
    status: Annotated[
        SubmissionStatus | None,
        Query(description="only submissions with this status"),
    ] = None,
    order: Order = "asc",
    limit: Limit = 100,
    cursor: Cursor = None,
) -> SubmissionPage:
    """The conversation's submissions (inputs and writes, reminders' included), oldest
    first by default. Statuses: an input is ``queued`` (waiting for the conversation),
    ``placed`` (its entry is in the transcript, the answer is being made), then ``done``
    (answered) or ``unanswered`` (``reason``: aborted, no model, a model error...); a
    write is ``queued`` until the next boundary, then ``done`` or ``unanswered``."""
    after = cursors.decode(cursor)
    async with host.use(actor) as harness:
        conversation = await harness.conversation(conversation_id)
        page = await conversation.submissions(status=status, order=order, limit=limit, cursor=after)
    return SubmissionPage(
        submissions=[SubmissionSummary.of(s) for s in page.items], next=cursors.encode(page.next)
    )


@router.get("/{actor}/conversations/{conversation_id}/entries", response_model=EntryPage)
async def list_entries(
    actor: ActorId,
    conversation_id: ConversationId,
    host: HostDep,
    cursors: Cursors,
    order: Order = "asc",
    limit: Limit = 100,
    cursor: Cursor = None,
) -> EntryPage:
    """The conversation's whole transcript, oldest first by default: every entry it sees
    through its fork ancestry, also those before the current context range (the view
    has only the active range). Entries keep their roles, tool calls and results."""
    after = cursors.decode(cursor)
    async with host.use(actor) as harness:
        conversation = await harness.conversation(conversation_id)
        page = await conversation.entries(limit=limit, cursor=after, order=order)
    return EntryPage(entries=[e.to_json() for e in page.items], next=cursors.encode(page.next))
