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

Building a host: implement an :class:`ActorStore` (``open(name, create)`` hands over the
actor's ``Storage`` under the platform's single-writer guarantee — a file lock, the
Durable Object itself, a fenced lease — and ``release(discard)`` gives it back), subclass
:class:`ActorPool` and override its hooks for the platform's wake-up (``parked(name,
wake)``: arm the timer heap, ``setAlarm``, a one-time schedule; ``admitted``: drop it),
then serve ``create_app(host, ApiConfig(token))``. The app's lifespan calls
``host.start()``/``close()``; a bridge without lifespan events calls them itself. Run the
kit (:data:`runtimes.actor.testing.HOST_CHECKS`) with a :class:`~runtimes.actor.testing.KitTarget`
for the new host.
"""

from runtimes.actor.config import ActorConfig, ActorEnvProvider, HostObserver, Reporter
from runtimes.actor.errors import (
    ActorLocked,
    HostClosed,
    HostError,
    InvalidActorId,
    ListingUnsupported,
    UnknownActor,
)
from runtimes.actor.host import Host
from runtimes.actor.ids import ACTOR_ID_PATTERN, check_actor_id
from runtimes.actor.lifecycle import ActorPool, ActorStore, ListableStore, OpenActor, StoreLease

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
    "ListableStore",
    "ListingUnsupported",
    "OpenActor",
    "Reporter",
    "StoreLease",
    "UnknownActor",
    "check_actor_id",
]
