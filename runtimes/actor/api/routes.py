"""The actor routes (docs/design.md § The HTTP API). Each one decodes the request, calls
the public harness API on the actor's harness, and encodes the result; no task logic
lives here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Path, Query, Request

from core import JsonObject, UnknownRecord
from core.errors import InvalidInput
from core.harness import Conversation, Harness, Submission, agent_change, write_draft
from core.jsonvalue import check_text
from core.records import MAX_ID, ROOT_CONVERSATION_ID, SubmissionRecord
from core.times import iso_time
from remote_env.json_body import UniqueKeysRoute
from runtimes.actor.api.errors import ApiError
from runtimes.actor.api.schemas import (
    AbortBody,
    Aborted,
    AgentChange,
    AgentState,
    Answer,
    CompactBody,
    CompactionStarted,
    ConversationView,
    ForkBody,
    Forked,
    InputSubmission,
    ReminderBody,
    ReminderSet,
    ResetBody,
    SubmissionAccepted,
    SubmissionBody,
    SubmissionState,
    TaskGraph,
    Timer,
    TimerCancelled,
    Timers,
)
from runtimes.actor.api.sse import WatchStream
from runtimes.actor.api.taskgraph import task_graph_of
from runtimes.actor.host import Host, JournalingHost
from runtimes.actor.ids import ACTOR_ID_PATTERN

__all__ = [
    "API_ERRORS",
    "ActorId",
    "ApiSettings",
    "ConversationId",
    "HostDep",
    "router",
]

_SETTLED = ("done", "unanswered")


@dataclass(frozen=True)
class ApiSettings:
    """``max_wait_s`` caps a long poll's ``wait``; ``heartbeat_s``: a watch stream sends a
    ``: ping`` comment after this long without an event; ``streams``: whether the front
    door passes a stream on (see :class:`~runtimes.actor.api.ApiConfig`)."""

    max_wait_s: float = 60.0
    heartbeat_s: float = 15.0
    streams: bool = True


# The dependencies are ``async def`` like the routes: FastAPI runs a plain ``def`` one
# in a worker thread, a thread hop per dependency per request (and Workers have none).
async def _host(request: Request) -> Host:
    host: Host = request.app.state.host
    return host


async def _settings(request: Request) -> ApiSettings:
    settings: ApiSettings = request.app.state.api_settings
    return settings


HostDep = Annotated[Host, Depends(_host)]
SettingsDep = Annotated[ApiSettings, Depends(_settings)]
ActorId = Annotated[
    str,
    Path(
        pattern=ACTOR_ID_PATTERN,
        description="the conversation-tree id of the actor",
        examples=["demo"],
    ),
]
ConversationId = Annotated[int, Path(ge=1, le=MAX_ID, examples=[1])]
SubmissionId = Annotated[int, Path(ge=1, le=MAX_ID)]
TaskId = Annotated[int, Path(ge=1, le=MAX_ID)]

# The error answers every route documents. No ``model: ErrorResponse`` here: FastAPI
# builds a pydantic field per route and status for a response model (9 of each route's
# ~10 fields, built again by every app on its first request: ~0.1 s of a Durable
# Object's first request in Pyodide), and these are only ever documented. The empty
# ``content`` keeps its place in the document; ``complete_openapi`` fills every 4xx/5xx
# answer's content with ``ErrorResponse`` and adds its schema: the same document.
_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"content": {}} for code in (400, 401, 403, 404, 409, 413, 422, 423, 503)
}

# No per-request dependency documents the bearer scheme: the BearerAuth middleware
# enforces it and ``complete_openapi`` documents it (resolving an empty dependency on
# every request cost the loop more than the submission's commit).
# UniqueKeysRoute: a JSON body naming a key twice is refused 422 (the one gate; every
# router of the API uses it).
router = APIRouter(prefix="/v1/actors/{actor}", responses=_ERRORS, route_class=UniqueKeysRoute)


@router.post("/submissions", status_code=202, response_model=SubmissionAccepted)
async def submit(
    actor: ActorId, body: Annotated[SubmissionBody, Body()], host: HostDep
) -> SubmissionAccepted:
    """Submit input (answered later) or a write. ``409 conversation_busy`` when
    ``when_busy`` is ``reject`` and the conversation is busy. A known ``request_id`` with
    the same content answers the original submission (a retry); with other content it is
    refused ``422 request_id_conflict`` and nothing is written."""
    cid = body.conversation_id or ROOT_CONVERSATION_ID
    if not isinstance(body, InputSubmission):
        # Checked before the actor is opened: a refused write creates no actor.
        write_draft(body.content.kind, message=body.content.message_json(), data=body.content.data)
    # While it is accepted the host holds answering work back (acceptance first).
    with host.accepting():
        journaled = _journal(host, actor, cid, body)
        if journaled is not None:
            return journaled
        submission = await _admit(host, actor, cid, body)
    return SubmissionAccepted.of(_committed(submission))


def _journal(host: Host, actor: str, cid: int, body: SubmissionBody) -> SubmissionAccepted | None:
    """A host that journals a new actor's first input (:class:`JournalingHost`) may take
    it here, before the actor's storage is open: answered ``mailed``, moved into the
    actor by the host. Checked first as its admission would check it, so a journaled
    input is never refused later."""
    if (
        cid != ROOT_CONVERSATION_ID
        or not isinstance(body, InputSubmission)
        or not isinstance(host, JournalingHost)
    ):
        return None
    check_text(body.content, "content")
    if body.request_id is not None:  # its length is the schema's
        check_text(body.request_id, "request_id")
    request_id = host.journal_input(
        actor, body.content, request_id=body.request_id, when_busy=body.when_busy
    )
    if request_id is None:
        return None
    return SubmissionAccepted(
        id=None, conversation_id=cid, type="input", status="mailed", request_id=request_id
    )


async def _admit(host: Host, actor: str, cid: int, body: SubmissionBody) -> Submission:
    # Only the root conversation may be created by a submission, so only then may the
    # actor itself be created: a request for an unknown conversation writes nothing. The
    # root is created in the same commit as the submission's admission.
    async with host.use(actor, create=cid == ROOT_CONVERSATION_ID) as harness:
        conversation = await _conversation(harness, cid, host.actor_config.default_agent)
        if isinstance(body, InputSubmission):
            submission = await conversation.submit(
                body.content, request_id=body.request_id, when_busy=body.when_busy
            )
        else:
            submission = await conversation.write(
                body.content.kind,
                message=body.content.message_json(),
                data=body.content.data,
                request_id=body.request_id,
            )
    return submission


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
    async with host.use(actor) as harness:
        submission = await harness.submission(submission_id)
        if submission is None:
            raise ApiError(404, "not_found", f"no submission {submission_id}")
        return await _state(host, submission, min(wait, settings.max_wait_s))


@router.get(
    "/conversations/{conversation_id}/submissions/by-request", response_model=SubmissionState
)
async def submission_by_request(
    actor: ActorId,
    conversation_id: ConversationId,
    request_id: Annotated[
        str,
        Query(min_length=1, max_length=256, description="the request id it was submitted with"),
    ],
    host: HostDep,
    settings: SettingsDep,
    wait: Annotated[float, Query(ge=0, description="long-poll up to this many seconds")] = 0,
) -> SubmissionState:
    """The submission the conversation admitted under ``request_id``, as
    ``GET .../submissions/{id}`` answers it (``wait`` alike). The one way to poll a
    submission whose id the client does not know — on AWS one answered ``mailed``, which
    reads ``{id: null, status: "mailed"}`` here until the actor's holder admits it —
    and the same on every host. ``404 not_found`` when no such submission exists."""
    async with host.use(actor) as harness:
        if (
            conversation_id == ROOT_CONVERSATION_ID
            and isinstance(host, JournalingHost)
            and host.journaled(actor, request_id)
        ):  # accepted, not moved into the actor yet (the move failed, and is retried)
            return SubmissionState(
                id=None,
                conversation_id=conversation_id,
                type="input",
                status="mailed",
                request_id=request_id,
                entry_id=None,
                reason=None,
            )
        conversation = await harness.conversation(conversation_id)
        submission = await conversation.submission_by_request(request_id)
        if submission is None:
            raise ApiError(404, "not_found", f"no submission with request id {request_id!r}")
        return await _state(host, submission, min(wait, settings.max_wait_s))


async def _state(host: Host, submission: Submission, timeout: float) -> SubmissionState:
    record = await submission.status()
    if timeout > 0 and record.status not in _SETTLED:
        # Submission.wait never cancels the work; the host ends the wait early when it
        # shuts down, so a long poll never holds up a graceful exit.
        finished, settled = await host.until_shutdown(_settled_within(submission, timeout))
        record = settled if finished and settled is not None else await submission.status()
    answer = await submission.answer(record)
    return SubmissionState(
        id=record.id,
        conversation_id=record.conversation_id,
        type=record.type,
        status=record.status,
        request_id=record.request_id,
        entry_id=record.entry,
        answer=None if answer is None else Answer(text=answer.text, entry=answer.entry.to_json()),
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
    agent_change(host.registry, {}, fields)  # refused before the actor is opened
    model = fields.get("model")
    if isinstance(model, str) and host.actor_config.models.info(model) is None:
        # Refused now, not later as an unanswered "no_model" inside the conversation.
        raise InvalidInput(f"this host serves no model {model!r}", field="model")
    root = conversation_id == ROOT_CONVERSATION_ID
    async with host.use(actor, create=root) as harness:
        conversation = await _conversation(
            harness, conversation_id, host.actor_config.default_agent
        )
        # A new root is created with the default agent and the change in one commit.
        agent = (
            await conversation.configure(**fields) if fields or root else await conversation.agent()
        )
    return AgentState(conversation_id=conversation_id, agent=dict(agent))


@router.get("/tasks", response_model=TaskGraph)
async def tasks(actor: ActorId, host: HostDep) -> TaskGraph:
    """Every live task: derived state, stored status, owner, abort mark, waits, when it
    started, its phase and attempt, and a tool task's call (name, arguments, replay)."""
    async with host.use(actor) as harness:
        return await task_graph_of(harness)


