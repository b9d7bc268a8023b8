"""The Worker's entry module (``main`` in ``wrangler.toml``).

The classes wrangler binds are the runtime's own; what every actor is opened with comes
from the Worker's vars and secrets (``runtimes/cloudflare/settings.py``). A deployment
with its own tools calls ``configure(ActorConfig(...))`` here instead.

The actor API app (FastAPI; the runtime itself imports it only on an object's first
HTTP request), the front door's modules (imported by the runtime on the front door's
first request), the harness's compaction task and forks (imported when first used), and
the adapters the default configuration builds on an object's first
event are imported here, at the top level, on purpose: Cloudflare documents that a Python Worker's
top-level imports run at deploy time and are kept in a memory snapshot that cold starts
restore, so what is imported here is not paid again by each new isolate (not
verifiable on the build machine; see ``infra/cloudflare/README.md``).
"""

import gc

import workers.asgi  # noqa: F401  # the SDK's ASGI bridge, which serves every request

import core.harness.compaction  # the harness imports these two when first used
import core.harness.forks
import core.tools  # noqa: F401
import remote_env.client  # noqa: F401
import runtimes.actor.api
import runtimes.actor.inspector_files
import runtimes.actor.sandbox
import runtimes.cloudflare.fetch_transport
import runtimes.cloudflare.front_door
import runtimes.cloudflare.listing
import runtimes.cloudflare.minting
import runtimes.models.openai_http  # noqa: F401
from runtimes.cloudflare.worker import Default, PerdureActor, PerdureActorIndex

__all__ = ["Default", "PerdureActor", "PerdureActorIndex"]

# Everything imported above is in the snapshot and lives as long as the isolate: frozen
# (out of the collector's generations), so that no collection on an isolate's first
# event walks all of it (one such pass took ~0.4 s of a Durable Object's first request
# in Pyodide; tests/pyodide/run.py measures the first request after this module).
gc.collect()
gc.freeze()
