"""The crash matrix's scenario, run as its own process on one host, killed at one point.

``python -m tests.recovery.crash_scenario SPEC_JSON`` where the spec names the ``host``
(``local``, ``do`` or ``lambda``), the ``point`` (:mod:`tests.recovery.crash_points`),
the ``attempt`` (``crash``: run until the point, SIGKILL there; ``recover``: a fresh
process on the same storage that runs the same client script to idle and reports) and
where things live (``dir``, the sandbox server, the moto server).

The scenario is one conversation turn with everything in it: the input ``r1`` (a manual
compaction asked for while it runs); a first tool round with a ``safe`` and an
``unsafe`` tool (started at their intent, their tasks kept in memory); a second with a
``recoverable`` tool (on a real sandbox server); a third round with a sub-agent and a
reminder; the answer; the reminder firing and being answered; a fork with
its own input ``f1``; an input ``r2`` whose slow tool is aborted; an input ``r3`` whose
tool waits for approval, which the client gives; a schedule ``every: 60s`` whose first
occurrence the client brings due by moving the process's virtual clock (no real
waiting), answered once, the next occurrence armed. On the Lambda host a
mailed input ``mail-1`` is drained first. The client script is idempotent (it looks
before it acts, and resubmits with the same request ids), so the recovery process just
runs it again.

Every line printed is JSON. Files in ``dir``: ``effects.log`` (tool effects, one line
each, appended and flushed before the kill can come), ``commits.jsonl`` (every
submission each returned commit wrote, for the cross-process "settled once" check).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, cast

from pydantic import BaseModel

from core import JsonObject
from core.env import ExecutionEnv
from core.faux import FauxModel, FauxState, faux_message, faux_tool_call
from core.harness import (
    AssistantMessage,
    EnvFactory,
    Harness,
    HarnessSettings,
    ModelRequest,
    ToolContext,
    ToolResultMessage,
    UserMessage,
    define_extension,
    define_tool,
    reminders_extension,
)
from core.harness.compaction import COMPACTION
from core.harness.reminders import REMINDER
from core.harness.schedules import SCHEDULE
from core.harness.settings import CompactionSettings
from core.harness.subagents import subagent_tool
from core.records import SubmissionRecord
from core.storage import Storage
from core.storage.port import Write
from core.testing.consistency import check_consistency, load_world
from core.testing.wrappers import DelegatingStorage
from remote_env.auth import mint_token
from remote_env.client import RemoteEnv, RetryPolicy
from runtimes.actor import ActorConfig, ActorPool
from runtimes.actor.clock import SystemClock
from runtimes.actor.sqlite import Sqlite3Database
from tests.recovery.crash_points import CrashPoint, point_named
from tests.remote_env.support import SECRET

LEASE_MS = 60_000
AGENT: JsonObject = {
    "model": "faux/faux-1",
    "tools": ["safe_t", "unsafe_t", "rec_t", "slow_t", "ask_t", "subagent", "remind"],
}
REC_COMMAND = "echo run >> rec_effects.txt; sleep 0.4; echo rec-output"


Request = Callable[[], AbstractAsyncContextManager[Any]]
"""One API request's scope: on the Durable Object host, ``actor.use()`` (which arms the
alarm before the request writes); elsewhere nothing."""


class VirtualClock(SystemClock):
    """The wall clock plus an offset the client script moves forward (:meth:`advance_to`),
    firing the timers that became due: virtual minutes without real waiting."""

    def __init__(self) -> None:
        self.offset_ms = 0
        self._timers: set[_Timer] = set()

    def now(self) -> int:
        return super().now() + self.offset_ms

    def call_at(self, when: int, callback: Callable[[], None]) -> _Timer:
        timer = _Timer(when, callback, self._timers)
        timer.real = super().call_at(when, timer.run)  # the delay is taken from now()
        self._timers.add(timer)
        return timer

    def advance_to(self, when: int) -> None:
        self.offset_ms += max(0, when - self.now())
        loop = asyncio.get_running_loop()
        for timer in list(self._timers):
            if timer.when <= self.now():
                loop.call_soon(timer.run)


class _Timer:
    def __init__(self, when: int, callback: Callable[[], None], pending: set[_Timer]) -> None:
        self.when, self.callback, self.pending = when, callback, pending
        self.real: Any = None

    def run(self) -> None:
        if self in self.pending:
            self.pending.discard(self)
            self.callback()

    def cancel(self) -> None:
        self.pending.discard(self)
        if self.real is not None:
            self.real.cancel()


def say(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


class Spec:
    def __init__(self, raw: dict[str, Any]) -> None:
        self.host: str = raw["host"]
        self.point: CrashPoint | None = point_named(raw["point"]) if raw.get("point") else None
        self.attempt: str = raw["attempt"]
        self.dir = Path(raw["dir"])
        self.sandbox_url: str = raw["sandbox_url"]
        self.sandbox_root = Path(raw["sandbox_root"])
        self.moto: str | None = raw.get("moto")
        self.lease_offset_ms: int = raw.get("lease_offset_ms", 0)
        self.trace: bool = raw.get("trace", False)
        self.workspace: str = raw["workspace"]
        self.actor: str = raw.get("actor", self.workspace)
        self.clock = VirtualClock()


class Killer:
    """Where the process dies: :meth:`at` for effect points, :meth:`commit` for commit
    points (called by :class:`KillPointStorage`)."""

    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.point = spec.point if spec.attempt == "crash" else None
        self.seen = 0
        self.armed_durable = False  # Lambda: die after the DynamoDB transaction

    def die(self) -> None:
        assert self.point is not None
        say(reached=self.point.name)
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)

    def at(self, name: str) -> None:
        if self.point is not None and self.point.match is None and self.point.name == name:
            self.seen += 1
            if self.seen == self.point.nth:
                self.die()

    async def pause_at(self, name: str) -> None:
        """Hold here until the test creates ``dir/resume`` (another holder meanwhile
        takes over the lease this process still believes it holds)."""
        if self.point is None or self.point.name != name:
            return
        self.seen += 1
        if self.seen != self.point.nth:
            return
        say(paused=name)
        # Another process creates the file: nothing in this one could set an Event.
        while not (self.spec.dir / "resume").exists():  # noqa: ASYNC110
            await asyncio.sleep(0.02)
        say(resumed=name)

    def commit_matches(self, writes: Sequence[Write]) -> bool:
        point = self.point
        if point is None or point.match is None or not point.match(writes):
            return False
        self.seen += 1
        return self.seen == point.nth


class KillPointStorage(DelegatingStorage):
    """Recognises the point's commit by its write set and dies before or after it."""

    def __init__(self, inner: Storage, killer: Killer, log: Path, trace: Path | None) -> None:
        self.inner = inner
        self.killer = killer
        self.log = log
        self.trace = trace

    async def commit(self, writes: Sequence[Write]) -> int:
        batch = list(writes)
        hit = self.killer.commit_matches(batch)
        point = self.killer.point
        if hit and point is not None and point.when == "before":
            self.killer.die()
        if hit and point is not None and point.name.startswith("lambda.durable_not_applied"):
            self.killer.armed_durable = True
        try:
            seq = await self.inner.commit(batch)
        except Exception as e:
            say(commit_error=type(e).__name__, message=str(e)[:200])
            raise
        subs = [[w.id, w.status, w.request_id] for w in batch if isinstance(w, SubmissionRecord)]
        with self.log.open("a") as f:
            f.write(json.dumps({"seq": seq, "subs": subs}) + "\n")
        if self.trace is not None:
            with self.trace.open("a") as f:
                f.write(json.dumps({"seq": seq, "writes": [_describe(w) for w in batch]}) + "\n")
        if hit and point is not None and point.when == "after":
            self.killer.die()
        return seq


