"""The local actor host: one SQLite file and one file lock per actor, in one process.

See :mod:`runtimes.local.host.host` for the life of an actor.
"""

from runtimes.local.host.config import ActorEnvProvider, HostConfig, HostObserver, Reporter
from runtimes.local.host.errors import (
    ActorLocked,
    HostClosed,
    HostError,
    InvalidActorId,
    UnknownActor,
)
from runtimes.local.host.host import ActorHost
from runtimes.local.host.ids import ACTOR_ID_PATTERN, check_actor_id
from runtimes.local.host.lock import ActorLock
from runtimes.local.host.wakes import WakeHeap

__all__ = [
    "ACTOR_ID_PATTERN",
    "ActorEnvProvider",
    "ActorHost",
    "ActorLock",
    "ActorLocked",
    "HostClosed",
    "HostConfig",
    "HostError",
    "HostObserver",
    "InvalidActorId",
    "Reporter",
    "UnknownActor",
    "WakeHeap",
    "check_actor_id",
]
