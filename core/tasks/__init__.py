"""Tasks: definitions, creation, ownership, the phase runtime, the registry and the
scheduler."""

from core.tasks.creation import TaskFactory
from core.tasks.definition import AbortHandler, Migrate, PhaseHandler, TaskDefinition, define_task
from core.tasks.registry import TaskRegistry, TaskSource
from core.tasks.runtime import NextState, TaskRuntime
from core.tasks.scheduler import Inspection, Scheduler, SettleHook, TaskView
from core.tasks.signal import CancelSignal

__all__ = [
    "AbortHandler",
    "CancelSignal",
    "Inspection",
    "Migrate",
    "NextState",
    "PhaseHandler",
    "Scheduler",
    "SettleHook",
    "TaskDefinition",
    "TaskFactory",
    "TaskRegistry",
    "TaskRuntime",
    "TaskSource",
    "TaskView",
    "define_task",
]
