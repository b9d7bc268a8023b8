"""The host-neutral actor layer: what every host (local, Durable Object, Lambda) shares.

* :class:`Host` — the port the actor API is typed against;
* :class:`ActorConfig` — what every host opens its actors with;
* :mod:`runtimes.actor.lifecycle` — open → activate → use → park, poisoned sessions, a
  failed first request leaving no actor behind (:class:`ActorPool`, over an
  :class:`ActorStore` each host provides);
* :mod:`runtimes.actor.api` — the actor HTTP API (docs/design.md § The HTTP API) as one
  FastAPI app;
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

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

# Names resolved on first access (PEP 562), not at import: a host that only needs a
# leaf module (``runtimes.actor.clock`` on the recovery path, say) then does not pay for
# the lifecycle and config modules it never touches.
_LAZY = {
    "ACTOR_ID_PATTERN": "ids",
    "ActorConfig": "config",
    "ActorEnvProvider": "config",
    "ActorLocked": "errors",
    "ActorPool": "lifecycle",
    "ActorStore": "lifecycle",
    "Host": "host",
    "HostClosed": "errors",
    "HostError": "errors",
    "HostObserver": "config",
    "InvalidActorId": "errors",
    "ListableStore": "lifecycle",
    "ListingUnsupported": "errors",
    "OpenActor": "lifecycle",
    "Reporter": "config",
    "StoreLease": "lifecycle",
    "UnknownActor": "errors",
    "check_actor_id": "ids",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


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
