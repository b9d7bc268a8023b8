"""The Lambda front door of the AWS host.

Every invocation is one lease owner (its request id) on a fresh :class:`AwsHost`:

* **HTTP** (Function URL, API Gateway, ALB): Mangum turns the event into an ASGI request
  for the shared actor API app (:func:`runtimes.actor.api.create_app`); the route opens
  the actor — taking its lease and its working copy — and answers. The invocation then
  lets the actor's work settle (Lambda cannot keep working after it returns), parks it
  (its schedule armed to ``next_wake()``) and releases the lease.
* **wake** (``{"perdure": "wake", "actor", "at"}``, the input of the actor's one-time
  schedule): opens the actor and lets whatever is due within the Scheduler's one-minute
  precision run, then parks it. Idempotent: the deadlines live in the actor's state, so
  a duplicated delivery only looks.
* **sweep** (``{"perdure": "sweep"}``, from the template's rate schedule): wakes the
  actors whose park could not arm their schedule (:mod:`runtimes.aws.pending`).
* **request** (``{"perdure": "request", "method", "path", "body"}``, a direct
  ``lambda:Invoke`` — IAM-authorised, so the handler adds the API token itself): served
  by the same app, answered ``{"status", "body"}`` (plus ``retry_after`` with a 423).

A submission (HTTP or direct) refused because another invocation holds the actor's
lease goes to the actor's mailbox (:mod:`runtimes.aws.mailbox`) and is answered
``202 {id: null, status: "mailed", request_id, ...}`` — the shape every host answers a
submission with. ``GET .../conversations/{cid}/submissions/by-request?request_id=`` reads
it: ``mailed`` while it waits in the mailbox, the submission once it was taken (as does
re-submitting with that request id). Every invocation drains the mailboxes of the actors it
holds before it parks them, and arms an immediate wake for mail that arrived after its
last drain, so a mailbox is never stranded (a dead holder's mail is taken by the wake
its mailer armed, once the lease ran out).

Since every answer leaves only when the invocation ends, the actors are opened with a
deferring gate (:mod:`runtimes.aws.gate`): their commits become durable in groups —
before a tool that is not ``safe`` runs, before mail leaves a mailbox, and as the actor
is parked (with the lease's release). An answer reporting state that did not become
durable (the lease was taken over, DynamoDB failed) is replaced by ``503
storage_failed``: nothing is answered that a later holder would not find.

An event that is none of these, or malformed, is refused with a 4xx and
``{error: {code, message}}`` before any host exists, so nothing is written; bad actor
ids and oversized bodies are refused by the app before it opens an actor.

:class:`ActorFunction` is the handler object; :func:`lambda_handler` builds one from the
environment on first use (``PERDURE_FUNCTION``: ``module:factory`` returning
:class:`FunctionSettings`, by default :func:`runtimes.aws.environment.settings`), or a
:class:`MisconfiguredFunction` that answers ``503`` when the configuration is refused.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import json
import logging
import os
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, cast
from urllib.parse import parse_qs

import httpx
from fastapi import FastAPI
from mangum import Mangum
from mangum.protocols import HTTPCycle
from mangum.types import LambdaContext as MangumContext

from core import Clock
from core.errors import PerdureError, SessionClosed, SessionPoisoned
from core.jsonvalue import loads_unique
from runtimes.actor.api import ApiConfig, create_app
from runtimes.actor.api.app import rebind_app
from runtimes.actor.api.errors import error_body
from runtimes.actor.clock import SystemClock
from runtimes.actor.config import ActorConfig
from runtimes.actor.errors import ActorLocked, InvalidActorId
from runtimes.actor.ids import check_actor_id
from runtimes.aws.alarms import WAKE_EVENT, WakeSchedule
from runtimes.aws.config import SETTINGS_FACTORY, Misconfigured
from runtimes.aws.due import wait_for_due_commit, wait_until_quiet
from runtimes.aws.host import AwsActorStore, AwsHost
from runtimes.aws.lease import DEFAULT_LEASE_MS
from runtimes.aws.mailbox import Mailbox, mailed_accepted, mailed_state
from runtimes.aws.pending import PendingWakes, arm_durably
from runtimes.aws.resources import AwsResources

__all__ = [
    "DEFAULT_FACTORY",
    "DUE_WINDOW_MS",
    "ActorFunction",
    "FunctionSettings",
    "LambdaContext",
    "MisconfiguredFunction",
    "lambda_handler",
]

_log = logging.getLogger("perdure.aws")

DUE_WINDOW_MS = 60_000
"""The Scheduler's precision: a wake finds deadlines up to this far ahead due."""

