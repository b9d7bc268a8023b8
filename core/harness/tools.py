"""What a tool's ``execute`` receives and returns, and how results are bounded.

``execute(args, ctx)`` gets its validated arguments (an instance of the tool's pydantic
model) and a :class:`ToolContext`, and returns a string or a :class:`ToolResult`.
Raising is allowed: the harness turns it into a ``tool_error`` result.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import field
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from core.errors import HarnessError, PerdureError
from core.jsonvalue import JsonObject, JsonValue
from core.readonly import readonly
from core.session.transaction import Tx
from core.tasks.signal import CancelSignal
from core.textlimits import DEFAULT_MAX_BYTES, DEFAULT_MAX_LINES, format_size, truncate_head

if TYPE_CHECKING:
    from core.env import ExecutionEnv, OpRef
    from core.harness.handles import ConversationHandle
    from core.session.session import Session
    from core.tasks.runtime import TaskRuntime

__all__ = [
    "Diagnostic",
    "DiagnosticCode",
    "NoEnvironment",
    "ToolContext",
    "ToolResult",
    "ToolServices",
    "bound_output",
    "harness_of",
]

DiagnosticCode = Literal[
    "tool_unavailable",
    "invalid_arguments",
    "blocked",
    "denied",
    "interrupted",
    "aborted",
    "tool_error",
    "truncated",
]


@readonly
class Diagnostic:
    code: str
    message: str
    severity: Literal["error", "warning"] = "error"

    def to_json(self) -> JsonObject:
        return {"code": self.code, "message": self.message, "severity": self.severity}


@readonly(slots=False)
class ToolResult:
    """``content`` is what the model reads; ``details`` is structured JSON for UIs.

    ``apply(tx)`` (optional) runs inside the commit that records the result, so a tool
    can change documents atomically with its result (a todo list, a plan).
    """

    content: str
    is_error: bool = False
    details: JsonValue = None
    apply: Callable[[Tx], Awaitable[None] | None] | None = field(default=None, compare=False)


@runtime_checkable
class ToolServices(Protocol):
    """What a tool reaches through ``ctx.harness``: the part of the harness a tool needs
    (the :class:`~core.harness.harness.Harness` satisfies it; the harness's own tasks
    see more, :class:`~core.harness.services.HarnessServices`). Runtime-checkable so
    :func:`harness_of` can narrow the scheduler's untyped slot with a check, not a cast.
    """

    @property
    def session(self) -> Session:
        """The open session: commits, cached tasks and documents, the storage."""
        ...

    async def conversation(self, conversation_id: int) -> ConversationHandle:
        """A handle on an existing conversation; raises ``UnknownRecord`` if there is
        none. Reads only."""
        ...

    def configured_agent(self, current: JsonValue, change: Mapping[str, Any]) -> JsonObject:
        """The agent document ``current`` with ``change`` applied and validated against
        the installed extensions (see :func:`~core.harness.agents.agent_change`). Pure:
        raises ``InvalidInput``/``UnknownTool`` and writes nothing."""
        ...


def harness_of(rt: TaskRuntime) -> ToolServices:
    """The harness running ``rt``'s task, for a task an extension defines: it is defined
    without the harness, which the scheduler carries as ``rt.harness``, typed ``object``
    because ``core.tasks`` cannot name the layer above it. Raises :class:`HarnessError`
    when the task runs on an engine no harness opened."""
    harness = rt.harness
    if not isinstance(harness, ToolServices):
        raise HarnessError(f"task {rt.task_id} runs on an engine without an agent harness")
    return harness


class NoEnvironment(PerdureError):
    """A tool asked for an execution environment the host did not configure."""


class ToolContext:
    """The call a tool is executing: identity, environment, signal and helpers."""

    def __init__(
        self,
        *,
        harness: ToolServices,
        runtime: TaskRuntime,
        call_id: str,
        tool_name: str,
        op: OpRef,
        env: ExecutionEnv | None,
        report_output: Callable[[str], None],
    ) -> None:
        self.harness = harness
        self._runtime = runtime
        self.task_id = runtime.task_id
        self.conversation_id = runtime.conversation_id
        self.call_id = call_id
        self.tool_name = tool_name
        self.op = op
        self._env = env
        self._report_output = report_output

    @property
    def env(self) -> ExecutionEnv:
        """The conversation's execution environment (resolved for its current ``cwd``)."""
        if self._env is None:
            raise NoEnvironment(f"tool {self.tool_name!r} needs an execution environment")
        return self._env

    @property
    def env_or_none(self) -> ExecutionEnv | None:
        return self._env

    @property
    def signal(self) -> CancelSignal:
        """Fires when the call is aborted or the harness closes."""
        return self._runtime.signal

    def now(self) -> int:
        return self._runtime.now()

    async def memo(self, name: str, *candidate: JsonValue) -> JsonValue:
        """The task's memo ``name`` (first writer wins); see :meth:`TaskRuntime.memo`."""
        return await self._runtime.memo(name, *candidate)

    def output(self, text: str) -> None:
        """Stream progress output (committed to the ``live`` document, throttled)."""
        self._report_output(text)

    @property
    def runtime(self) -> Any:
        return self._runtime


def bound_output(
    text: str, max_bytes: int | None, max_lines: int | None
) -> tuple[str, Diagnostic | None]:
    """Keep the head of ``text`` within the limits; say what was dropped."""
    lines = max_lines or DEFAULT_MAX_LINES
    size = max_bytes or DEFAULT_MAX_BYTES
    if (
        text.count("\n") < lines
        and (len(text) if text.isascii() else len(text.encode("utf-8"))) <= size
    ):
        return text, None  # within both limits (most results): nothing to split and join
    cut = truncate_head(text, lines, size)
    if not cut.truncated:
        return text, None
    dropped_lines = cut.total_lines - cut.kept_lines
    dropped_bytes = len(text.encode("utf-8")) - cut.kept_bytes
    message = (
        f"Output truncated to its beginning: {dropped_lines} lines, "
        f"{format_size(dropped_bytes)} dropped"
    )
    return f"{cut.text}\n\n[{message}]", Diagnostic("truncated", message, "warning")