def _describe(w: Write) -> str:
    name = type(w).__name__
    state = getattr(w, "state", None)
    if state is not None:
        cp = getattr(state, "checkpoint", None)
        phase = cp.get("phase") if isinstance(cp, dict) else None
        return f"{name}:{getattr(w, 'kind', '')}:{state.status}:{phase}"
    return f"{name}:{getattr(w, 'kind', getattr(w, 'status', ''))}"


class KillingStore:
    """An ActorStore whose leases hand out :class:`KillPointStorage`."""

    def __init__(self, inner: Any, wrap: Any) -> None:
        self._inner = inner
        self._wrap = wrap

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def exists(self, name: str) -> bool:
        return bool(self._inner.exists(name))

    async def open(self, name: str, *, create: bool) -> Any:
        lease = await self._inner.open(name, create=create)
        return _Lease(lease, self._wrap(lease.storage))


class _Lease:
    def __init__(self, inner: Any, storage: Storage) -> None:
        self._inner = inner
        self.storage = storage

    @property
    def fresh(self) -> bool:
        return bool(self._inner.fresh)

    async def release(self, *, discard: bool) -> None:
        await self._inner.release(discard=discard)


# --------------------------------------------------------------------------- the agent


class Note(BaseModel):
    text: str = ""


def _text(message: Any) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return "".join(getattr(b, "text", "") for b in content)


