"""The host-neutral actor layer: what every host (local, Durable Object, Lambda) shares.

* :class:`Host` — the port the actor API is typed against;
* :class:`ActorConfig` — what every host opens its actors with;
* :mod:`runtimes.actor.lifecycle` — open → activate → use → park, poisoned sessions, a
  failed first request leaving no actor behind (:class:`ActorPool`, over an
  :class:`ActorStore` each host provides);
* :mod:`runtimes.actor.api` — the actor HTTP API (SPEC §10) as one FastAPI app;
* :mod:`runtimes.actor.memory` — an in-memory host; :mod:`runtimes.actor.testing` — the
  host scenario kit every host runs.

Nothing here imports ``fcntl``, ``aiosqlite``, ``uvicorn``, ``litellm`` or ``boto3``, or
starts a thread: it runs under Pyodide.
"""

from runtimes.actor.config import ActorConfig, ActorEnvProvider, HostObserver, Reporter
from runtimes.actor.errors import (
    ActorLocked,
    HostClosed,
    HostError,
    InvalidActorId,
    UnknownActor,
)
from runtimes.actor.host import Host
from runtimes.actor.ids import ACTOR_ID_PATTERN, check_actor_id
from runtimes.actor.lifecycle import ActorPool, ActorStore, OpenActor, StoreLease

__all__ = [
    "ACTOR_ID_PATTERN",
    "ActorConfig",
    "ActorEnvProvider",
    "ActorLocked",
    "ActorPool",
    "ActorStore",
    "Host",
    "HostClosed",
    "HostError",
    "HostObserver",
    "InvalidActorId",
    "OpenActor",
    "Reporter",
    "StoreLease",
    "UnknownActor",
    "check_actor_id",
]
