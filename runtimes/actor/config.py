"""What every actor host is configured with: models, extensions, environments, settings."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import TypeAlias

from core import JsonObject
from core.harness import EnvFactory, Extension, HarnessSettings, Models
from core.telemetry import Telemetry

__all__ = ["ActorConfig", "ActorEnvProvider", "ActorTelemetry", "HostObserver", "Reporter"]

ActorEnvProvider: TypeAlias = Callable[[str], AbstractAsyncContextManager[EnvFactory | None]]
"""``provider(actor)``: an async context manager entered when the actor is activated and
exited when it is parked or the host closes; it yields the harness's env factory
(``env(conversation_id, cwd)``), e.g. a :class:`remote_env.client.RemoteEnv` scoped to the
actor's sandbox workspace."""

HostObserver: TypeAlias = Callable[[str, str, int | None], None]
"""``observe(actor, event, wake_at)``: ``"activated"`` when an actor is opened and running,
``"evicted"`` when it is parked (``wake_at``: its next durable deadline, which the host
keeps, or ``None``). For logs and demos; it must be cheap and must not raise."""

ActorTelemetry: TypeAlias = Callable[[str], Telemetry]
"""``telemetry(actor)``: the :class:`core.telemetry.Telemetry` port of that actor's harness
(its logs and spans; see ``runtimes/observe``)."""

Reporter: TypeAlias = Callable[[str, BaseException], None]
"""``report(actor, error)``: an error no request can receive (a task fault, a failed wake)."""


@dataclass(frozen=True)
class ActorConfig:
    """What every host gives each actor it opens (the same on every host).

    ``models`` serves every actor (a scripted model in tests and demos, ``LitellmModels`` /
    ``ModelRouter`` in production). ``extensions`` are installed in one registry shared by
    the host's actors, so replacing one in the registry replaces it everywhere at once.
    ``env`` provides each actor's execution environment. ``default_agent`` is the agent
    document of a root conversation the API creates. ``report`` hears errors no request
    can receive (default: logged); ``observe`` hears actors being activated and parked;
    ``telemetry`` gives each actor's harness its logs and traces (default: none).
    """

    models: Models
    extensions: Sequence[Extension] = ()
    env: ActorEnvProvider | None = None
    settings: HarnessSettings = field(default_factory=HarnessSettings)
    default_agent: JsonObject = field(default_factory=dict)
    report: Reporter | None = None
    observe: HostObserver | None = None
    telemetry: ActorTelemetry | None = None
