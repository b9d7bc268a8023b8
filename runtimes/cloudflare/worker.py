"""The Python Worker's entry classes (imports the Workers SDK: Pyodide only).

* :class:`Default` — the ``WorkerEntrypoint`` front door: every request is decided by
  :class:`~.front_door.FrontDoor` (auth, body size, actor id, route, JSON) before any
  Durable Object is addressed; admitted requests go to ``ACTORS.getByName(actor)``,
  i.e. the object ``idFromName(actor)``. Nothing else happens there.
* :class:`PerdureActor` — the Durable Object: a :class:`~.actor.DurableActor` over
  ``ctx.storage``, opened once per isolate inside ``blockConcurrencyWhile``; ``alarm()``
  runs one guarded delivery.

The harness a deployment runs (its models, tools, settings) is given once by the entry
module with :func:`configure`. Serving the actor API app from :meth:`PerdureActor.fetch`
waits for the host-neutral app; until then it answers ``501 not_implemented``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from workers import DurableObject, Response, WorkerEntrypoint  # type: ignore[import-not-found]

from core.clock import TimerHandle
from runtimes.cloudflare.actor import DurableActor, HarnessOpener
from runtimes.cloudflare.alarm import AlarmReport
from runtimes.cloudflare.front_door import BODY_METHODS, FrontDoor, Refusal, RouteTable
from runtimes.cloudflare.names import (
    API_TOKEN_SECRET,
    DURABLE_OBJECT_BINDING,
    MAX_BODY_BYTES_VAR,
)

__all__ = ["Default", "PerdureActor", "WorkerClock", "configure"]


class _Deployment:
    open_harness: HarnessOpener | None = None
    routes: RouteTable = RouteTable()


def configure(*, open_harness: HarnessOpener, routes: RouteTable) -> None:
    """Called once by the Worker's entry module: how to build the harness on a Durable
    Object's storage (it must not resume it), and the actor API's route table."""
    _Deployment.open_harness = open_harness
    _Deployment.routes = routes


class WorkerClock:
    """:class:`core.clock.Clock` in a Worker: ``Date.now()`` milliseconds, loop timers.

    Workers advance the clock only across I/O, so durable deadlines are compared with
    the time the current event started; timers fire on Pyodide's event loop.
    """

    def now(self) -> int:
        return time.time_ns() // 1_000_000

    def call_at(self, when: int, callback: Callable[[], None]) -> TimerHandle:
        import asyncio

        delay = max(0.0, (when - self.now()) / 1000)
        return asyncio.get_running_loop().call_later(delay, callback)


def _report(report: AlarmReport) -> None:
    # The Worker's log (wrangler tail / Workers Logs) is stderr.
    what = "gave up" if report.gave_up else f"retrying at {report.retry_at}"
    print(
        f"perdure: alarm attempt {report.attempt}/{report.max_failures} failed"
        f" ({report.error}); {what}",
        file=sys.stderr,
    )


def _json_response(refusal: Refusal) -> Any:
    headers = {"content-type": "application/json", **dict(refusal.headers)}
    return Response(refusal.body_bytes(), status=refusal.status, headers=headers)


def _js(request: Any) -> Any:
    return getattr(request, "js_object", request)


class Default(WorkerEntrypoint):  # type: ignore[misc]
    """The front door (see the module docstring)."""

    async def fetch(self, request: Any) -> Any:
        js_request = _js(request)
        method = str(js_request.method).upper()
        headers = {str(k).lower(): str(v) for k, v in js_request.headers.entries()}
        door = FrontDoor(
            str(getattr(self.env, API_TOKEN_SECRET, "") or ""),
            _Deployment.routes,
            int(getattr(self.env, MAX_BODY_BYTES_VAR, None) or 1024 * 1024),
        )
        path = urlsplit(str(js_request.url)).path
        decision = door.admit(method, path, headers)  # before reading any body
        body: bytes | None = None
        if not isinstance(decision, Refusal) and method in BODY_METHODS:
            # Read a clone: the original, unread, goes on to the Durable Object.
            buffer = await js_request.clone().arrayBuffer()
            body = bytes(buffer.to_bytes())
            decision = door.admit(method, path, headers, body)
        if isinstance(decision, Refusal):
            return _json_response(decision)
        stub = getattr(self.env, DURABLE_OBJECT_BINDING).getByName(decision.actor)
        return await stub.fetch(js_request)


class PerdureActor(DurableObject):  # type: ignore[misc]
    """One conversation tree (see the module docstring)."""

    def __init__(self, ctx: Any, env: Any) -> None:
        super().__init__(ctx, env)
        opener = _Deployment.open_harness
        if opener is None:
            raise RuntimeError("runtimes.cloudflare.worker.configure() was not called")
        self.actor = DurableActor(
            self.ctx.storage, open_harness=opener, clock=WorkerClock(), report=_report
        )

    async def _open(self) -> None:
        if not self.actor.is_open:
            # One opening per isolate, with every other event held until it is done.
            await self.ctx.blockConcurrencyWhile(self.actor.harness)

    async def fetch(self, request: Any) -> Any:
        await self._open()
        refusal = Refusal(
            501, "not_implemented", "the actor API is not served by this Durable Object yet"
        )
        return _json_response(refusal)

    async def alarm(self, alarm_info: Any = None) -> None:
        # Opening is part of the guarded work: an isolate that cannot open the harness
        # is a failed attempt, counted and backed off, not an endless workerd retry.
        await self.actor.alarm()
