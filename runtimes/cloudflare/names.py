"""Names the Worker's code and its wrangler configuration share.

``infra/cloudflare/wrangler.toml`` must use exactly these (a test reads it and checks):
the Durable Object class, its binding, the entry class, and the variables and secrets
the Worker reads from ``env``.
"""

from __future__ import annotations

__all__ = [
    "API_TOKEN_SECRET",
    "DURABLE_OBJECT_BINDING",
    "DURABLE_OBJECT_CLASS",
    "ENTRY_CLASS",
    "MAX_BODY_BYTES_VAR",
]

DURABLE_OBJECT_CLASS = "PerdureActor"
DURABLE_OBJECT_BINDING = "ACTORS"
ENTRY_CLASS = "Default"
API_TOKEN_SECRET = "PERDURE_API_TOKEN"  # the bearer token clients send (a secret)
MAX_BODY_BYTES_VAR = "PERDURE_MAX_BODY_BYTES"  # optional; 1 MiB when unset
