"""A typed async client of the actor HTTP API, the same against every host (local, the
Cloudflare Worker, AWS Lambda). See docs/guide.md § A client for any host.

    async with ActorClient("http://127.0.0.1:8787", token) as client:
        state = await client.ask("demo", "hello")
        print(state.answer.text if state.answer else state.reason)
"""

from __future__ import annotations

from runtimes.client.asgi import StreamingASGITransport
from runtimes.client.client import ActorClient
from runtimes.client.errors import (
    ApiError,
    ClientError,
    HostUnreachable,
    RequestRefused,
    ServerError,
)
from runtimes.client.models import (
    Aborted,
    Accepted,
    AgentState,
    Answer,
    ApprovalDecision,
    Approvals,
    CompactionStarted,
    ConversationSummary,
    ConversationView,
    Forked,
    Frame,
    MintedToken,
    PendingApproval,
    ReminderSet,
    SubmissionState,
    SubmissionSummary,
    Timer,
    TimerCancelled,
    Timers,
)
from runtimes.client.watch import Watch

__all__ = [
    "Aborted",
    "Accepted",
    "ActorClient",
    "AgentState",
    "Answer",
    "ApiError",
    "ApprovalDecision",
    "Approvals",
    "ClientError",
    "CompactionStarted",
    "ConversationSummary",
    "ConversationView",
    "Forked",
    "Frame",
    "HostUnreachable",
    "MintedToken",
    "PendingApproval",
    "ReminderSet",
    "RequestRefused",
    "ServerError",
    "StreamingASGITransport",
    "SubmissionState",
    "SubmissionSummary",
    "Timer",
    "TimerCancelled",
    "Timers",
    "Watch",
]
