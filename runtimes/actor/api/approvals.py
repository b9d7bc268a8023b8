"""Approval routes: the tool calls of an actor waiting for a person's decision, and the
decision (docs/design.md § The HTTP API; core/harness/approvals.py does the work).

``GET /approvals`` lists them across the actor's conversations; ``POST /approvals/{id}``
decides one in one commit. A repeated identical decision answers the recorded one; a
different one is ``409 approval_decided`` with nothing written (also after the call
expired or its run was aborted); a request id reused for another decision is ``422
request_id_conflict``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Body, Path
from pydantic import BaseModel, ConfigDict, Field

from core.harness import MAX_APPROVAL_NOTE_CHARS
from core.records import MAX_ID
from remote_env.json_body import UniqueKeysRoute
from runtimes.actor.api.routes import API_ERRORS, ActorId, HostDep

__all__ = ["ApprovalBody", "ApprovalDecision", "Approvals", "PendingApproval", "router"]

ApprovalId = Annotated[int, Path(ge=1, le=MAX_ID, description="the tool call's task id")]


class PendingApproval(BaseModel):
    id: int = Field(description="the tool call's task id: POST /approvals/{id} decides it")
    conversation_id: int
    tool: str
    call_id: str
    arguments: dict[str, object] = Field(description="the validated arguments it would run with")
    asked_at: int = Field(description="epoch ms")
    asked_at_iso: str
    expires_at: int | None = Field(description="when it is denied undecided (epoch ms), or null")
    expires_at_iso: str | None


class Approvals(BaseModel):
    approvals: list[PendingApproval] = Field(description="pending decisions, oldest first")


class ApprovalBody(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    decision: Literal["approve", "deny"]
    note: str | None = Field(
        None,
        max_length=MAX_APPROVAL_NOTE_CHARS,
        description="told to the model with a denial (kept with an approval)",
    )
    request_id: str | None = Field(
        None,
        min_length=1,
        max_length=256,
        description="a retry with the same decision answers the original; another decision "
        "under the same id is refused 422 request_id_conflict",
    )


class ApprovalDecision(BaseModel):
    id: int
    decision: Literal["approve", "deny"]
    by: Literal["person"]
    decided_at: int = Field(description="epoch ms")
    decided_at_iso: str
    note: str | None = None
    request_id: str | None = None
    tool: str
    call_id: str
    asked_at: int
    expires_at: int | None = None


router = APIRouter(prefix="/v1/actors/{actor}", responses=API_ERRORS, route_class=UniqueKeysRoute)


@router.get("/approvals", response_model=Approvals)
async def approvals(actor: ActorId, host: HostDep) -> Approvals:
    """Tool calls waiting for a decision across the actor's conversations: tool,
    arguments, conversation, asked at, expires at."""
    async with host.use(actor) as harness:
        pending = harness.approvals()
    return Approvals(approvals=[PendingApproval.model_validate(p) for p in pending])


@router.post("/approvals/{approval_id}", response_model=ApprovalDecision)
async def decide(
    actor: ActorId,
    approval_id: ApprovalId,
    body: Annotated[ApprovalBody, Body()],
    host: HostDep,
) -> ApprovalDecision:
    """Approve (the tool runs, once) or deny (the model reads the denial and the note).
    ``404 not_found``: no such call asked; ``409 approval_decided``: it was decided
    otherwise, expired or withdrawn (nothing written)."""
    async with host.use(actor) as harness:
        decided = await harness.decide_approval(
            approval_id, body.decision, note=body.note, request_id=body.request_id
        )
    return ApprovalDecision.model_validate(decided)