def model(killer: Killer) -> Any:
    async def step(request: ModelRequest, state: FauxState) -> AssistantMessage:
        if not request.tools:  # a summary request
            return faux_message("summary of the conversation so far")
        messages = request.messages
        last = messages[-1]
        if isinstance(last, UserMessage):
            text = _text(last)
            if text == "go":
                killer.at("model.request")
                await killer.pause_at("lambda.lease_expiry")
                # A round of plain calls (their tasks kept in memory), then one with the
                # recoverable call (its task stored: it asks the sandbox when recovered).
                return faux_message(
                    "Working on it: a search and a booking, at once, then a command.",
                    faux_tool_call("safe_t", {"text": "a"}, id="call_safe"),
                    faux_tool_call("unsafe_t", {"text": "b"}, id="call_unsafe"),
                )
            if text == "slow":
                return faux_message(faux_tool_call("slow_t", {"text": "d"}, id="call_slow"))
            if text == "ask":
                return faux_message(faux_tool_call("ask_t", {"text": "e"}, id="call_ask"))
            if text == "sub task":
                return faux_message("sub answer")
            return faux_message(f"noted: {text}")
        batch: list[str] = []
        for m in reversed(messages):
            if not isinstance(m, ToolResultMessage):
                break
            batch.append(m.tool_call_id)
        if "call_safe" in batch:
            return faux_message(faux_tool_call("rec_t", {"text": "c"}, id="call_rec"))
        if "call_rec" in batch:
            return faux_message(
                faux_tool_call("subagent", {"task": "sub task"}, id="call_sub"),
                faux_tool_call("remind", {"message": "ping", "after": 0.3}, id="call_remind"),
            )
        return faux_message("go done")

    return step


