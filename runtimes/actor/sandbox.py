"""Each actor's tools in its own workspace on a sandbox server (``remote_env``).

One provider for every host: the local ``perdure dev`` host and the Cloudflare Worker
both open actors with :func:`sandbox_env`. The server trusts only tokens signed with
its secret (:mod:`remote_env.auth`), so the host holds the secret and mints a short
token per request, scoped to the actor's workspace; the token never outlives its TTL
and no long-lived credential crosses the wire.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import httpx

from core.harness import EnvFactory
from runtimes.actor.config import ActorEnvProvider

__all__ = ["SANDBOX_TOKEN_TTL_S", "sandbox_env"]

SANDBOX_TOKEN_TTL_S = 3600.0


def sandbox_env(
    url: str,
    secret: bytes,
    *,
    make_transport: Callable[[], httpx.AsyncBaseTransport] | None = None,
    token_ttl_s: float = SANDBOX_TOKEN_TTL_S,
) -> ActorEnvProvider:
    """Each actor's tools run in its own workspace on the sandbox server at ``url``,
    with workspace tokens minted from ``secret`` (a fresh one per request).

    ``make_transport``: a new httpx transport for each activation (the client closes
    its transport when the actor is parked); a Worker passes its ``fetch`` transport,
    the default is httpx's own sockets."""
    # Imported here: the client pulls in the wire protocol, which a host without a
    # sandbox never needs (a Worker pays every import on its cold start).
    from remote_env.auth import mint_token
    from remote_env.client import RemoteEnv

    @asynccontextmanager
    async def provider(actor: str) -> AsyncIterator[EnvFactory | None]:
        def token() -> str:
            return mint_token(secret, actor, token_ttl_s)

        transport = make_transport() if make_transport is not None else None
        async with RemoteEnv(url, token, transport=transport) as env:
            yield lambda _conversation_id, _cwd: env

    return provider
