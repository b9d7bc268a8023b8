"""The JSON gate for task records as a transaction stages them (``Tx.put_task``).

Every payload of a staged task record (input, checkpoint, outcome, memos) is copied and
checked as JSON, except the parts the kernel itself admitted before: payload objects
shared with the task's previous staged or committed record, which no caller can reach.
A record whose payloads all are such parts is staged as it is (no copy of the record).
"""

from __future__ import annotations

from dataclasses import replace
from typing import cast

from core.errors import TaskStateError
from core.jsonvalue import JsonObject, JsonValue, json_copy
from core.records import (
    Aborted,
    Completed,
    Completing,
    Failed,
    Faulted,
    Orphaned,
    Outcome,
    Pending,
    Running,
    Task,
    TaskState,
    Terminal,
    Waiting,
)

__all__ = ["checked_task"]


def checked_task(
    task: Task,
    before: Task | None = None,
    *,
    state_admitted: bool = False,
    input_admitted: bool = False,
) -> Task:
    """Copy and JSON-check every payload of a task record.

    Payload objects shared with ``before`` (the kernel's own committed or staged record,
    which no caller can reach) were checked when they were admitted and are reused, as
    are the state and the input where the caller says it admitted them itself (the task
    layer's creation: fresh copies nobody else holds).
    """
    state = task.state
    where = f"task {task.id}"
    new_state: TaskState
    if state_admitted or (before is not None and state is before.state):
        new_state = state
    elif isinstance(state, Waiting):
        on = tuple(state.on)
        if any(type(t) is not int for t in on):
            raise TaskStateError(f"{where}: waiting on non-task ids {on!r}")
        if state.policy not in ("all_settled", "fail_fast"):
            raise TaskStateError(f"{where}: unknown wait policy {state.policy!r}")
        if state.until is not None and type(state.until) is not int:
            raise TaskStateError(f"{where}: until must be epoch milliseconds (int)")
        new_state = Waiting(_checkpoint(state.checkpoint, where), on, state.policy, state.until)
    elif isinstance(state, Pending | Running):
        checkpoint = state.checkpoint
        if before is None or checkpoint is not before.checkpoint:
            new_state = type(state)(_checkpoint(checkpoint, where))
        elif type(state) is Pending or type(state) is Running:
            # The state object holds nothing but the admitted checkpoint: kept as it is
            # (a reservation stages one per task it starts).
            new_state = state
        else:
            new_state = type(state)(checkpoint)
    elif isinstance(state, Completing | Terminal):
        new_state = type(state)(_outcome(state.outcome, where))
    else:
        raise TaskStateError(f"{where}: unknown state {state!r}")
    memos = task.memos
    if isinstance(new_state, Completing | Terminal):
        memos = {}  # settled records drop their memos
    elif before is not None and memos is before.memos:
        pass  # admitted with the record before
    elif type(memos) is dict and not memos:
        memos = {}  # nothing to check (the caller's dict stays the caller's)
    else:
        memos = cast("dict[str, JsonValue]", json_copy(memos, f"{where} memos"))
    value = task.input
    if not input_admitted and (before is None or value is not before.input):
        value = json_copy(value, f"{where} input")
    if new_state is state and memos is task.memos and value is task.input:
        return task  # every payload is an admitted one: the record itself is staged
    return task.evolve(input=value, state=new_state, memos=memos)


def _checkpoint(checkpoint: object, where: str) -> JsonObject:
    value = json_copy(checkpoint, f"{where} checkpoint")
    if type(value) is not dict or type(value.get("phase")) is not str:
        raise TaskStateError(f"{where}: a checkpoint is an object with a string 'phase'")
    return value


def _outcome(outcome: Outcome, where: str) -> Outcome:
    w = f"{where} outcome"
    if isinstance(outcome, Completed):
        return Completed(json_copy(outcome.result, w))
    if isinstance(outcome, Failed):
        return Failed(
            replace(outcome.error, detail=json_copy(outcome.error.detail, w)),
            json_copy(outcome.result, w),
        )
    if isinstance(outcome, Aborted):
        return Aborted(outcome.reason, json_copy(outcome.result, w))
    if isinstance(outcome, Faulted):
        return Faulted(replace(outcome.error, detail=json_copy(outcome.error.detail, w)))
    if isinstance(outcome, Orphaned):
        return outcome
    raise TaskStateError(f"{where}: unknown outcome {outcome!r}")