def extension(killer: Killer, effects: Path, spec: Spec) -> Any:
    def effect(line: str) -> None:
        with effects.open("a") as f:
            f.write(line + "\n")

    async def safe_t(args: Note, ctx: ToolContext) -> str:
        effect(f"safe start {ctx.task_id}")
        killer.at("tool.effect.safe")
        await asyncio.sleep(0.05)
        effect(f"safe end {ctx.task_id}")
        return "safe done"

    async def unsafe_t(args: Note, ctx: ToolContext) -> str:
        effect(f"unsafe start {ctx.task_id}")
        killer.at("tool.effect.unsafe")
        await asyncio.sleep(0.05)
        effect(f"unsafe end {ctx.task_id}")
        return "unsafe done"

    async def rec_t(args: Note, ctx: ToolContext) -> str:
        run = asyncio.ensure_future(ctx.env.run_command(REC_COMMAND, op=ctx.op))
        marker = spec.sandbox_root / spec.workspace / "rec_effects.txt"
        # The sandbox (another process) writes the marker as the command starts.
        while not run.done() and not marker.exists():  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        killer.at("tool.effect.recoverable.running")
        result = await run
        killer.at("tool.effect.recoverable.done")
        return result.output.strip()

    async def ask_t(args: Note, ctx: ToolContext) -> str:
        effect(f"ask start {ctx.task_id}")
        effect(f"ask end {ctx.task_id}")
        return "ask done"

    async def slow_t(args: Note, ctx: ToolContext) -> str:
        effect(f"slow start {ctx.task_id}")
        await ctx.signal.wait()
        return "slow stopped"

    tools = [
        define_tool("safe_t", description="s", parameters=Note, execute=safe_t, replay="safe"),
        define_tool("unsafe_t", description="u", parameters=Note, execute=unsafe_t),
        define_tool("rec_t", description="r", parameters=Note, execute=rec_t, replay="recoverable"),
        define_tool("slow_t", description="w", parameters=Note, execute=slow_t, replay="safe"),
        define_tool("ask_t", description="a", parameters=Note, execute=ask_t, approval="always"),
        subagent_tool(),
    ]
    return define_extension("matrix", tools=tools)


def env_provider(spec: Spec) -> Any:
    @contextlib.asynccontextmanager
    async def provide(actor: str) -> AsyncIterator[EnvFactory]:
        retry = RetryPolicy(attempts=40, initial_delay=0.02, max_delay=0.2)
        token = mint_token(SECRET, spec.workspace, 3600)
        async with RemoteEnv(spec.sandbox_url, token, retry=retry) as env:
            yield lambda conversation_id, cwd: cast(ExecutionEnv, env)

    return provide


def actor_config(spec: Spec, killer: Killer) -> ActorConfig:
    faux = FauxModel(
        fallback=model(killer), tokens_per_second=120, sleep=asyncio.sleep, record_requests=False
    )
    settings = HarnessSettings(compaction=CompactionSettings(keep_recent_tokens=1))
    return ActorConfig(
        models=faux,
        extensions=[extension(killer, spec.dir / "effects.log", spec), reminders_extension()],
        env=env_provider(spec),
        settings=settings,
        default_agent=dict(AGENT),
    )


# --------------------------------------------------------------------------- hosts


class Rig:
    """One host's pool on this case's storage, plus what the checks read afterwards."""

    pool: ActorPool
    db_path: Path

    async def close(self) -> None:
        await self.pool.close()


async def local_rig(spec: Spec, config: ActorConfig, wrap: Any) -> Rig:
    from runtimes.local.host import ActorHost, HostConfig

    rig = Rig()
    data = spec.dir / "data"
    host = ActorHost(
        HostConfig(
            data_dir=data,
            actor=config,
            clock=spec.clock,
            idle_evict_s=3600,
            recover_on_start=False,
        )
    )
    await host.start()
    host.store = KillingStore(host.store, wrap)
    rig.pool, rig.db_path = host, data / f"{spec.actor}.sqlite"
    return rig


class DoRig(Rig):
    home: Any


async def do_rig(spec: Spec, config: ActorConfig, wrap: Any) -> DoRig:
    from runtimes.cloudflare.actor import DurableActor
    from tests.cloudflare.standin import DurableObjectHome

    rig = DoRig()
    rig.home = DurableObjectHome(spec.dir / "do.sqlite", alarm_file=spec.dir / "do.alarm")
    actor = DurableActor(
        rig.home.open(),
        config,
        clock=spec.clock,
        alarm_report=lambda report: say(alarm_report=str(report)),
        actor=spec.actor,
    )
    actor.store = KillingStore(actor.store, wrap)
    rig.pool, rig.db_path = actor, spec.dir / "do.sqlite"
    return rig


