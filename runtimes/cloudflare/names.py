"""Names the Worker's code and its wrangler configuration share.

``infra/cloudflare/wrangler.toml`` must use exactly these (a test reads it and checks):
the Durable Object classes (the actors' and the index's), their bindings, the entry
class, and the variables and secrets the Worker reads from ``env``.
"""

from __future__ import annotations

__all__ = [
    "API_TOKEN_SECRET",
    "CORS_ORIGINS_VAR",
    "DURABLE_OBJECT_BINDING",
    "DURABLE_OBJECT_CLASS",
    "ENTRY_CLASS",
    "INDEX_BINDING",
    "INDEX_CLASS",
    "MAX_BODY_BYTES_VAR",
    "MODEL_API_KEY_SECRET",
    "MODEL_BASE_URL_VAR",
    "MODEL_CONTEXT_WINDOW_VAR",
    "MODEL_MAX_TOKENS_VAR",
    "MODEL_VAR",
    "SANDBOX_SECRET",
    "SANDBOX_URL_VAR",
    "SECRETS",
    "TOKEN_KEYS_SECRET",
    "VARS",
]

DURABLE_OBJECT_CLASS = "PerdureActor"
DURABLE_OBJECT_BINDING = "ACTORS"
ENTRY_CLASS = "Default"
INDEX_CLASS = "PerdureActorIndex"  # the index of the actors, sharded (runtimes/cloudflare/index.py)
INDEX_BINDING = "ACTOR_INDEX"
API_TOKEN_SECRET = "PERDURE_API_TOKEN"  # the bearer token clients send (a secret)
MAX_BODY_BYTES_VAR = "PERDURE_MAX_BODY_BYTES"  # optional; 1 MiB when unset
TOKEN_KEYS_SECRET = "PERDURE_TOKEN_KEYS"  # optional: scoped tokens' keys, newest first
CORS_ORIGINS_VAR = "PERDURE_CORS_ORIGINS"  # optional: the browser origins allowed (CORS)

# The model (OpenAI-compatible chat completions over the runtime's fetch).
MODEL_VAR = "PERDURE_MODEL"  # required: the model name agents use and the server gets
MODEL_BASE_URL_VAR = "PERDURE_MODEL_BASE_URL"  # required: e.g. https://api.openai.com/v1
MODEL_API_KEY_SECRET = "PERDURE_MODEL_API_KEY"  # required (a secret): sent as Bearer
MODEL_CONTEXT_WINDOW_VAR = "PERDURE_MODEL_CONTEXT_WINDOW"  # optional; 128000 when unset
MODEL_MAX_TOKENS_VAR = "PERDURE_MODEL_MAX_TOKENS"  # optional; 8192 when unset
# The sandbox host (remote_env): both or neither; with them, the coding tools.
SANDBOX_URL_VAR = "PERDURE_SANDBOX_URL"  # https://..., the sandbox server's address
SANDBOX_SECRET = "PERDURE_SANDBOX_SECRET"  # the server's token secret (a secret)

VARS = (
    MAX_BODY_BYTES_VAR,
    CORS_ORIGINS_VAR,
    MODEL_VAR,
    MODEL_BASE_URL_VAR,
    MODEL_CONTEXT_WINDOW_VAR,
    MODEL_MAX_TOKENS_VAR,
    SANDBOX_URL_VAR,
)
SECRETS = (API_TOKEN_SECRET, MODEL_API_KEY_SECRET, SANDBOX_SECRET, TOKEN_KEYS_SECRET)
