"""Tool approvals: a call that waits for a person's decision, durably, holding nothing.

A tool declares its need with ``define_tool(approval=...)``: ``never`` (the default),
``always``, or a predicate over the call's validated arguments. A call that needs a
decision commits, after its ``before_tool`` hooks and before any intent, the checkpoint
``{phase: "approval", arguments, approval: {tool, call_id, asked_at, expires_at?}}``
and *parks* (:func:`parked`): a ``waiting`` state that no scheduler decision ends by
itself. Without an expiry the task waits on itself (never ready, no deadline: no
invocation, no alarm heartbeat, an idle host may let the actor go); with one it waits
until ``expires_at`` (the actor's one wake-up brings it back then).

A decision (:func:`decide`, ``POST /v1/actors/{a}/approvals/{id}``) is one commit that
records ``decision`` in the checkpoint and makes the task ready (waiting on nothing):
the ``approval`` phase then runs the tool (approve: its intent is committed first, so
its replay policy applies from there on) or gives the model the denial and the note as
the call's result. The expiry runs the same phase with no decision recorded and denies.
An abort of the run withdraws the approval (the tool task's abort handler). The
approval record (with its decision) stays in the checkpoint and ends in the task's
outcome, so a repeated decision is answered from it: the same one again is idempotent,
another one is :class:`~core.errors.ApprovalDecided` and writes nothing
(docs/design.md invariant 17).

The ``live`` document's tool slot shows ``status: "approval"`` with the record while it
waits, and the ``events`` document gets an ``approval`` event when one appears
(``state: pending``) and when it settles (``approved``, ``denied``, ``expired``,
``withdrawn``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Literal, cast

from core.errors import ApprovalDecided, InvalidInput, RequestIdConflict, TaskNotFound
from core.harness.builtin_documents import LIVE
from core.harness.events import note_event
from core.harness.runs import TOOL
from core.jsonvalue import JsonObject, JsonValue
from core.records import Task, Waiting
from core.session.transaction import Tx
from core.times import iso_time

if TYPE_CHECKING:
    from core.harness.registry import ToolDefinition
    from core.harness.services import HarnessServices

__all__ = [
    "APPROVAL_PHASE",
    "MAX_APPROVAL_NOTE_CHARS",
    "Decision",
    "decide",
    "denial",
    "needs_approval",
    "note_approval",
    "park",
    "parked",
    "pending_approvals",
    "show",
]

APPROVAL_PHASE = "approval"
MAX_APPROVAL_NOTE_CHARS = 4000
Decision = Literal["approve", "deny"]


def needs_approval(
    tool: ToolDefinition, args: object, report: Callable[[BaseException], None]
) -> bool:
    """Whether this call waits for a decision. A predicate that raises asks: a call is
    never run unchecked because its check failed."""
    rule = tool.approval
    if rule == "never":
        return False
    if rule == "always":
        return True
    try:
        return bool(rule(args))
    except Exception as e:
        report(e)
        return True


def parked(task_id: int, checkpoint: JsonObject, expires_at: int | None) -> Waiting:
    """The waiting state of a call pending approval: until its expiry, or (none) on
    itself, which no scheduler decision ends: only a decision's commit does."""
    if expires_at is not None:
        return Waiting(checkpoint, (), "all_settled", expires_at)
    return Waiting(checkpoint, (task_id,), "all_settled", None)


async def park(
    tx: Tx, task: Task, tool: ToolDefinition, call_id: str, arguments: JsonObject
) -> None:
    """Stage the call's question (inside its task's commit): the approval checkpoint in
    its parked state, the ``live`` slot and the ``pending`` event."""
    now = tx.now()
    approval: JsonObject = {"tool": tool.name, "call_id": call_id, "asked_at": now}
    expires_at = None
    if tool.approval_expires_s is not None:
        expires_at = now + round(tool.approval_expires_s * 1000)
        approval["expires_at"] = expires_at
    checkpoint: JsonObject = {"phase": APPROVAL_PHASE, "arguments": arguments, "approval": approval}
    # Staged directly: a task parked on itself is past the runtime's wait checks, which
    # refuse it as a deadlock; here only a decision's commit ends it.
    await tx.put_task(task.evolve(state=parked(task.id, checkpoint, expires_at)))
    await show(tx, task, approval)
    await note_approval(tx, task, approval, "pending")


def denial(tool: str, approval: JsonObject) -> str:
    """What the model reads for a denied (or expired) call."""
    text = f"The call to {tool} was denied"
    if approval.get("by") == "expiry":
        text += " (nobody decided before its approval expired)"
    note = approval.get("note")
    if isinstance(note, str) and note:
        text += f". Note from the person asked: {note}"
    return text


def _record(task: Task) -> JsonObject | None:
    """The approval record of a live tool task's checkpoint, or of a settled one's
    outcome (``None``: the call never needed one)."""
    value: JsonValue = None
    if task.checkpoint is not None:
        value = task.checkpoint.get("approval")
    elif task.outcome is not None:
        result = getattr(task.outcome, "result", None)
        value = result.get("approval") if isinstance(result, dict) else None
    return value if isinstance(value, dict) else None


