"""Task creation: which tasks may be created, and their first record.

The session's :class:`~core.session.transaction.Tx` stages records and keeps them
well-formed; deciding what a new task is — its definition, its first checkpoint, the
child rules (a child lives in its owner's conversation and is never background) — is
the task layer's, here. :class:`TaskFactory` is the session's task layer when nothing
schedules (a bare session); the scheduler creates tasks through one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from core.errors import TaskStateError, UnknownRecord, UnknownTaskKind
from core.jsonvalue import json_copy
from core.records import ROOT_CONVERSATION_ID, Task, Waiting
from core.session.transaction import TaskLayer, TaskSpec, Tx
from core.tasks.definition import TaskDefinition
from core.telemetry import NO_TELEMETRY, TRACE_MEMO

__all__ = ["TaskFactory"]


class TaskFactory:
    """Creates tasks whose kinds ``lookup`` resolves (a definition object is used as is)."""

    def __init__(self, lookup: Callable[[str], TaskDefinition | None]) -> None:
        self.lookup = lookup

    def resolve(self, definition: TaskDefinition | str) -> TaskDefinition | None:
        if not isinstance(definition, str):
            return definition
        return self.lookup(definition)

    async def create_task(self, tx: Tx, spec: TaskSpec) -> Task:
        """See :meth:`Tx.create_task`."""
        owner, until = spec.owner, spec.until
        defn = self.resolve(spec.definition)
        if defn is None:
            raise UnknownTaskKind(f"no task definition is registered as {spec.definition!r}")
        value = json_copy(spec.input, f"input of {defn.name}")
        if until is not None and type(until) is not int:
            raise TaskStateError(f"{defn.name}: until must be epoch milliseconds (int)")
        # The trace the task's spans belong to: its owner's, or the one it continues.
        within = spec.continues.memos.get(TRACE_MEMO) if spec.continues is not None else None
        conversation_id = spec.conversation_id
        if owner is not None:
            parent = tx.live_owner(owner)
            within = parent.memos.get(TRACE_MEMO)
            if spec.background:
                raise TaskStateError("a child task cannot be background")
            if conversation_id is not None and conversation_id != parent.conversation_id:
                raise TaskStateError("a child task lives in its owner's conversation")
            conversation_id = parent.conversation_id
        if conversation_id is None:
            conversation_id = ROOT_CONVERSATION_ID
        if conversation_id == ROOT_CONVERSATION_ID:
            await tx.ensure_root()
        elif not await tx.conversation_exists(conversation_id):
            raise UnknownRecord(f"Unknown conversation {conversation_id}")
        # ``initial`` is handed the admitted input: it is copied again as it is staged.
        input_admitted = spec.checkpoint is not None
        first = defn.initial(value) if spec.checkpoint is None else spec.checkpoint
        checkpoint = defn.checkpoint(first)
        task_id = spec.again if spec.again is not None else await tx.mint_id()
        telemetry = tx.session.telemetry
        trace = (
            None  # the default reports nothing: no attributes to build per task
            if telemetry is NO_TELEMETRY
            else telemetry.trace_for(
                defn.name,
                {
                    "perdure.task.id": task_id,
                    "perdure.task.kind": defn.name,
                    "perdure.conversation.id": conversation_id,
                },
                within if isinstance(within, str) else None,
            )
        )
        task = Task(
            id=task_id,
            conversation_id=conversation_id,
            kind=defn.name,
            version=defn.version,
            input=value,
            state=Waiting(checkpoint, until=until),
            owner=owner,
            background=bool(spec.background),
            memos={TRACE_MEMO: trace} if trace is not None else {},
        )
        return tx.stage_created_task(task, input_admitted=input_admitted)

    async def before_prepare(self, tx: Tx) -> None:
        """Nothing schedules on a bare session: no part in its commits."""


if TYPE_CHECKING:  # mypy proves the factory is a task layer

    def _conforms(factory: TaskFactory) -> TaskLayer:
        return factory
