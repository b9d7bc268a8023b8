"""The local actor host: one SQLite file and one file lock per actor, in one process.

See :mod:`runtimes.local.host.host`; the lifecycle it follows is
:mod:`runtimes.actor.lifecycle`'s.
"""

from runtimes.local.host.config import HostConfig
from runtimes.local.host.host import ActorHost
from runtimes.local.host.lock import ActorLock
from runtimes.local.host.store import LocalStore, actor_paths
from runtimes.local.host.wakes import WakeHeap

__all__ = ["ActorHost", "ActorLock", "HostConfig", "LocalStore", "WakeHeap", "actor_paths"]
