"""The actor routes (SPEC §10). Each one decodes the request, calls the public harness
API on the actor's harness, and encodes the result; no task logic lives here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Path, Query, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from core.errors import UnknownRecord
from core.harness import AssistantMessage, Conversation, Harness, Submission
from core.harness.messages import assistant_text, message_from_json
from core.jsonvalue import JsonObject
from core.records import MAX_ID, ROOT_CONVERSATION_ID
from core.records import Submission as SubmissionRecord
from runtimes.local.api.errors import ApiError, refused_input
from runtimes.local.api.schemas import (
    AgentChange,
    AgentState,
    Answer,
    ErrorResponse,
    InputSubmission,
    SubmissionAccepted,
    SubmissionBody,
    SubmissionState,
    TaskGraph,
)
from runtimes.local.api.taskgraph import task_graph
from runtimes.local.host import ACTOR_ID_PATTERN, ActorHost

__all__ = ["ApiSettings", "router"]

_SETTLED = ("done", "unanswered")


@dataclass(frozen=True)
class ApiSettings:
    """``max_wait_s`` caps a long poll's ``wait``."""

    max_wait_s: float = 60.0


# Documents the scheme in OpenAPI; the BearerAuth middleware enforces it (see there why).
_bearer = HTTPBearer(auto_error=False, description="the host's API token")


def _documented_auth(_: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> None:
    return None


def _host(request: Request) -> ActorHost:
    host: ActorHost = request.app.state.host
    return host


def _settings(request: Request) -> ApiSettings:
    settings: ApiSettings = request.app.state.api_settings
    return settings


HostDep = Annotated[ActorHost, Depends(_host)]
SettingsDep = Annotated[ApiSettings, Depends(_settings)]
ActorId = Annotated[
    str, Path(pattern=ACTOR_ID_PATTERN, description="the conversation-tree id of the actor")
]
ConversationId = Annotated[int, Path(ge=1, le=MAX_ID)]
SubmissionId = Annotated[int, Path(ge=1, le=MAX_ID)]

_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorResponse} for code in (400, 401, 404, 409, 413, 422, 423, 503)
}

router = APIRouter(
    prefix="/v1/actors/{actor}", dependencies=[Depends(_documented_auth)], responses=_ERRORS
)


@router.post("/submissions", status_code=202, response_model=SubmissionAccepted)
async def submit(
    actor: ActorId, body: Annotated[SubmissionBody, Body()], host: HostDep
) -> SubmissionAccepted:
    """Submit input (answered later) or a write. ``409 conversation_busy`` when
    ``when_busy`` is ``reject`` and the conversation is busy; a known ``request_id``
    answers the original submission."""
    cid = body.conversation_id or ROOT_CONVERSATION_ID
    # Only the root conversation may be created by a submission, so only then may the
    # actor itself be created: a request for an unknown conversation writes nothing.
    async with host.use(actor, create=cid == ROOT_CONVERSATION_ID) as harness:
        conversation = await _conversation(harness, cid, host.config.default_agent)
        with refused_input():
            if isinstance(body, InputSubmission):
                submission = await conversation.submit(
                    body.content, request_id=body.request_id, when_busy=body.when_busy
                )
            else:
                submission = await conversation.write(
                    body.content.kind,
                    message=body.content.message,
                    data=body.content.data,
                    request_id=body.request_id,
                )
        record = await submission.status()
    return SubmissionAccepted.of(record)


@router.get("/submissions/{submission_id}", response_model=SubmissionState)
async def submission_state(
    actor: ActorId,
    submission_id: SubmissionId,
    host: HostDep,
    settings: SettingsDep,
    wait: Annotated[float, Query(ge=0, description="long-poll up to this many seconds")] = 0,
) -> SubmissionState:
    """The submission's status; once settled, its answer (text and entry) or the reason
    it went unanswered. With ``wait``, holds the request until the submission settles or
    the time (capped by the host) is up, then answers the status at that moment."""
    timeout = min(wait, settings.max_wait_s)
    async with host.use(actor) as harness:
        submission = await harness.submission(submission_id)
        if submission is None:
            raise ApiError(404, "not_found", f"no submission {submission_id}")
        record = await submission.status()
        if timeout > 0 and record.status not in _SETTLED:
            # Submission.wait never cancels the work; the host ends the wait early when
            # it shuts down, so a long poll never holds up a graceful exit.
            finished, settled = await host.until_shutdown(_settled_within(submission, timeout))
            record = settled if finished and settled is not None else await submission.status()
        answer = await _answer(harness, record)
    return SubmissionState(
        id=record.id,
        conversation_id=record.conversation_id,
        type=record.type,
        status=record.status,
        request_id=record.request_id,
        entry_id=record.entry,
        answer=answer,
        reason=record.reason,
        detail=record.detail,
    )


@router.patch("/conversations/{conversation_id}/agent", response_model=AgentState)
async def configure_agent(
    actor: ActorId, conversation_id: ConversationId, change: AgentChange, host: HostDep
) -> AgentState:
    """Change the conversation's agent (model, thinking, tools, extensions, instructions,
    cwd) in one commit; ``null`` clears a field. The root conversation of a new actor is
    created with the host's default agent and the change, in one commit."""
    fields = change.model_dump(exclude_unset=True)
    root = conversation_id == ROOT_CONVERSATION_ID
    async with host.use(actor, create=root) as harness:
        with refused_input():
            try:
                conversation = await harness.conversation(conversation_id)
            except UnknownRecord:
                if not root:
                    raise
                conversation = await harness.root(agent={**host.config.default_agent, **fields})
                agent = await conversation.agent()
            else:
                agent = (
                    await conversation.configure(**fields) if fields else await conversation.agent()
                )
    return AgentState(conversation_id=conversation_id, agent=dict(agent))


@router.get("/tasks", response_model=TaskGraph)
async def tasks(actor: ActorId, host: HostDep) -> TaskGraph:
    """Every live task: derived state, stored status, owner, abort mark, waits."""
    async with host.use(actor) as harness:
        return task_graph(harness.inspect())


# Not here yet, each waiting for its core API (the routes go here, same shape as above):
#   GET  /conversations/{cid}/view     Conversation.view()
#   GET  /conversations/{cid}/watch    Conversation.watch() as SSE
#   POST /conversations/{cid}/abort    Conversation.abort(background=...)
#   POST /conversations/{cid}/fork     Conversation.fork(at_entry, ...)
#   POST /conversations/{cid}/compact  Conversation.compact(instructions)
#   GET  /timers                       reminders and ActorHost.wakes


async def _conversation(harness: Harness, cid: int, default_agent: JsonObject) -> Conversation:
    if cid == ROOT_CONVERSATION_ID:
        return await harness.root(agent=default_agent)  # writes only if it is new
    return await harness.conversation(cid)


async def _settled_within(submission: Submission, timeout: float) -> SubmissionRecord | None:
    try:
        record: SubmissionRecord = await submission.wait(timeout=timeout)
    except TimeoutError:
        return None
    return record


async def _answer(harness: Harness, record: SubmissionRecord) -> Answer | None:
    if record.answer is None:
        return None
    entry = await harness.session.storage.entry(record.answer)
    if entry is None:
        return None
    text = ""
    if entry.message is not None:
        message = message_from_json(entry.message)
        text = assistant_text(message) if isinstance(message, AssistantMessage) else ""
    return Answer(text=text, entry=entry.to_json())
