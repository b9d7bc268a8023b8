"""The Worker's entry module (``main`` in ``wrangler.toml``).

The classes wrangler binds are the runtime's own; what every actor is opened with comes
from the Worker's vars and secrets (``runtimes/cloudflare/settings.py``). A deployment
with its own tools calls ``configure(ActorConfig(...))`` here instead.
"""

from runtimes.cloudflare.worker import Default, PerdureActor

__all__ = ["Default", "PerdureActor"]