REQUEST_EVENT = "request"
SWEEP_EVENT = "sweep"

_SUBMISSIONS = re.compile(r"/v1/actors/([A-Za-z0-9_-]{1,64})/submissions")
_BY_REQUEST = re.compile(
    r"/v1/actors/([A-Za-z0-9_-]{1,64})/conversations/([0-9]{1,19})/submissions/by-request"
)
_DRAIN_ROUNDS = 10  # drain, settle, drain again: mail that arrives meanwhile is taken too


class LambdaContext(Protocol):
    """The part of Lambda's context object the handler reads."""

    @property
    def aws_request_id(self) -> str: ...

    def get_remaining_time_in_millis(self) -> int: ...


@dataclass(frozen=True)
class FunctionSettings:
    """What the function serves with. ``workdir`` is the container's ``/tmp`` (working
    copies stay there for warm invocations). ``lease_now`` is the lease clock (default:
    ``clock.now``). ``reserve_ms``: remaining invocation time kept for parking, not
    spent waiting for work to settle."""

    resources: AwsResources
    actor: ActorConfig
    api: ApiConfig
    workdir: Path
    alarms: WakeSchedule | None = None
    clock: Clock = field(default_factory=SystemClock)
    lease_now: Callable[[], int] | None = None
    lease_ms: int = DEFAULT_LEASE_MS
    reserve_ms: int = 10_000


def _refusal(status: int, code: str, message: str) -> dict[str, Any]:
    """A refused HTTP event, as every Lambda HTTP integration reads a response."""
    return {
        "statusCode": status,
        "headers": {"content-type": "application/json"},
        "body": json.dumps(error_body(code, message)),
        "isBase64Encoded": False,
    }


def _direct_refusal(status: int, code: str, message: str) -> dict[str, Any]:
    return {"status": status, **error_body(code, message)}