@router.get("/conversations/{conversation_id}/view", response_model=ConversationView)
async def view(actor: ActorId, conversation_id: ConversationId, host: HostDep) -> ConversationView:
    """The committed view of the conversation: its active entries (from the latest head
    marker on) and its current documents (``agent``, ``live``, ``inbox``, ``usage``)."""
    async with host.use(actor) as harness:
        conversation = await harness.conversation(conversation_id)
        value = await conversation.view()
    return ConversationView.model_validate(value)


@router.get(
    "/conversations/{conversation_id}/watch",
    status_code=200,
    response_class=WatchStream,
    responses={
        200: {"content": {"text/event-stream": {}}, "description": "the event stream"},
        501: {"description": "the host cannot stream (Lambda)", "content": {}},  # see _ERRORS
    },
)
async def watch(
    actor: ActorId, conversation_id: ConversationId, host: HostDep, settings: SettingsDep
) -> WatchStream:
    """Server-Sent Events: the committed view first (``event: view``), then one event per
    commit that changed it (``event: delta``, ``id:`` its commit seq, JSON ops to apply to
    the view), ``: ping`` comments while quiet, and ``event: end`` when the server ends
    the stream (host shutting down, actor closed). A consumer that fell far behind gets
    ``event: replace`` with the newest view.

    Delta ops, applied in order (a path is a list of keys and list indexes):
    ``["s", path, value]`` sets, ``["d", path]`` deletes, ``["p", path, index, count,
    items]`` splices a list, ``["r", value]`` replaces the root, and ``["a", path, text]``
    appends ``text`` to the string at ``path``: a streaming answer (``docs.live.generation
    .partial``) arrives as its new text only, not the whole partial each time.

    Resuming: a client that loses the stream reconnects and receives the current view
    again, then deltas from there (``Last-Event-ID`` is not needed and is ignored). The
    actor stays open while a watch is connected; the watch is stopped as soon as the
    client disconnects.

    ``501 not_supported`` at once on a host whose front door answers whole responses
    only (AWS Lambda), which would otherwise hold the request until its deadline: watch
    with ``GET .../deltas`` (the long poll) there."""
    if not settings.streams:
        raise ApiError(
            501,
            "not_supported",
            "this host answers whole responses only and cannot stream the watch: "
            f"poll GET /v1/actors/{actor}/conversations/{conversation_id}/deltas instead",
        )
    return WatchStream(host, actor, conversation_id, heartbeat_s=settings.heartbeat_s)