def pending_approvals(tasks: Iterable[Task]) -> list[JsonObject]:
    """The calls waiting for a decision, oldest first: ``{id, conversation_id, tool,
    call_id, arguments, asked_at(_iso), expires_at(_iso)}`` (``id`` is the tool task's)."""
    out: list[JsonObject] = []
    for task in tasks:
        if task.kind != TOOL or task.abort_requested or not isinstance(task.state, Waiting):
            continue
        cp = task.state.checkpoint
        approval = _record(task)
        if cp.get("phase") != APPROVAL_PHASE or approval is None or "decision" in approval:
            continue
        asked = cast(int, approval.get("asked_at"))
        expires = approval.get("expires_at")
        out.append(
            {
                "id": task.id,
                "conversation_id": task.conversation_id,
                "tool": approval.get("tool"),
                "call_id": approval.get("call_id"),
                "arguments": cp.get("arguments"),
                "asked_at": asked,
                "asked_at_iso": iso_time(asked),
                "expires_at": expires,
                "expires_at_iso": iso_time(expires) if isinstance(expires, int) else None,
            }
        )
    out.sort(key=lambda a: (cast(int, a["asked_at"]), cast(int, a["id"])))
    return out


def _check(decision: object, note: object, request_id: object) -> None:
    if decision not in ("approve", "deny"):
        raise InvalidInput("decision is 'approve' or 'deny'", field="decision")
    if note is not None and (not isinstance(note, str) or len(note) > MAX_APPROVAL_NOTE_CHARS):
        raise InvalidInput(
            f"note is text of at most {MAX_APPROVAL_NOTE_CHARS} characters", field="note"
        )
    if request_id is not None and (not isinstance(request_id, str) or not request_id):
        raise InvalidInput("request_id is a non-empty string", field="request_id")


def _answer(
    task_id: int, recorded: JsonObject, decision: str, note: str | None, request_id: str | None
) -> JsonObject:
    """A decision on an already decided call: the same again answers the record; any
    other is refused (``request_id_conflict`` when it reuses the first one's key)."""
    same = (
        recorded.get("by") == "person"
        and recorded.get("decision") == decision
        and recorded.get("note") == note
    )
    if same:
        return {"id": task_id, **recorded}
    if request_id is not None and recorded.get("request_id") == request_id:
        raise RequestIdConflict(f"request id {request_id!r} decided approval {task_id} otherwise")
    how = recorded.get("decision")
    if recorded.get("by") == "expiry":
        raise ApprovalDecided(f"approval {task_id} expired (denied) before this decision")
    if how == "withdrawn":
        raise ApprovalDecided(f"approval {task_id} was withdrawn: its run was aborted")
    raise ApprovalDecided(f"approval {task_id} was already decided: {how}")


async def decide(
    h: HarnessServices,
    task_id: int,
    decision: str,
    *,
    note: str | None = None,
    request_id: str | None = None,
) -> JsonObject:
    """Decide the call ``task_id`` pending approval, in one commit; returns the decision
    record ``{id, decision, by, decided_at(_iso), note?, request_id?, ...}``.

    :class:`TaskNotFound` if no such call ever asked; a call already decided answers its
    record when the decision is the same, else raises :class:`ApprovalDecided` (or
    ``RequestIdConflict``) and writes nothing; ``InvalidInput`` for a bad decision."""
    _check(decision, note, request_id)

    async def body(tx: Tx) -> JsonObject:
        task = tx.staged_task(task_id)
        if task is None:  # settled (or unknown): its outcome holds the decision
            stored = await tx.task(task_id)
            recorded = _record(stored) if stored is not None and stored.kind == TOOL else None
            if recorded is None:
                raise TaskNotFound(f"no approval {task_id}")
            return _answer(task_id, recorded, decision, note, request_id)
        approval = _record(task) if task.kind == TOOL else None
        if approval is None:
            raise TaskNotFound(f"no approval {task_id}")
        if "decision" in approval:
            return _answer(task_id, approval, decision, note, request_id)
        if task.abort_requested:
            raise ApprovalDecided(f"approval {task_id} is being withdrawn: its run is aborting")
        if not isinstance(task.state, Waiting):  # its expiry is running it now
            raise ApprovalDecided(f"approval {task_id} expired (denied) before this decision")
        now = tx.now()
        decided: JsonObject = {
            **approval,
            "decision": decision,
            "by": "person",
            "decided_at": now,
            "decided_at_iso": iso_time(now),
        }
        if note is not None:
            decided["note"] = note
        if request_id is not None:
            decided["request_id"] = request_id
        checkpoint = {**task.state.checkpoint, "approval": decided}
        # Waiting on nothing: ready at once, so the ``approval`` phase runs the decision.
        await tx.put_task(task.evolve(state=Waiting(checkpoint, (), "all_settled", None)))
        await show(tx, task, decided)
        state = "approved" if decision == "approve" else "denied"
        await note_approval(tx, task, decided, state)
        return {"id": task_id, **decided}

    return await h.session.commit(body)


async def show(tx: Tx, task: Task, approval: JsonObject | None) -> None:
    """Show the approval on the call's ``live`` slot (``None``: it settled)."""
    live = await tx.doc(LIVE, task.conversation_id)
    slots = live.value.get("tools") if isinstance(live.value, dict) else None
    call_id = task.input.get("call_id") if isinstance(task.input, dict) else None
    slot = slots.get(call_id) if isinstance(slots, dict) and isinstance(call_id, str) else None
    if not isinstance(slot, dict) or slot.get("task") != task.id:
        return
    if approval is None:
        slot.pop("approval", None)
    else:
        slot["approval"] = dict(approval)
        if "decision" not in approval:
            slot["status"] = "approval"


async def note_approval(tx: Tx, task: Task, approval: JsonObject, state: str) -> None:
    """Note an ``approval`` event: ``state`` pending, approved, denied, expired or
    withdrawn."""
    fields: dict[str, Any] = {
        "state": state,
        "task": task.id,
        "tool": approval.get("tool"),
        "call_id": approval.get("call_id"),
    }
    if state == "pending" and approval.get("expires_at") is not None:
        fields["expires_at"] = approval["expires_at"]
    if approval.get("note") is not None:
        fields["note"] = approval["note"]
    await note_event(tx, task.conversation_id, "approval", **fields)