class ActorFunction:
    """The Lambda handler: ``function(event, context)`` (sync, as Lambda calls it) or
    ``await function.invoke(event, context)``."""

    def __init__(self, settings: FunctionSettings) -> None:
        self.settings = settings
        self._served: FastAPI | None = None
        self._serving = 0  # invocations in flight on this object

    def __call__(self, event: Any, context: LambdaContext) -> dict[str, Any]:
        return asyncio.run(self.invoke(event, context))

    async def invoke(self, event: Any, context: LambdaContext) -> dict[str, Any]:
        self._serving += 1
        try:
            return await self._dispatch(event, context)
        finally:
            self._serving -= 1

    async def _dispatch(self, event: Any, context: LambdaContext) -> dict[str, Any]:
        if not isinstance(event, dict):
            return _refusal(400, "bad_event", "the event is not a JSON object")
        kind = event.get("perdure")
        if kind is None:
            return await self._http(event, context)
        if kind == WAKE_EVENT:
            return await self._wake(event, context)
        if kind == REQUEST_EVENT:
            return await self._request(event, context)
        if kind == SWEEP_EVENT:
            return await self._sweep(context)
        return _direct_refusal(400, "bad_event", f"unknown event kind {kind!r}")

    # ------------------------------------------------------------------ events

    async def _http(self, event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
        host = self._host(context)
        app = self._app(host, context)
        adapter = Mangum(app, lifespan="off")
        try:
            # Mangum only passes the context on, in the scope (its protocol names more).
            handler = adapter.infer(event, cast(MangumContext, context))
            scope, body = handler.scope, handler.body
        except Exception as e:  # Mangum raises whatever a malformed event trips over
            return _refusal(400, "bad_event", f"not an HTTP event Mangum can read: {e!r}")
        async with self._invocation(host, app, context):
            cycle = HTTPCycle(scope, body)
            await cycle.run(app)
            applied = host.aws_store.applied()  # what the answer may report
            status, headers, content = cycle.status, cycle.headers, cycle.body
            mailed: dict[str, Any] | None = None
            if status == 423:
                mailed = await self._mail(scope["method"], scope["path"], body, context)
            if scope["method"] == "GET" and _not_there_yet(status, content):
                query = scope.get("query_string", b"").decode("utf-8", "replace")
                mailed = await self._mailed(scope["path"], query)
            if mailed is not None:
                status = 200 if scope["method"] == "GET" else 202
                content = json.dumps(mailed).encode()
                headers = [[b"content-type", b"application/json"]]
        lost = host.aws_store.not_durable(applied)
        if lost:
            return _refusal(503, "storage_failed", _lost_message(lost))
        response: dict[str, Any] = handler({"status": status, "headers": headers, "body": content})
        return response

    async def _request(self, event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
        method, path, body = event.get("method"), event.get("path"), event.get("body")
        if not isinstance(method, str) or not isinstance(path, str) or not path.startswith("/"):
            return _direct_refusal(400, "bad_event", "a request needs a method and a /path")
        host = self._host(context)
        app = self._app(host, context)
        transport = httpx.ASGITransport(app=app)
        headers = {"authorization": f"Bearer {self.settings.api.token}"}
        async with (
            self._invocation(host, app, context),
            httpx.AsyncClient(transport=transport, base_url="http://lambda") as client,
        ):
            kwargs: dict[str, Any] = {} if body is None else {"json": body}
            r = await client.request(method, path, headers=headers, **kwargs)
            applied = host.aws_store.applied()  # what the answer may report
            if r.status_code == 423:
                raw = json.dumps(body).encode()
                mailed = await self._mail(method.upper(), path, raw, context)
                if mailed is not None:
                    return {"status": 202, "body": mailed}
            if method.upper() == "GET" and _not_there_yet(r.status_code, r.content):
                found = await self._mailed(r.request.url.path, r.request.url.query.decode())
                if found is not None:
                    return {"status": 200, "body": found}
        lost = host.aws_store.not_durable(applied)
        if lost:
            return _direct_refusal(503, "storage_failed", _lost_message(lost))
        try:
            answer: Any = r.json()
        except ValueError:
            answer = r.text
        out = {"status": r.status_code, "body": answer}
        if "retry-after" in r.headers:  # a 423: the lease is held elsewhere
            out["retry_after"] = r.headers["retry-after"]
        return out

    async def _wake(self, event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
        try:
            actor = check_actor_id(event.get("actor"))
        except InvalidActorId as e:
            return _direct_refusal(400, "invalid_actor", str(e))
        host = self._host(context)
        async with self._invocation(host, self._app(host, context), context):
            try:
                opened = await host.wake(actor)
            except ActorLocked:
                # This schedule fired and deleted itself, and the holder may leave the
                # schedule alone when its deadline did not change (AwsHost.park): arm
                # a wake now, which comes back once the holder has let go.
                s = self.settings
                if s.alarms is not None:
                    now = s.clock.now()
                    await arm_durably(s.alarms, s.resources, actor, now, now)
                return {"status": "busy", "actor": actor}
            if opened:
                await self._run_due(host, actor, context)
        if host.aws_store.lost:  # its schedule is armed: the next wake does the work again
            return {"status": "lost", "actor": actor}
        return {"status": "woken" if opened else "unknown", "actor": actor}

    async def _sweep(self, context: LambdaContext) -> dict[str, Any]:
        """Wake every actor whose park could not arm its schedule (the wake's own park
        arms it); a record goes once its actor was woken without recording a new one."""
        pending = PendingWakes(self.settings.resources)
        woken: list[str] = []
        for wake in await pending.listed():
            if self._budget_s(context) <= 0:
                break  # the next sweep takes the rest
            out = await self._wake({"actor": wake.actor}, context)
            if out["status"] in ("woken", "unknown") and await pending.clear(wake):
                woken.append(wake.actor)
        return {"status": "swept", "woken": woken}

    # ------------------------------------------------------------------ the invocation

    def _host(self, context: LambdaContext) -> AwsHost:
        s = self.settings
        store = AwsActorStore(
            s.resources,
            owner=context.aws_request_id,
            workdir=s.workdir,
            lease_now=s.lease_now or s.clock.now,
            lease_ms=s.lease_ms,
            # Every answer leaves when the invocation ends, after the actors it held
            # were parked (their commits flushed), so commits may be grouped until then.
            defer=True,
        )
        return AwsHost(s.actor, store=store, clock=s.clock, alarms=s.alarms)

    @asynccontextmanager
    async def _invocation(
        self, host: AwsHost, app: FastAPI, context: LambdaContext
    ) -> AsyncIterator[None]:
        """Serve the block, let the actors' work settle within the time left, drain their
        mailboxes, park them (schedules armed) and release their leases — parked also
        when the block failed. Mail that slipped in after the last drain gets a wake."""
        await host.start()
        held: set[str] = set()
        try:
            yield
            await self._settle(host, context)
            for _ in range(_DRAIN_ROUNDS):
                # Out of time: take no new work; the mail keeps, and a wake takes it.
                if self._budget_s(context) <= 0 or not await self._drain(host, app):
                    break
                await self._settle(host, context)
        finally:
            held = set(host.active)
            try:
                await host.park_all()
            finally:
                await host.close()
        await self._wake_for_mail(held)

    async def _mail(
        self, method: str, path: str, raw: bytes, context: LambdaContext
    ) -> dict[str, Any] | None:
        """A submission the app refused because another invocation holds the actor goes
        to its mailbox; the answer is the handle (re-submit with its ``request_id`` to
        read the submission once the holder drained it). ``None``: not a submission."""
        match = _SUBMISSIONS.fullmatch(path)
        if method != "POST" or match is None:
            return None
        try:
            body = loads_unique(raw)  # the app's own gate: a key named twice is no mail
        except ValueError:
            return None
        if not isinstance(body, dict):
            return None
        actor = match.group(1)
        request_id = body.get("request_id") or f"mail-{context.aws_request_id}"
        body["request_id"] = request_id
        now = self.settings.clock.now()
        await Mailbox(self.settings.resources).post(actor, body, request_id=request_id, now=now)
        if self.settings.alarms is not None:
            # If the holder released before it saw this mail, this wake drains it.
            await arm_durably(self.settings.alarms, self.settings.resources, actor, now, now)
        return mailed_accepted(body, request_id)

    async def _mailed(self, path: str, query: str) -> dict[str, Any] | None:
        """A poll by request id that the app could not answer (nothing admitted under it
        yet, or the actor held elsewhere): the mailed submission's state when it waits in
        the actor's mailbox, else ``None`` (the 404 or 423 stands)."""
        match = _BY_REQUEST.fullmatch(path)
        if match is None:
            return None
        request_ids = parse_qs(query).get("request_id", [])
        if len(request_ids) != 1:
            return None
        mail = await Mailbox(self.settings.resources).get(match.group(1), request_ids[0])
        if mail is None or mailed_accepted(mail.body, mail.request_id)["conversation_id"] != int(
            match.group(2)
        ):
            return None
        return mailed_state(mail)

    async def _drain(self, host: AwsHost, app: FastAPI) -> int:
        """Submit every mailed submission of the held actors through the app; return how
        many left the mailbox."""
        mailbox = Mailbox(self.settings.resources)
        taken = 0
        transport = httpx.ASGITransport(app=app)
        headers = {"authorization": f"Bearer {self.settings.api.token}"}
        async with httpx.AsyncClient(
            transport=transport, base_url="http://lambda", headers=headers
        ) as client:
            for name in sorted(host.active):
                done = []
                for mail in await mailbox.pending(name):
                    r = await client.post(f"/v1/actors/{name}/submissions", json=mail.body)
                    if r.status_code != 202 and _retry_later(r):
                        continue
                    if r.status_code != 202:
                        _log.warning("mailed submission %s refused: %s", mail.request_id, r.text)
                    done.append(mail.request_id)
                if not done:
                    continue
                try:
                    # The mail is the submission's only record until its admission is
                    # durable: with commits deferred, flush before the mail goes.
                    await host.flush(name)
                except PerdureError as e:
                    _log.warning("actor %s: mail kept, its admission is not durable: %r", name, e)
                    continue
                for request_id in done:
                    await mailbox.remove(name, request_id)
                taken += len(done)
        return taken

    async def _wake_for_mail(self, actors: set[str]) -> None:
        if self.settings.alarms is None:
            return
        mailbox = Mailbox(self.settings.resources)
        for name in sorted(actors):
            if await mailbox.pending(name):
                now = self.settings.clock.now()
                await arm_durably(self.settings.alarms, self.settings.resources, name, now, now)

    def _app(self, host: AwsHost, context: LambdaContext) -> FastAPI:
        """The container's app, bound to this invocation's host (invocations of one
        container run one at a time; building an app per invocation cost more than
        serving it)."""
        if self._serving > 1:  # overlapping invocations (tests, not Lambda): one each
            return create_app(host, self._api(context))
        if self._served is None:
            self._served = create_app(host, self._api(context))
        else:
            rebind_app(self._served, host, self._api(context))
        return self._served

    def _api(self, context: LambdaContext) -> ApiConfig:
        """The API for this invocation: a long poll (submission or deltas) waits no longer
        than the time left before the reserve, so it answers before Lambda's deadline; the
        watch stream is refused (Lambda answers whole responses: it would be held until
        the deadline), so clients watch by the long poll."""
        api = self.settings.api
        budget = min(api.max_wait_s, self._budget_s(context))
        return dataclasses.replace(api, max_wait_s=budget, streams=False)

    def _budget_s(self, context: LambdaContext) -> float:
        return max(0.0, (context.get_remaining_time_in_millis() - self.settings.reserve_ms) / 1000)

    async def _settle(self, host: AwsHost, context: LambdaContext) -> None:
        for name in sorted(host.active):
            entry = host.current(name)
            if entry is None:
                continue
            try:
                # Quiet, not idle: a call waiting for a decision must not hold the
                # invocation (it would wait out the budget and come back at once).
                await wait_until_quiet(entry.harness, self._budget_s(context))
            except TimeoutError:
                # Out of time: parked with work left, it must come back at once.
                host.unfinished.add(name)
            except SessionPoisoned as e:
                # A commit failed — fenced off (another invocation took the lease while
                # this one was paused) or uncertain. What was answered stays answered;
                # the actor's work is the next holder's, rebuilt from what is durable.
                _log.warning("actor %s stopped: %s", name, e)

    async def _run_due(self, host: AwsHost, actor: str, context: LambdaContext) -> None:
        """Let every deadline due within :data:`DUE_WINDOW_MS` pass in this invocation:
        wait on the clock for it, then for the work it released to commit (each pass
        needs a commit or the clock to move, so this ends). Out of time with work left,
        the actor is parked unfinished: its wake is immediate."""
        clock = self.settings.clock
        while True:
            entry = host.current(actor)
            if entry is None:
                return
            await self._settle(host, context)
            wake = entry.harness.next_wake()
            if wake is None or wake > clock.now() + DUE_WINDOW_MS or actor in host.unfinished:
                return
            if wake > clock.now():
                if not await _until(clock, wake, self._budget_s(context)):
                    return
                continue
            try:
                committed = await wait_for_due_commit(entry.harness, self._budget_s(context))
            except (SessionPoisoned, SessionClosed) as e:
                _log.warning("actor %s stopped: %s", actor, e)
                return
            if not committed:
                host.unfinished.add(actor)
                return


def _lost_message(actors: list[str]) -> str:
    return (
        f"what this request did on actor {', '.join(actors)} could not be made durable"
        " (another invocation took the actor over, or DynamoDB failed), so it is"
        " dropped and the actor carries on from its last durable state. Send the request"
        " again (a submission with the same request_id, so it is accepted once)"
    )


# The app's answers to a poll whose submission may wait in the mailbox: nothing admitted
# under that request id (or no actor yet), or the actor held by another invocation. A
# refusal of the caller (401, 403) never reads the mailbox.
_NOT_THERE_YET = {(404, "not_found"), (404, "unknown_actor"), (423, "actor_locked")}


def _not_there_yet(status: int, content: bytes) -> bool:
    if status not in (404, 423):
        return False
    try:
        code = json.loads(content)["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return False
    return (status, code) in _NOT_THERE_YET


def _retry_later(r: httpx.Response) -> bool:
    """A drain refusal that a later drain may not get: busy conversation, locked, 5xx."""
    if r.status_code >= 500 or r.status_code == 423:
        return True
    try:
        code = r.json()["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return False
    return bool(code == "conversation_busy")


async def _until(clock: Clock, when: int, timeout_s: float) -> bool:
    """Wait until ``clock`` reaches ``when`` (``False``: the timeout came first)."""
    reached: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def arrive() -> None:
        if not reached.done():
            reached.set_result(None)

    handle = clock.call_at(when, arrive)
    try:
        await asyncio.wait_for(reached, timeout_s)
    except TimeoutError:
        return False
    finally:
        handle.cancel()
    return True


DEFAULT_FACTORY = "runtimes.aws.environment:settings"


class MisconfiguredFunction:
    """What a container whose configuration was refused at its cold start serves: every
    event answered ``503 misconfigured`` with the reason, before any host exists — no
    lease taken, nothing written."""

    def __init__(self, message: str) -> None:
        self.message = message

    def __call__(self, event: Any, context: LambdaContext) -> dict[str, Any]:
        if isinstance(event, dict) and "perdure" in event:
            return _direct_refusal(503, "misconfigured", self.message)
        return _refusal(503, "misconfigured", self.message)


_function: ActorFunction | MisconfiguredFunction | None = None


def lambda_handler(event: Any, context: LambdaContext) -> dict[str, Any]:
    """The entry point named in the function's configuration. ``PERDURE_FUNCTION`` names
    the factory (``package.module:function``, default :data:`DEFAULT_FACTORY`) that
    returns the :class:`FunctionSettings`; it runs once per container. A configuration
    it refuses (:class:`~runtimes.aws.config.Misconfigured`) is logged once, as one line
    naming the template parameters to fix, and every request is answered ``503``."""
    global _function
    if _function is None:
        _function = _cold_start()
    return _function(event, context)


def _cold_start() -> ActorFunction | MisconfiguredFunction:
    try:
        return ActorFunction(_factory()())
    except Misconfigured as e:
        _log.error("%s", e)
        return MisconfiguredFunction(str(e))


def _factory() -> Callable[[], FunctionSettings]:
    spec = os.environ.get(SETTINGS_FACTORY.variable, "").strip() or DEFAULT_FACTORY
    module, _, name = spec.partition(":")
    try:
        factory = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError) as e:
        raise Misconfigured(
            [f"{SETTINGS_FACTORY.describe()}: {spec!r} is not an importable module:function ({e})"]
        ) from None
    if not callable(factory):
        raise Misconfigured([f"{SETTINGS_FACTORY.describe()}: {spec!r} is not callable"])
    return cast(Callable[[], FunctionSettings], factory)