@router.post("/conversations/{conversation_id}/abort", response_model=Aborted)
async def abort(
    actor: ActorId,
    conversation_id: ConversationId,
    host: HostDep,
    body: Annotated[AbortBody | None, Body()] = None,
) -> Aborted:
    """Abort the conversation's foreground work (with ``background``: its background
    tasks, reminders included, too) and withdraw its queued input, then wait until it is
    idle. ``aborted``: how many tasks were marked (0 when it was idle)."""
    background = body.background if body is not None else False
    async with host.use(actor) as harness:
        conversation = await harness.conversation(conversation_id)
        finished, count = await host.until_shutdown(conversation.abort(background=background))
    if not finished or count is None:
        # The abort marks are committed and the work stops, but not before shutdown.
        raise ApiError(503, "shutting_down", "the host is shutting down; the abort is recorded")
    return Aborted(aborted=count)


@router.post("/conversations/{conversation_id}/fork", status_code=201, response_model=Forked)
async def fork(
    actor: ActorId, conversation_id: ConversationId, body: ForkBody, host: HostDep
) -> Forked:
    """A new conversation that sees this one's history up to ``at_entry`` (nothing is
    copied) with its documents per their fork policy; ``agent`` changes the child's agent.
    ``404 invalid_entry`` when ``at_entry`` is not visible in this conversation (it
    depends on the conversation's state, which no schema can say)."""
    change = body.agent.model_dump(exclude_unset=True) if body.agent is not None else None
    async with host.use(actor) as harness:
        conversation = await harness.conversation(conversation_id)
        try:
            child = await conversation.fork(body.at_entry, agent=change)
        except UnknownRecord as error:
            raise ApiError(404, "invalid_entry", str(error)) from error
    return Forked(conversation_id=child.id)


