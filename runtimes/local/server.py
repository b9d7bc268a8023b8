"""Serving the API with uvicorn: one process, one event loop, all actors in it."""

from __future__ import annotations

import socket
from collections.abc import Awaitable, Callable, Sequence

import uvicorn

from runtimes.actor.api import ApiConfig, create_app
from runtimes.actor.api.app import is_route_walk
from runtimes.local.collector import ServingCollector
from runtimes.local.host import ActorHost

__all__ = ["HostServer", "bind", "make_server"]


def bind(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    """A listening TCP socket (``port=0``: a free port; read it with ``getsockname()``).
    Binding before serving lets the caller print the real URL and lets clients connect
    (they queue in the backlog) before the server loop runs."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Accepted sockets inherit it. Without it uvicorn's accepted connections Nagle:
        # the body written after the headers of a keep-alive response waits for the
        # client's delayed ACK, about 40 ms per request (measured on loopback).
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host, port))
        sock.listen(2048)
        sock.set_inheritable(True)
    except BaseException:
        sock.close()
        raise
    return sock


class HostServer(uvicorn.Server):
    """uvicorn's server, telling the host first when shutdown begins.

    uvicorn drains open connections (up to ``timeout_graceful_shutdown``) before the
    lifespan shutdown closes the host; ending long polls at once keeps that drain short.
    On SIGINT/SIGTERM (main thread) the sequence is: stop accepting, end long polls, wait
    for in-flight requests, close every actor (lifespan), exit.
    """

    def __init__(self, config: uvicorn.Config, host: ActorHost) -> None:
        super().__init__(config)
        self.actor_host = host
        self.collector = ServingCollector()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        """Start serving, then tune the collector for serving (:class:`ServingCollector`)."""
        await super().startup(sockets=sockets)
        if self.started:
            self.collector.start()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.actor_host.begin_shutdown()
        try:
            await super().shutdown(sockets=sockets)
        finally:
            self.collector.stop()


def make_server(
    host: ActorHost,
    config: ApiConfig,
    *,
    log_level: str = "warning",
    graceful_s: float = 5.0,
    keep_alive_s: float = 75.0,
    on_shutdown: Sequence[Callable[[], Awaitable[None]]] = (),
    log_requests: bool = False,
) -> HostServer:
    """A server for ``create_app(host, config, on_shutdown=...)``; run it with
    ``server.run(sockets=[sock])`` (blocking; handles SIGINT/SIGTERM when on the main
    thread) or ``await server.serve(sockets=[sock])``.

    ``keep_alive_s`` outlasts the longest long poll: with uvicorn's default of 5 s, a
    client's pooled connection is often closed just as it sends the next request.
    ``log_requests``: one ``request`` line per HTTP request on the ``perdure`` logger.
    """
    app = create_app(host, config, on_shutdown=on_shutdown)
    if log_requests:
        from runtimes.observe import RequestLog

        app.add_middleware(RequestLog, unlogged=is_route_walk)
    uvicorn_config = uvicorn.Config(
        app,
        loop="asyncio",
        # httptools (a dependency) rather than h11: a few times cheaper per request.
        http="httptools",
        ws="none",
        lifespan="on",
        log_level=log_level,
        access_log=False,
        server_header=False,
        proxy_headers=False,
        timeout_graceful_shutdown=int(graceful_s),
        timeout_keep_alive=int(keep_alive_s),
    )
    return HostServer(uvicorn_config, host)
