"""TaskRegistry: the task definitions a scheduler can run, replaceable at runtime."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Protocol

from core.tasks.definition import TaskDefinition

__all__ = ["TaskRegistry", "TaskSource"]


class TaskSource(Protocol):
    """Where a scheduler looks task kinds up.

    ``task(name)`` returns the current definition (or ``None``); ``subscribe(fn)`` calls
    ``fn()`` after every change and returns an unsubscriber. The extension registry of
    the agent harness implements the same protocol.
    """

    def task(self, name: str) -> TaskDefinition | None:
        """The current definition of task kind ``name``, or ``None`` when unknown."""
        ...

    def subscribe(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener()`` after every change of any definition; returns a function
        that unsubscribes (idempotent). Listeners must not raise."""
        ...


class TaskRegistry:
    """A plain, mutable set of task definitions keyed by name."""

    def __init__(self, definitions: Iterable[TaskDefinition] = ()) -> None:
        self._definitions: dict[str, TaskDefinition] = {}
        self._listeners: list[Callable[[], None]] = []
        for d in definitions:
            self._definitions[d.name] = d

    def task(self, name: str) -> TaskDefinition | None:
        """The definition named ``name``, or ``None``."""
        return self._definitions.get(name)

    @property
    def definitions(self) -> Mapping[str, TaskDefinition]:
        """A snapshot of every definition by name."""
        return dict(self._definitions)

    def install(self, definition: TaskDefinition) -> None:
        """Add a definition, replacing (in place) one with the same name."""
        self._definitions[definition.name] = definition
        self._changed()

    def uninstall(self, name: str) -> None:
        """Remove the definition named ``name``; unknown names are ignored."""
        if self._definitions.pop(name, None) is not None:
            self._changed()

    def subscribe(self, listener: Callable[[], None]) -> Callable[[], None]:
        """See :meth:`TaskSource.subscribe`."""
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe

    def _changed(self) -> None:
        for listener in list(self._listeners):
            listener()


if TYPE_CHECKING:  # mypy proves the adapter satisfies its port

    def _conforms(adapter: TaskRegistry) -> TaskSource:
        return adapter