@router.post(
    "/conversations/{conversation_id}/compact", status_code=202, response_model=CompactionStarted
)
async def compact(
    actor: ActorId,
    conversation_id: ConversationId,
    host: HostDep,
    body: Annotated[CompactBody | None, Body()] = None,
) -> CompactionStarted:
    """Start a compaction by hand (``instructions``: extra focus for the summary). The
    summary lands at once when idle, else at the end of the current run; a conversation
    too short to compact ends the task ``completed {skipped}``. Follow it with
    ``GET .../tasks`` or the watch (a ``compaction`` entry)."""
    instructions = body.instructions if body is not None else None
    async with host.use(actor) as harness:
        conversation = await harness.conversation(conversation_id)
        task = await conversation.compact(instructions)
    return CompactionStarted(task=task)


@router.post(
    "/conversations/{conversation_id}/reset", status_code=202, response_model=SubmissionAccepted
)
async def reset(
    actor: ActorId,
    conversation_id: ConversationId,
    host: HostDep,
    body: Annotated[ResetBody | None, Body()] = None,
) -> SubmissionAccepted:
    """Start a new context range (nothing is deleted): the model sees only ``handoff`` (if
    given) and what follows. A write submission: ``done`` at once when idle, else
    ``queued`` until the current run ends."""
    handoff = body.handoff if body is not None else None
    request_id = body.request_id if body is not None else None
    async with host.use(actor) as harness:
        conversation = await harness.conversation(conversation_id)
        submission = await conversation.reset(handoff, request_id=request_id)
    return SubmissionAccepted.of(_committed(submission))


@router.post(
    "/conversations/{conversation_id}/reminders", status_code=201, response_model=ReminderSet
)
async def remind(
    actor: ActorId, conversation_id: ConversationId, body: ReminderBody, host: HostDep
) -> ReminderSet:
    """Submit ``message`` to the conversation later: at ``at`` (epoch ms; a past time fires
    at once) or ``after`` seconds, at most a year ahead. A durable background timer: it
    fires once, even across evictions and restarts. ``DELETE /timers/{task}`` cancels it."""
    async with host.use(actor) as harness:
        conversation = await harness.conversation(conversation_id)
        reminder = await conversation.remind(body.message, at=body.at, after=body.after)
    return ReminderSet(task=reminder.task, at=reminder.at, at_iso=iso_time(reminder.at))


@router.get("/timers", response_model=Timers)
async def timers(actor: ActorId, host: HostDep) -> Timers:
    """Live tasks waiting for a time, soonest first: reminders (with their message) and
    the harness's own waits (model retry backoff, deferred polls); and ``next_wake``, when
    the actor next has work (the time the host wakes it at if it is evicted)."""
    async with host.use(actor) as harness:
        pending = harness.timers()
        wake = harness.next_wake()
    return Timers(timers=[Timer.model_validate(t) for t in pending], next_wake=wake)


@router.delete("/timers/{task_id}", response_model=TimerCancelled)
async def cancel_timer(actor: ActorId, task_id: TaskId, host: HostDep) -> TimerCancelled:
    """Cancel a pending reminder by aborting its task. ``404 not_found`` for an unknown
    task, a task that is not a reminder, or a reminder no longer pending; ``409
    already_fired`` if it fired while being cancelled."""
    async with host.use(actor) as harness:
        finished, _ended = await host.until_shutdown(harness.cancel_reminder(task_id))
    if not finished:
        raise ApiError(503, "shutting_down", "the host is shutting down; the abort is recorded")
    return TimerCancelled(task=task_id)


async def _conversation(harness: Harness, cid: int, default_agent: JsonObject) -> Conversation:
    if cid == ROOT_CONVERSATION_ID:
        # Deferred: a new root is created by the request's own admission commit.
        return await harness.root(agent=default_agent, defer=True)
    return await harness.conversation(cid)


def _committed(submission: Submission) -> SubmissionRecord:
    record = submission.record
    assert record is not None  # admissions return the record they committed
    return record


async def _settled_within(submission: Submission, timeout: float) -> SubmissionRecord | None:
    try:
        record: SubmissionRecord = await submission.wait(timeout=timeout)
    except TimeoutError:
        return None
    return record


# Shared with the other route modules (listing, inspector): one definition of the path
# parameters and the error answers.
API_ERRORS = _ERRORS