class LambdaRig(Rig):
    resources: Any
    host: Any


class _Watched:
    """A boto3 client whose chosen calls hit the killer."""

    def __init__(self, inner: Any, killer: Killer) -> None:
        self._inner = inner
        self._killer = killer

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def transact_write_items(self, **kwargs: Any) -> Any:
        out = self._inner.transact_write_items(**kwargs)
        if self._killer.armed_durable:
            self._killer.die()  # durable in DynamoDB, never applied to the working copy
        return out

    def put_object(self, **kwargs: Any) -> Any:
        out = self._inner.put_object(**kwargs)
        if "/snap/" in str(kwargs.get("Key", "")):
            self._killer.at("lambda.snapshot_upload")  # in S3; the head does not know it
        return out


async def lambda_rig(spec: Spec, config: ActorConfig, wrap: Any, killer: Killer) -> LambdaRig:
    import boto3

    import runtimes.aws.host as aws_host
    from runtimes.aws import AwsResources
    from runtimes.aws.host import AwsActorStore, AwsHost
    from runtimes.aws.replica import open_actor_replica
    from tests.aws.conftest import BUCKET, REGION, TABLE

    # Snapshots every few commits, so the scenario takes several (the default is 200).
    aws_host.open_actor_replica = functools.partial(  # type: ignore[assignment]
        open_actor_replica, snapshot_every=6
    )
    rig = LambdaRig()
    dynamodb = boto3.client("dynamodb", region_name=REGION, endpoint_url=spec.moto)
    s3 = boto3.client("s3", region_name=REGION, endpoint_url=spec.moto)
    rig.resources = AwsResources(_Watched(dynamodb, killer), _Watched(s3, killer), TABLE, BUCKET)
    clock = SystemClock()  # the lease's: a virtual minute must not expire it
    workdir = spec.dir / f"tmp-{spec.attempt}-{spec.lease_offset_ms}"  # a cold container
    workdir.mkdir(exist_ok=True)
    store = AwsActorStore(
        rig.resources,
        owner=f"invocation-{spec.attempt}-{spec.lease_offset_ms}",
        workdir=workdir,
        lease_now=lambda: clock.now() + spec.lease_offset_ms,
        lease_ms=LEASE_MS,
    )
    host = AwsHost(config, store=store, clock=spec.clock)
    host.store = KillingStore(host.store, wrap)
    rig.pool, rig.host, rig.db_path = host, host, workdir / f"{spec.actor}.sqlite"
    return rig


# --------------------------------------------------------------------------- the client


async def _world(h: Harness) -> Any:
    return await load_world(h.session.storage)


