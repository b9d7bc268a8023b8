"""HarnessServices: what the harness's own tasks and tools may use of the harness.

The task modules (:mod:`~core.harness.generation`, :mod:`~core.harness.tool_task`,
:mod:`~core.harness.compaction`, :mod:`~core.harness.reminders`,
:mod:`~core.harness.subagents`) and :class:`~core.harness.tools.ToolContext` depend on
this protocol, not on :class:`~core.harness.harness.Harness`: ``harness.py`` imports
them to build its built-in tasks, so an import back would be a cycle. ``Harness``
satisfies the protocol (checked statically in ``harness.py``) and is injected into the
task factories when it opens.

Nothing here is new behaviour: each member is a member of ``Harness`` with the same
contract, listed because a task module uses it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from core.harness.tools import ToolServices

if TYPE_CHECKING:
    from core.clock import Clock
    from core.engine import Engine
    from core.env import ExecutionEnv
    from core.harness.context import ContextView
    from core.harness.live import ProgressPace
    from core.harness.messages import Message
    from core.harness.models import Models
    from core.harness.registry import Registry, ResolvedAgent
    from core.harness.settings import HarnessSettings
    from core.records import Entry
    from core.session.transaction import Tx

__all__ = ["HarnessServices"]


class HarnessServices(ToolServices, Protocol):
    """The members of the harness its tasks and tools use (see the module docstring)."""

    @property
    def engine(self) -> Engine:
        """The kernel the harness runs on (tasks read its scheduler's state)."""
        ...

    @property
    def models(self) -> Models:
        """The Models port requests are sent through."""
        ...

    @property
    def registry(self) -> Registry:
        """The installed extensions (tools, tasks, hooks) agents are resolved against."""
        ...

    @property
    def settings(self) -> HarnessSettings:
        """Limits and policies (retry, compaction, tool output bounds, progress)."""
        ...

    @property
    def clock(self) -> Clock:
        """The session's clock (the only source of time in ``core``)."""
        ...

    @property
    def progress_pace(self) -> ProgressPace:
        """The budget of partial commits the harness's streaming responses share."""
        ...

    def report(self, error: BaseException) -> None:
        """Hand an error nobody awaits to the host (logged; never raises)."""
        ...

    async def agent(self, conversation_id: int) -> ResolvedAgent:
        """The conversation's committed agent document resolved against the registry
        (cached per committed value and registry snapshot). Reads only; raises what
        resolving raises (unknown tools or extensions)."""
        ...

    async def context(self, conversation_id: int, cutoff: int | None = None) -> ContextView:
        """The derived model context of the conversation, up to entry ``cutoff`` if
        given. Reads only (it may load and cache the active range)."""
        ...

    def cached_message(self, conversation_id: int, entry_id: int) -> Message | None:
        """The parsed message of a committed entry of the in-memory active range, or
        ``None`` (then read the storage). Never reads the storage itself."""
        ...

    def built_message(self, entry: Entry, message: Message) -> None:
        """``entry``, staged in the commit being built, holds ``message`` as the harness
        built it (its JSON round trip is exact): once that commit lands, the context
        range takes this object instead of parsing the entry's JSON again. Pure."""
        ...

    def env_for(self, conversation_id: int, cwd: str | None) -> ExecutionEnv | None:
        """The execution environment tools of that conversation use (``None``: the host
        configured none)."""
        ...

    def cancelled(self, conversation_id: int, tx: Tx | None = None) -> bool:
        """Whether the task owning this conversation is gone, abort-marked or failed
        (inside ``tx``: as staged there), so its work must stop. Pure over cached state."""
        ...
