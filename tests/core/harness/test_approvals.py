"""Tool approvals: a call that needs a person's decision parks durably holding nothing,
runs exactly once when approved (across a crash), gives the model the denial and the
note when denied, is denied at its expiry, is withdrawn by an abort, and a decision is
final (docs/design.md invariants 17 and 18)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from core.errors import ApprovalDecided, InvalidInput, RequestIdConflict, TaskNotFound
from core.faux import FauxModel, faux_message, faux_tool_call
from core.harness import ToolContext
from core.harness.builtin_documents import LIVE
from core.harness.events import EVENTS
from core.harness.harness import Harness
from core.records import Waiting
from core.storage import SubmissionQuery
from core.times import iso_time
from tests.core.harness.support import MODEL, Args, Rig, entries, extension, tool
from tests.core.support import settle, until

RAN: list[str] = []


async def wire(args: Args, ctx: ToolContext) -> str:
    RAN.append(args.text)
    return f"wired {args.text}"


def rig_with(tmp_path: Path, backend: Any = "sqlite", **approval: Any) -> Rig:
    RAN.clear()
    rig = Rig(
        tmp_path,
        backend,
        steps=[
            faux_message(faux_tool_call("wire", {"text": "100 EUR"})),
            faux_message("Done."),
        ],
    )
    rig.registry.install(extension("bank", tool("wire", wire, **approval)))
    return rig


async def asked(rig: Rig) -> tuple[Harness, dict[str, Any]]:
    h = await rig.open()
    root = await h.root(agent={"model": MODEL, "tools": ["wire"]})
    await root.submit("send the money")
    await until(lambda: bool(h.approvals()))
    (pending,) = h.approvals()
    return h, pending


async def tool_results(h: Harness) -> list[Any]:
    return [e for e in await entries(h) if e.kind == "tool_result"]


async def answered(h: Harness) -> str | None:
    page = await h.session.storage.scan_submissions(SubmissionQuery(conversation_id=1))
    record = await (await h.submission(page.items[0].id)).wait()  # type: ignore[union-attr]
    answer = await (await h.submission(record.id)).answer(record)  # type: ignore[union-attr]
    return answer.text if answer else None


async def test_a_call_needing_approval_parks_holding_nothing_then_runs_once(
    tmp_path: Path,
) -> None:
    rig = rig_with(tmp_path, approval="always")
    h, pending = await asked(rig)
    start = pending["asked_at"]
    assert pending == {
        "id": pending["id"],
        "conversation_id": 1,
        "tool": "wire",
        "call_id": pending["call_id"],
        "arguments": {"text": "100 EUR"},
        "asked_at": start,
        "asked_at_iso": iso_time(start),
        "expires_at": None,
        "expires_at_iso": None,
    }
    await settle()
    assert RAN == []
    # Invariant 18: no invocation, no deadline: the host may let the actor go.
    assert h.next_wake() is None
    assert [v.state for v in h.inspect().tasks] == ["waiting", "waiting"]
    task = h.session.tasks[pending["id"]]
    assert isinstance(task.state, Waiting) and task.state.until is None
    live = await h.session.document_value(LIVE, 1)
    slot = live["tools"][pending["call_id"]]  # type: ignore[index, call-overload]
    assert slot["status"] == "approval" and slot["approval"]["asked_at"] == start
    await rig.crash(h)

    rig.clock.advance(5 * 3600 * 1000)  # hours pass while nobody runs the actor
    h = await rig.open()
    h.resume()
    assert [a["id"] for a in h.approvals()] == [pending["id"]]
    await settle()
    assert RAN == []
    decided = await h.decide_approval(pending["id"], "approve", request_id="r-1")
    assert decided["decision"] == "approve" and decided["by"] == "person"
    assert await answered(h) == "Done."
    assert RAN == ["100 EUR"]
    (result,) = await tool_results(h)
    assert result.message["content"] == "wired 100 EUR"  # type: ignore[index]
    assert h.approvals() == []
    # The same decision again answers the record and writes nothing; another is refused.
    commits = rig.commits
    again = await h.decide_approval(pending["id"], "approve", request_id="r-1")
    assert again["decided_at"] == decided["decided_at"]
    with pytest.raises(ApprovalDecided):
        await h.decide_approval(pending["id"], "deny")
    with pytest.raises(RequestIdConflict):
        await h.decide_approval(pending["id"], "deny", request_id="r-1")
    assert rig.commits == commits
    assert RAN == ["100 EUR"]
    events = await h.session.document_value(EVENTS, 1)
    states = [e["state"] for e in events["items"] if e["kind"] == "approval"]  # type: ignore[index, call-overload, union-attr]
    assert states == ["pending", "approved"]
    await h.close()


async def test_a_decision_committed_before_a_crash_runs_the_tool_once_after_it(
    tmp_path: Path,
) -> None:
    rig = rig_with(tmp_path, approval="always")
    h, pending = await asked(rig)
    await rig.crash(h)
    h = await rig.open()  # not resumed: the decision commits, nothing runs it yet
    await h.decide_approval(pending["id"], "approve")
    await rig.crash(h)
    assert RAN == []
    h = await rig.open()
    h.resume()
    assert await answered(h) == "Done."
    assert RAN == ["100 EUR"]
    await h.close()


async def test_a_denial_and_its_note_are_the_tool_result(tmp_path: Path) -> None:
    rig = rig_with(tmp_path, "memory", approval="always")
    h, pending = await asked(rig)
    await h.decide_approval(pending["id"], "deny", note="not this month")
    assert await answered(h) == "Done."
    assert RAN == []
    (result,) = await tool_results(h)
    assert result.message["is_error"] is True  # type: ignore[index]
    assert "denied" in result.message["content"]  # type: ignore[index]
    assert "not this month" in result.message["content"]  # type: ignore[index]
    assert result.data["diagnostics"][0]["code"] == "denied"  # type: ignore[index]
    # The model saw the denial as the call's result.
    request = rig.faux.state.requests[-1]
    assert "not this month" in str(request.messages[-1])
    await h.close()


async def test_a_predicate_asks_only_for_the_arguments_it_names(tmp_path: Path) -> None:
    rig = rig_with(tmp_path, "memory", approval=lambda args: "EUR" in args.text)
    rig.faux = FauxModel(
        [faux_message(faux_tool_call("wire", {"text": "5 points"})), faux_message("Small.")]
    )
    h = await rig.open()
    root = await h.root(agent={"model": MODEL, "tools": ["wire"]})
    await (await root.submit("move points")).wait()
    assert RAN == ["5 points"] and h.approvals() == []
    await h.close()
    rig2 = rig_with(tmp_path / "b", "memory", approval=lambda args: "EUR" in args.text)
    h, pending = await asked(rig2)
    assert pending["arguments"] == {"text": "100 EUR"}
    await h.close()


async def test_an_expiring_approval_is_denied_at_its_deadline(tmp_path: Path) -> None:
    rig = rig_with(tmp_path, approval="always", approval_expires_s=3600)
    h, pending = await asked(rig)
    assert pending["expires_at"] == pending["asked_at"] + 3_600_000
    assert h.next_wake() == pending["expires_at"]  # the actor's one wake-up brings it back
    await rig.crash(h)
    rig.clock.advance(3_600_000)
    h = await rig.open()
    h.resume()
    assert await answered(h) == "Done."
    assert RAN == []
    (result,) = await tool_results(h)
    assert "expired" in result.message["content"]  # type: ignore[index]
    with pytest.raises(ApprovalDecided, match="expired"):
        await h.decide_approval(pending["id"], "approve")
    events = await h.session.document_value(EVENTS, 1)
    states = [e["state"] for e in events["items"] if e["kind"] == "approval"]  # type: ignore[index, call-overload, union-attr]
    assert states == ["pending", "expired"]
    await h.close()


async def test_aborting_the_run_withdraws_the_approval(tmp_path: Path) -> None:
    rig = rig_with(tmp_path, "memory", approval="always")
    h, pending = await asked(rig)
    await h.abort_conversation(1)
    assert h.approvals() == []
    (result,) = await tool_results(h)
    assert "withdrawn" in result.message["content"]  # type: ignore[index]
    with pytest.raises(ApprovalDecided, match="withdrawn"):
        await h.decide_approval(pending["id"], "approve")
    assert RAN == []
    await h.close()


async def test_bad_decisions_are_refused_before_anything_is_written(tmp_path: Path) -> None:
    rig = rig_with(tmp_path, "memory", approval="always")
    h, pending = await asked(rig)
    commits = rig.commits
    with pytest.raises(InvalidInput):
        await h.decide_approval(pending["id"], "maybe")
    with pytest.raises(InvalidInput):
        await h.decide_approval(pending["id"], "deny", note="x" * 5000)
    with pytest.raises(TaskNotFound):
        await h.decide_approval(pending["id"] + 1000, "approve")
    assert rig.commits == commits and len(h.approvals()) == 1
    await h.close()


async def test_a_tool_that_never_asks_runs_as_before(tmp_path: Path) -> None:
    rig = rig_with(tmp_path, "memory")
    h = await rig.open()
    root = await h.root(agent={"model": MODEL, "tools": ["wire"]})
    await (await root.submit("send")).wait()
    assert RAN == ["100 EUR"] and h.approvals() == []
    await h.close()