async def _until(check: Any, timeout: float = 20.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await check():
        if loop.time() > deadline:
            raise TimeoutError(f"waited {timeout}s for {check.__name__}")
        await asyncio.sleep(0.02)


async def drive(h: Harness, spec: Spec, request: Request) -> None:
    """The client script: idempotent, so a recovery process runs it again from the top.
    Every call that writes is one API request (``request()``); waits are outside any."""
    root = await h.root(agent=dict(AGENT))
    async with request():
        s1 = await root.submit("go", request_id="r1")

    async def tools_running_or_settled() -> bool:
        record = await h.session.storage.submission(s1.id)
        log = spec.dir / "effects.log"
        return (record is not None and record.status in ("done", "unanswered")) or (
            log.exists() and "unsafe start" in log.read_text()
        )

    await _until(tools_running_or_settled)
    world = await _world(h)
    if not any(t.kind == COMPACTION for t in world.tasks.values()):
        # Asked while the first tool round runs: the summary waits for its boundary.
        async with request():
            await root.compact()
    await asyncio.wait_for(s1.wait(), 30)

    async def reminders_answered() -> bool:
        w = await _world(h)
        timers = [t for t in w.tasks.values() if t.kind == REMINDER]
        fired = [s for s in w.submissions.values() if (s.request_id or "").startswith("reminder:")]
        return (
            bool(timers)
            and all(not t.live for t in timers)
            and bool(fired)
            and all(s.status in ("done", "unanswered") for s in fired)
        )

    await _until(reminders_answered)
    world = await _world(h)
    forks = [c for c in world.conversations.values() if c.parent is not None]
    if forks:
        fork = await h.conversation(forks[0].id)
    else:
        first = min(e.id for e in world.own_entries(root.id) if e.kind == "user")
        async with request():
            fork = await root.fork(first)
    async with request():
        sf = await fork.submit("in fork", request_id="f1")
    await asyncio.wait_for(sf.wait(), 30)

    async with request():
        s2 = await root.submit("slow", request_id="r2")

    async def slow_running_or_settled() -> bool:
        record = await h.session.storage.submission(s2.id)
        if record is not None and record.status in ("done", "unanswered"):
            return True
        log = spec.dir / "effects.log"
        return log.exists() and "slow start" in log.read_text()

    await _until(slow_running_or_settled)
    record = await h.session.storage.submission(s2.id)
    if record is None or record.status not in ("done", "unanswered"):
        async with request():
            await root.abort()
    await asyncio.wait_for(s2.wait(), 30)

    async with request():
        s3 = await root.submit("ask", request_id="r3")

    async def asked_or_settled() -> bool:
        record = await h.session.storage.submission(s3.id)
        settled = record is not None and record.status in ("done", "unanswered")
        return settled or bool(h.approvals())

    await _until(asked_or_settled)
    for pending in h.approvals():  # not decided before a kill: the person approves
        async with request():
            await h.decide_approval(pending["id"], "approve", request_id="approve-r3")
    await asyncio.wait_for(s3.wait(), 30)

    async with request():
        schedule = await root.schedule("tick", every="60s", request_id="sched-1")
    world = await _world(h)
    if not any((s.request_id or "").startswith("schedule:") for s in world.submissions.values()):
        # Not fired before a kill: a virtual minute passes and the occurrence is due.
        task = world.tasks[schedule.id]
        due = task.checkpoint.get("due") if isinstance(task.checkpoint, dict) else None
        assert isinstance(due, int), task
        spec.clock.advance_to(due + 1)

    async def occurrence_answered() -> bool:
        w = await _world(h)
        fired = [s for s in w.submissions.values() if (s.request_id or "").startswith("schedule:")]
        return bool(fired) and all(s.status in ("done", "unanswered") for s in fired)

    await _until(occurrence_answered)
    await h.wait_for_idle()


async def drain_mail(rig: LambdaRig, spec: Spec) -> None:
    """What a Lambda invocation does with its held actors' mail (the handler's drain)."""
    from runtimes.actor.api import ApiConfig, create_app
    from runtimes.aws.handler import ActorFunction, FunctionSettings

    function = ActorFunction(
        FunctionSettings(
            resources=rig.resources,
            actor=rig.pool.actor_config,
            api=ApiConfig("matrix-token-0123456789"),
            workdir=spec.dir,
        )
    )
    app = create_app(rig.pool, ApiConfig("matrix-token-0123456789"))  # type: ignore[arg-type]
    await function._drain(rig.host, app)


async def post_mail(rig: LambdaRig, spec: Spec) -> None:
    from runtimes.aws.mailbox import Mailbox

    body: JsonObject = {"type": "input", "content": "mailed hello", "request_id": "mail-1"}
    now = SystemClock().now()
    await Mailbox(rig.resources).post(spec.actor, body, request_id="mail-1", now=now)


# --------------------------------------------------------------------------- checks


async def report(h: Harness, rig: Rig, spec: Spec) -> JsonObject:
    db = Sqlite3Database.open(rig.db_path)
    try:
        problems = await check_consistency(h.session.storage, settled=True, db=db)
    finally:
        await db.close()
    world = await _world(h)
    by_request: dict[str, list[str]] = {}
    for sub in world.submissions.values():
        by_request.setdefault(sub.request_id or f"#{sub.id}", []).append(sub.status)
    return {
        "problems": problems,
        "submissions": by_request,
        "owned": sum(1 for c in world.conversations.values() if c.owner is not None),
        "forks": sum(1 for c in world.conversations.values() if c.parent is not None),
        "reminders": sum(1 for t in world.tasks.values() if t.kind == REMINDER),
        "schedules": [
            {"id": t.id, "status": t.status, "checkpoint": t.checkpoint}
            for t in world.tasks.values()
            if t.kind == SCHEDULE
        ],
        "compactions": sum(1 for e in world.entries.values() if e.kind == "compaction"),
        "tool_results": {
            str(e.data.get("call_id")): e.message.get("is_error")  # type: ignore[union-attr]
            for e in world.entries.values()
            if e.kind == "tool_result" and isinstance(e.data, dict) and isinstance(e.message, dict)
        },
        "tool_texts": {
            str(e.data.get("call_id")): str(e.message.get("content"))[:300]  # type: ignore[union-attr]
            for e in world.entries.values()
            if e.kind == "tool_result" and isinstance(e.data, dict) and isinstance(e.message, dict)
        },
    }


async def main(spec: Spec) -> None:
    killer = Killer(spec)
    trace = spec.dir / "trace.jsonl" if spec.trace else None
    log = spec.dir / "commits.jsonl"

    def wrap(storage: Storage) -> Storage:
        return KillPointStorage(storage, killer, log, trace)

    config = actor_config(spec, killer)
    rig: Rig
    if spec.host == "local":
        rig = await local_rig(spec, config, wrap)
    elif spec.host == "do":
        rig = await do_rig(spec, config, wrap)
    else:
        rig = await lambda_rig(spec, config, wrap, killer)
    say(started=spec.attempt)
    if spec.host == "do" and spec.attempt == "recover":
        say(alarm_only=await deliver_alarm(cast(DoRig, rig), spec))
    if spec.host == "do":
        # Each API request is one ``use()``; the run goes on after it returned, with the
        # alarm re-armed after every commit (what a crash between the two tests).
        pool = rig.pool
        h = await cast(Any, pool).harness()
        await run_client(h, rig, spec, lambda: pool.use(spec.actor))
    else:
        async with rig.pool.use(spec.actor, create=True) as h:
            await run_client(h, rig, spec, contextlib.nullcontext)
    await rig.close()
    say(finished=spec.attempt)


async def run_client(h: Harness, rig: Rig, spec: Spec, request: Request) -> None:
    if isinstance(rig, LambdaRig):
        if spec.attempt == "crash":
            await post_mail(rig, spec)
        await drain_mail(rig, spec)
    await drive(h, spec, request)
    if spec.attempt == "recover":
        say(report=await report(h, rig, spec))


async def deliver_alarm(rig: DoRig, spec: Spec) -> JsonObject:
    """A fresh isolate is woken by its alarm, as workerd delivers it: cleared, then
    ``alarm()``. Reports what that alone settled, before any client request."""
    armed = rig.home.alarm
    if armed is None:
        return {"armed": None}
    rig.home.alarm = None
    actor = cast(Any, rig.pool)
    await actor.alarm()
    entry = actor.current(spec.actor)
    settled: list[str] = []
    if entry is not None:
        h: Harness = entry.harness
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(h.wait_for_idle(), 15)
        world = await _world(h)
        settled = [s.request_id or "" for s in world.submissions.values() if s.status == "done"]
    return {"armed": armed, "settled": settled}


if __name__ == "__main__":
    asyncio.run(main(Spec(json.loads(sys.argv[1]))))
