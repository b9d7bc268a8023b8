"""The client's answer models stay in step with the host's OpenAPI document: the same
fields, no field required that a host may leave out, every status a host can answer."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from core.testing import VirtualClock
from runtimes.actor.api import ApiConfig, create_app
from runtimes.actor.memory import MemoryHost
from runtimes.actor.testing import KIT_TOKEN, kit_config
from runtimes.client import models

# client model -> the host's schema components it stands for
PAIRS: list[tuple[type[BaseModel], tuple[str, ...]]] = [
    (models.Accepted, ("SubmissionAccepted",)),
    (models.SubmissionState, ("SubmissionState",)),
    (models.Answer, ("Answer",)),
    (models.SubmissionSummary, ("SubmissionSummary",)),
    (models.ConversationSummary, ("ConversationSummary",)),
    (models.ConversationView, ("ConversationView",)),
    (models.Frame, ("ViewFrame", "DeltaFrame")),
    (models.Aborted, ("Aborted",)),
    (models.CompactionStarted, ("CompactionStarted",)),
    (models.Forked, ("Forked",)),
    (models.AgentState, ("AgentState",)),
    (models.ReminderSet, ("ReminderSet",)),
    (models.Timer, ("Timer",)),
    (models.Timers, ("Timers",)),
    (models.TimerCancelled, ("TimerCancelled",)),
    (models.MintedToken, ("MintedToken",)),
    (models.PendingApproval, ("PendingApproval",)),
    (models.Approvals, ("Approvals",)),
    (models.ApprovalDecision, ("ApprovalDecision",)),
]


@pytest.fixture(scope="module")
def components() -> dict[str, Any]:
    app = create_app(MemoryHost(kit_config(), clock=VirtualClock()), ApiConfig(KIT_TOKEN))
    schemas: dict[str, Any] = app.openapi()["components"]["schemas"]
    return schemas


def _enum(schema: dict[str, Any]) -> set[Any]:
    """The values a property allows, when it lists them (``enum``/``const``, in unions)."""
    found: set[Any] = set(schema.get("enum", ()))
    if "const" in schema:
        found.add(schema["const"])
    for part in schema.get("anyOf", ()):
        found |= _enum(part)
    return found


@pytest.mark.parametrize(("model", "names"), PAIRS, ids=[m.__name__ for m, _ in PAIRS])
def test_a_client_model_reads_what_the_host_answers(
    model: type[BaseModel], names: tuple[str, ...], components: dict[str, Any]
) -> None:
    mine = model.model_json_schema()["properties"]
    server: dict[str, Any] = {}
    required: set[str] = set()
    for name in names:
        server |= components[name]["properties"]
        required |= set(components[name].get("required", ()))
    extra = {"reason"} if model is models.Frame else set()  # the SSE ``end`` frame's
    assert set(mine) == set(server) | extra, (model.__name__, sorted(mine), sorted(server))
    # A field the host may leave out is optional here too.
    needed = set(model.model_json_schema().get("required", ()))
    assert needed <= required, (model.__name__, needed - required)
    for field, schema in server.items():
        allowed = _enum(schema)
        if allowed:
            assert allowed <= _enum(mine[field]), (model.__name__, field, allowed)
