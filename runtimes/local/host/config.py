"""What a local host is made of: models, extensions, environments and settings."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeAlias

from core.clock import Clock
from core.harness import EnvFactory, Extension, HarnessSettings, Models
from core.jsonvalue import JsonObject
from runtimes.local.sqlite import Synchronous

__all__ = ["ActorEnvProvider", "HostConfig", "HostObserver", "Reporter"]

ActorEnvProvider: TypeAlias = Callable[[str], AbstractAsyncContextManager[EnvFactory | None]]
"""``provider(actor)``: an async context manager entered when the actor is activated and
exited when it is evicted or the host closes; it yields the harness's env factory
(``env(conversation_id, cwd)``), e.g. a :class:`remote_env.client.RemoteEnv` scoped to the
actor's sandbox workspace."""

HostObserver: TypeAlias = Callable[[str, str, int | None], None]
"""``observe(actor, event, wake_at)``: ``"activated"`` when an actor is opened and running,
``"evicted"`` when it is closed (``wake_at``: its next durable deadline, kept in the wake
heap, or ``None``). For logs and demos; it must be cheap and must not raise."""

Reporter: TypeAlias = Callable[[str, BaseException], None]
"""``report(actor, error)``: an error no request can receive (a task fault, a failed wake)."""


@dataclass(frozen=True)
class HostConfig:
    """The configuration of an :class:`~runtimes.local.host.ActorHost`.

        ``data_dir`` holds ``<actor>.sqlite`` (plus its WAL files) and ``<actor>.lock`` per
        actor; it is created if missing. ``models`` serves every actor (a
        :class:`~core.testing.FauxModel` in tests, ``LitellmModels`` / ``ModelRouter`` in
        production). ``extensions`` are installed in one registry shared by all actors, so
        :attr:`ActorHost.registry`\\ ``.install(...)`` replaces an extension everywhere at once.
        ``default_agent`` is the agent document of a root conversation created by the host.

        ``idle_evict_s``: an actor that had no request, no commit and nothing running or
        runnable for this long is evicted (closed; its next durable deadline goes to the wake
        heap). ``recover_on_start``: at start, look at every actor in ``data_dir`` once and
        wake those with pending work (a crash may have left some); without it, an actor comes
        back only when a request names it. ``clock`` defaults to the system clock. ``observe``
    hears actors being activated and evicted.
    """

    data_dir: Path
    models: Models
    extensions: Sequence[Extension] = ()
    env: ActorEnvProvider | None = None
    settings: HarnessSettings = field(default_factory=HarnessSettings)
    default_agent: JsonObject = field(default_factory=dict)
    idle_evict_s: float = 60.0
    recover_on_start: bool = True
    synchronous: Synchronous = "NORMAL"
    clock: Clock | None = None
    report: Reporter | None = None
    observe: HostObserver | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.idle_evict_s, int | float) or self.idle_evict_s < 0:
            raise ValueError(f"idle_evict_s must be >= 0 seconds, got {self.idle_evict_s!r}")
