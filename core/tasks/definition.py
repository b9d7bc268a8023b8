"""Task definitions: named, versioned state machines whose phases make durable progress."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeAlias

from core.errors import TaskStateError
from core.jsonvalue import JsonObject, JsonValue, json_copy
from core.readonly import readonly
from core.records import Task

if TYPE_CHECKING:
    from core.tasks.runtime import TaskRuntime

__all__ = ["AbortHandler", "Migrate", "PhaseHandler", "TaskDefinition", "define_task"]

PhaseHandler: TypeAlias = Callable[[Task, "TaskRuntime"], Awaitable[None]]
"""``async def phase(task, runtime)``: must commit durable progress (a new checkpoint,
a waiting state or an outcome) through ``runtime``, or the task is faulted."""

AbortHandler: TypeAlias = Callable[[Task, "TaskRuntime"], Awaitable[None]]
"""``async def abort(task, runtime)``: runs once, after the task's owned work is
terminal, and must commit a terminal outcome (usually ``Aborted``)."""

Migrate: TypeAlias = Callable[[JsonValue, JsonObject, int], tuple[JsonValue, JsonObject]]
"""``migrate(input, checkpoint, from_version) -> (input, checkpoint)``."""


@readonly(eq=False, slots=False)
class TaskDefinition:
    """One task kind at one version. Compared by identity: replacing a definition in the
    registry with a new object is what hands running tasks over at their next phase."""

    name: str
    version: int
    initial: Callable[[JsonValue], JsonObject]
    phases: Mapping[str, PhaseHandler]
    abort: AbortHandler | None = None
    migrate: Migrate | None = None

    def checkpoint(self, value: object) -> JsonObject:
        """Check that ``value`` is a checkpoint of this definition and return a copy."""
        return self.check_phase(json_copy(value, f"checkpoint of {self.name}"))

    def check_phase(self, value: object) -> JsonObject:
        """Check that ``value`` is an object naming a phase of this definition, and return
        it as it is. For a checkpoint on its way into ``Tx.put_task``, which copies and
        checks its JSON as it stages it: copying it here too would do that twice."""
        if type(value) is not dict or type(value.get("phase")) is not str:
            raise TaskStateError(f"{self.name}: a checkpoint is an object with a string 'phase'")
        if value["phase"] not in self.phases:
            raise TaskStateError(f"{self.name}: unknown phase {value['phase']!r}")
        return value

    def can_take(self, stored_version: int) -> bool:
        """Whether this definition can run a task stored at ``stored_version``."""
        return self.version == stored_version or (
            self.version > stored_version and self.migrate is not None
        )


def define_task(
    name: str,
    *,
    phases: Mapping[str, PhaseHandler],
    version: int = 1,
    initial: Callable[[JsonValue], Any] | None = None,
    abort: AbortHandler | None = None,
    migrate: Migrate | None = None,
) -> TaskDefinition:
    """Declare a task kind.

    ``initial(input)`` returns the first checkpoint (default ``{"phase": <first phase>}``).
    Phases are looked up by the checkpoint's ``phase`` key.
    """
    if not name or not isinstance(name, str):
        raise ValueError("a task name is a non-empty string")
    if type(version) is not int or version < 1:
        raise ValueError(f"task versions are positive integers, got {version!r}")
    if not phases:
        raise ValueError(f"task {name!r} needs at least one phase")
    first = next(iter(phases))
    return TaskDefinition(
        name=name,
        version=version,
        initial=initial or (lambda _input: {"phase": first}),
        phases=MappingProxyType(dict(phases)),
        abort=abort,
        migrate=migrate,
    )
