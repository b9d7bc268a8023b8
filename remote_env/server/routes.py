"""HTTP routes under ``/v1`` (thin: authenticate, validate, delegate to the op manager)."""

from __future__ import annotations

from collections.abc import AsyncIterable
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Header, Path, Query, Request, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.sse import EventSourceResponse, ServerSentEvent

from remote_env import __version__
from remote_env.json_body import UniqueKeysRoute
from remote_env.protocol import (
    OP_ID_REGEX,
    PROTOCOL_VERSION,
    CancelRequest,
    ErrorResponse,
    HealthResponse,
    InfoResponse,
    OpRecord,
    OpRequest,
)
from remote_env.server.auth import workspace_from_request
from remote_env.server.errors import Rejected
from remote_env.server.service import SandboxService

__all__ = ["router"]

# UniqueKeysRoute: an op whose JSON names a key twice is refused 422, naming the key.
router = APIRouter(prefix="/v1", route_class=UniqueKeysRoute)

_ERROR_STATUSES = {
    400: "request body that cannot be parsed (nested too deeply for the JSON parser, ...)",
    401: "missing, malformed, forged or expired token",
    403: "path outside the workspace",
    404: "unknown op (or another workspace's)",
    413: "request body too large",
    422: "invalid request, or an op id already used for a different request (op_conflict)",
}
_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorResponse, "description": description}
    for status, description in _ERROR_STATUSES.items()
}
# A streaming route's refusals are plain JSON: FastAPI would document them under the
# route's own media type (text/event-stream), so they name their content themselves.
_STREAM_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorResponse"}}},
    }
    for status, description in _ERROR_STATUSES.items()
    if status not in (400, 403, 413)  # the stream takes no body and names no path
}


def _service(request: Request) -> SandboxService:
    service: SandboxService = request.app.state.service
    return service


Service = Annotated[SandboxService, Depends(_service)]


# Declares the bearer scheme in the schema (so clients and fuzzers know every route but
# /v1/health needs it); the token itself is checked by ``workspace_from_request``.
_BEARER = HTTPBearer(
    auto_error=False,
    scheme_name="workspace_token",
    description="a workspace token minted with the server's secret (`perdure sandbox token`)",
)


def _workspace(
    request: Request,
    service: Service,
    _declared: Annotated[HTTPAuthorizationCredentials | None, Depends(_BEARER)],
) -> str:
    return workspace_from_request(request, service.settings.secret)


Workspace = Annotated[str, Depends(_workspace)]
OpId = Annotated[str, Path(pattern=OP_ID_REGEX)]


def _not_found(op_id: str) -> Rejected:
    return Rejected(404, "op_not_found", f"no op {op_id} in this workspace")


@router.get("/health")
async def health() -> HealthResponse:
    """Liveness (no authentication)."""
    return HealthResponse()


@router.get("/info", responses=_ERRORS)
async def info(workspace: Workspace, service: Service) -> InfoResponse:
    """The caller's workspace and the server's limits."""
    settings = service.settings
    with service.workspaces.open(workspace) as conf:
        home = conf.root_path
    return InfoResponse(
        protocol=PROTOCOL_VERSION,
        version=__version__,
        workspace=workspace,
        home=home,
        limits={
            "default_timeout_ms": int(settings.default_timeout_s * 1000),
            "max_timeout_ms": int(settings.max_timeout_s * 1000),
            "max_output_bytes": settings.max_output_bytes,
            "max_body_bytes": settings.max_body_bytes,
            "max_wait_ms": int(settings.max_wait_s * 1000),
            "openat2": service.workspaces.use_openat2,
            "max_processes": settings.max_processes,
            "max_memory_bytes": settings.max_memory_bytes,
            "max_cpu_seconds": settings.max_cpu_seconds,
        },
    )


@router.post(
    "/ops",
    responses={**_ERRORS, 202: {"model": OpRecord, "description": "accepted, still running"}},
)
async def submit_op(
    body: Annotated[OpRequest, Body()],
    response: Response,
    workspace: Workspace,
    service: Service,
) -> OpRecord:
    """Run an op, or join the op already recorded under the same id.

    ``200`` with the final record, or ``202`` when it is still running after ``wait_ms``.
    """
    record = await service.ops.submit(workspace, body)
    response.status_code = 200 if record.finished else 202
    return record


@router.get("/ops/{op_id}", responses={**_ERRORS, 202: {"model": OpRecord}})
async def get_op(
    op_id: OpId,
    response: Response,
    workspace: Workspace,
    service: Service,
    wait: Annotated[float | None, Query(ge=0, description="long-poll, seconds")] = None,
    wait_ms: Annotated[int | None, Query(ge=0, description="long-poll, milliseconds")] = None,
) -> OpRecord:
    """The op's record; waits up to ``wait`` seconds (or ``wait_ms``) for it to finish."""
    seconds = wait if wait is not None else (wait_ms or 0) / 1000
    record = await service.ops.get(workspace, op_id, wait_s=seconds)
    if record is None:
        raise _not_found(op_id)
    response.status_code = 200 if record.finished else 202
    return record


async def _existing_op(op_id: OpId, workspace: Workspace, service: Service) -> str:
    # A dependency, so an unknown op is a 404 before the event stream starts.
    if not await service.ops.exists(workspace, op_id):
        raise _not_found(op_id)
    return op_id


def _resume_offset(
    offset: Annotated[int | None, Query(ge=0, description="resume from this byte")] = None,
    # Not ``str | None``: a header is absent or a string, never JSON null.
    last_event_id: Annotated[
        str,
        Header(pattern=r"^[0-9]{1,19}$", description="resume after this event (a byte offset)"),
    ] = "",
) -> int:
    # A dependency, so a bad offset is a JSON 422 before the event stream starts. (The
    # default "" stands for "absent"; a header sent empty fails the pattern.)
    if offset is not None:
        return offset
    return int(last_event_id) if last_event_id else 0


@router.get("/ops/{op_id}/events", response_class=EventSourceResponse, responses=_STREAM_ERRORS)
async def op_events(
    op_id: Annotated[str, Depends(_existing_op)],
    start: Annotated[int, Depends(_resume_offset)],
    workspace: Workspace,
    service: Service,
) -> AsyncIterable[ServerSentEvent]:
    """Server-sent events: ``output`` chunks (``id`` = byte offset after the chunk), then
    ``result`` with the final record. Resume with ``Last-Event-ID`` or ``?offset=``
    (``offset`` wins when both are sent)."""
    async for item in service.ops.events(workspace, op_id, start):
        yield ServerSentEvent(event=item.event, id=item.id, data=item.data)


@router.post("/ops/{op_id}/cancel", responses=_ERRORS)
async def cancel_op(
    op_id: OpId,
    response: Response,
    workspace: Workspace,
    service: Service,
    body: Annotated[CancelRequest | None, Body()] = None,
) -> OpRecord:
    """Kill a running command's process group (idempotent)."""
    mode = body.mode if body is not None else "abort"
    record = await service.ops.cancel(workspace, op_id, mode)
    if record is None:
        raise _not_found(op_id)
    response.status_code = 200 if record.finished else 202
    return record
