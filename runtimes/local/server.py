"""Serving the API with uvicorn: one process, one event loop, all actors in it."""

from __future__ import annotations

import gc
import socket
from collections.abc import Awaitable, Callable, Sequence

import uvicorn

from runtimes.actor.api import ApiConfig, create_app
from runtimes.actor.api.app import is_route_walk
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
        self._gc_before: tuple[int, int, int] | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        """Start serving, then tune the collector for serving (:func:`_tune_gc`)."""
        await super().startup(sockets=sockets)
        if self.started and self._gc_before is None:
            self._gc_before = _tune_gc()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.actor_host.begin_shutdown()
        try:
            await super().shutdown(sockets=sockets)
        finally:
            if self._gc_before is not None:  # a process (the tests) may serve many times
                gc.unfreeze()  # what start-up made may be garbage by now
                gc.set_threshold(*self._gc_before)
                self._gc_before = None


GEN0_THRESHOLD = 5_000
"""Allocations (net) between young collections while serving; Python's default is 700."""


def _tune_gc() -> tuple[int, int, int]:
    """Freeze what start-up made and collect the young generation less often; returns
    the thresholds before.

    A full collection walks every tracked object, pausing the one loop that accepts every
    submission. Under the host benchmark (``tests/bench/suite.py --only host``, a hundred
    active actors) every slowest-1% warm acceptance overlapped one: five or six a run, of
    70-280 ms on a shared 2-core machine (timed with ``gc.callbacks``). Two causes:

    * about half the objects walked were start-up's (modules, the app, its routes and
      models: ~76,000 of ~159,000), which live as long as the process: ``gc.freeze()``
      moves them out of the collector's sight for good;
    * at 700 allocations per young collection, objects that live a round or two (a
      request's, a commit's) are often caught alive and promoted; the promoted ones that
      die later are what makes full collections due. At 5,000 nearly all die young: one
      full collection a run instead of five or six, and the collector's total time per
      run falls by half or more (2.5-3.1 s -> 0.9-1.2 s on the loaded machine). A young
      collection takes longer (~9 ms instead of ~1 ms there), far below the full ones
      (200-500 ms there) it spares.
    """
    before = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(max(before[0], GEN0_THRESHOLD), before[1], before[2])
    return before


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
