"""The host scenario kit: what every host must do, as pytest-free ``check_*`` functions.

Each check takes a :class:`KitTarget` — a place actors persist in (a data directory, a
memory store, a Durable Object namespace) and how to run hosts on it — and raises
``AssertionError`` when the host misbehaves. A host's test suite runs every check of
:data:`HOST_CHECKS` against its own target, as the storage kit does for storage adapters::

    @pytest.mark.parametrize("check", HOST_CHECKS, ids=lambda c: c.__name__)
    async def test_host(check, tmp_path):
        await check(LocalTarget(tmp_path))

Hosts are driven through the actor API (the ASGI app, in-process) and through the
wake-up duties every host has (``evict``, ``wake``, ``wakes``). Time is a
:class:`~core.testing.VirtualClock` the checks advance, so nothing here sleeps on the
wall clock. The kit's agent has two tools: ``kit_search`` (``safe``: reruns after a
crash) and ``kit_book`` (``unsafe``: reported interrupted after a crash); both wait on
the :class:`KitTools` gate, so a check can stop a host while they run.

A target whose host has a front door of its own in front of the app (the AWS host's
Lambda handler, which mails a submission that meets a held lease) may also offer
``front_door(config, clock) -> httpx.AsyncBaseTransport``: requests sent through it
reach the app as a client in production would, and the checks of what that front door
adds run through it.

Size: over 600 lines because the kit is one list, :data:`HOST_CHECKS`, of short checks
that share one rig (the target, the kit's agent and its gated tools); a host runs all of
them, and spreading them over modules would only scatter that list.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import hashlib
import json
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

import httpx
from pydantic import BaseModel

from core import Clock, JsonObject, JsonValue
from core.docops import apply_ops
from core.env import ExecResult, ExecutionEnv, OpRef, OpStatus
from core.faux import FauxModel, FauxState, faux_message, faux_tool_call
from core.harness import (
    EnvFactory,
    Extension,
    ModelRequest,
    ToolContext,
    ToolResultMessage,
    UserMessage,
    define_extension,
    define_tool,
    reminders_extension,
)
from core.testing import VirtualClock
from runtimes.actor.api import ApiConfig, create_app
from runtimes.actor.config import ActorConfig, ActorEnvProvider
from runtimes.actor.errors import ActorLocked
from runtimes.actor.host import Host
from runtimes.actor.memory import MemoryActorStore, MemoryHost
from runtimes.client import Accepted, ActorClient, StreamingASGITransport, SubmissionState

__all__ = [
    "HOST_CHECKS",
    "KIT_TOKEN",
    "KitEnv",
    "KitHost",
    "KitOpLog",
    "KitTarget",
    "KitTools",
    "MemoryTarget",
    "check_actor_listing_pages",
    "check_bad_input_writes_nothing",
    "check_client_script",
    "check_deltas_long_poll",
    "check_evicted_mid_tools_resumes",
    "check_forged_cursors_are_refused",
    "check_idle_park_keeps_next_wake",
    "check_killed_mid_tools_resumes",
    "check_reminder_across_eviction_fires_once",
    "check_request_id_dedupes_across_reopen",
    "check_second_writer_is_refused",
    "check_submission_shape",
    "check_submit_tool_answer",
    "client_script",
    "kit_config",
    "mid_tools_phase",
    "resumed_phase",
]

KIT_TOKEN = "kit-token-0123456789abcdef"
KIT_AGENT: JsonObject = {
    "model": "faux/faux-1",
    "tools": ["kit_search", "kit_book", "kit_hold", "remind"],
}
_KIT_TOOLS = {"kit_search", "kit_book", "kit_hold"}
_TIMEOUT_S = 30.0  # a real-time bound on every wait, so a broken host fails, not hangs


class KitHost(Host, Protocol):
    """A host as the kit drives it: the :class:`~runtimes.actor.Host` port plus the
    wake-up duties of docs/design.md § Host duties."""

    @property
    def active(self) -> frozenset[str]: ...

    @property
    def wakes(self) -> Mapping[str, int]: ...

    async def evict(self, actor: str, *, force: bool = False) -> bool: ...

    async def wake(self, actor: str) -> bool: ...


class KitTarget(Protocol):
    """Where a host's actors live, for the kit.

    ``host(config, clock)`` builds a new (not started) host on the place, as a new
    process or isolate would; ``kill(host)`` stops it as SIGKILL would (nothing closed
    gracefully may write anything a crash would not, so closing without parking is a
    faithful stand-in in-process); ``exists(actor)`` tells whether the actor has
    storage; ``digest(actor)`` is a fingerprint of everything stored for it (``None``:
    no storage), read without writing.
    """

    def host(self, config: ActorConfig, clock: Clock) -> KitHost: ...

    async def kill(self, host: KitHost) -> None: ...

    def exists(self, actor: str) -> bool: ...

    def digest(self, actor: str) -> str | None: ...


class MemoryTarget:
    """The kit's target for :class:`~runtimes.actor.memory.MemoryHost`: one memory store
    that hosts come and go on."""

    def __init__(self) -> None:
        self.store = MemoryActorStore()

    def host(self, config: ActorConfig, clock: Clock) -> MemoryHost:
        return MemoryHost(config, clock=clock, store=self.store)

    async def kill(self, host: KitHost) -> None:
        assert isinstance(host, MemoryHost)
        await host.crash()

    def exists(self, actor: str) -> bool:
        return self.store.exists(actor)

    def digest(self, actor: str) -> str | None:
        state = self.store.states.get(actor)
        if state is None:
            return None
        return hashlib.sha256(repr(dataclasses.asdict(state)).encode()).hexdigest()


# --------------------------------------------------------------------------- the kit's agent


@dataclass
class KitOpLog:
    """The kit's stand-in for a sandbox's op log: it outlives hosts (as the sandbox
    outlives the processes that call it), records each op by id, and answers a repeated
    op id with the recorded result instead of running it again."""

    ops: dict[str, ExecResult | None] = field(default_factory=dict)  # None: running
    finished: dict[str, asyncio.Event] = field(default_factory=dict)
    runs: int = 0

    def finish_running(self, output: str) -> None:
        """Let ops still running (their host is gone) finish, as the sandbox would."""
        for op_id, result in self.ops.items():
            if result is None:
                self.ops[op_id] = ExecResult(0, output, False, len(output), 0)
                self.finished[op_id].set()


class KitEnv:
    """The slice of :class:`~core.env.ExecutionEnv` the kit's recoverable tool uses:
    ``run_command`` (deduped on the op id) and ``op_status``/``cancel``."""

    def __init__(self, log: KitOpLog, gate: Callable[[], Awaitable[None]] | None) -> None:
        self.log = log
        self.gate = gate

    async def run_command(self, command: str, *, op: OpRef, **_: Any) -> ExecResult:
        if op.id in self.log.ops:
            await self.log.finished[op.id].wait()
            result = self.log.ops[op.id]
            assert result is not None
            return result
        self.log.ops[op.id] = None
        self.log.finished[op.id] = asyncio.Event()
        self.log.runs += 1
        if self.gate is not None:
            await self.gate()
        result = ExecResult(0, f"ran {command}", False, 0, 0)
        self.log.ops[op.id] = result
        self.log.finished[op.id].set()
        return result

    async def op_status(self, op_id: str) -> OpStatus:
        if op_id not in self.log.ops:
            return OpStatus("unknown")
        result = self.log.ops[op_id]
        return OpStatus("running") if result is None else OpStatus("done", "exec", result)

    async def cancel(self, op_id: str) -> OpStatus:
        return await self.op_status(op_id)


@dataclass
class KitTools:
    """The kit's tools and what they did. ``gate``: awaited by each tool before it
    answers (default: open); ``started``: called as each tool starts (e.g. to tell a
    parent process that the tools run)."""

    runs: Counter[str] = field(default_factory=Counter)
    gate: Callable[[], Awaitable[None]] | None = None
    started: Callable[[str], None] | None = None
    running: set[str] = field(default_factory=set)
    oplog: KitOpLog = field(default_factory=KitOpLog)

    def env_provider(self) -> ActorEnvProvider:
        """Every actor's conversations get a :class:`KitEnv` on :attr:`oplog`."""

        @asynccontextmanager
        async def provide(actor: str) -> AsyncIterator[EnvFactory]:
            env = cast(ExecutionEnv, KitEnv(self.oplog, self.gate))
            yield lambda conversation_id, cwd: env

        return provide

    async def _run(self, name: str, answer: str) -> str:
        self.runs[name] += 1
        self.running.add(name)
        if self.started is not None:
            self.started(name)
        if self.gate is not None:
            await self.gate()
        return answer

    def extension(self) -> Extension:
        class Args(BaseModel):
            what: str = ""

        async def search(args: Args, ctx: ToolContext) -> str:
            return await self._run("kit_search", f"found {args.what}")

        async def book(args: Args, ctx: ToolContext) -> str:
            return await self._run("kit_book", f"booked {args.what}")

        async def hold(args: Args, ctx: ToolContext) -> str:
            self.runs["kit_hold"] += 1
            self.running.add("kit_hold")
            result = await ctx.env.run_command(f"hold {args.what}", op=ctx.op)
            return result.output

        return define_extension(
            "kit-tools",
            tools=[
                define_tool(
                    "kit_search",
                    description="Search.",
                    parameters=Args,
                    execute=search,
                    replay="safe",
                ),
                define_tool(
                    "kit_book",
                    description="Book.",
                    parameters=Args,
                    execute=book,
                    replay="unsafe",
                ),
                define_tool(
                    "kit_hold",
                    description="Hold a seat (a sandbox op: recoverable).",
                    parameters=Args,
                    execute=hold,
                    replay="recoverable",
                ),
            ],
        )


def kit_model() -> FauxModel:
    """``tools``: one round calling the three tools, then ``done: <results>``; anything
    else is answered ``echo: <text>``."""

    def step(request: ModelRequest, state: FauxState) -> Any:
        last = request.messages[-1] if request.messages else None
        if isinstance(last, ToolResultMessage):
            results = [m for m in request.messages if isinstance(m, ToolResultMessage)]
            return faux_message("done: " + "; ".join(r.content for r in results[-3:]))
        users = [m for m in request.messages if isinstance(m, UserMessage)]
        text = users[-1].content if users else ""
        if text == "tools":
            return faux_message(
                faux_tool_call("kit_search", {"what": "train"}, id="call_search"),
                faux_tool_call("kit_book", {"what": "seat"}, id="call_book"),
                faux_tool_call("kit_hold", {"what": "seat"}, id="call_hold"),
            )
        return faux_message(f"echo: {text}")

    return FauxModel(fallback=step, record_requests=False)


def kit_config(tools: KitTools | None = None) -> ActorConfig:
    """The :class:`ActorConfig` every check opens its hosts with."""
    tools = tools or KitTools()
    return ActorConfig(
        models=kit_model(),
        extensions=[tools.extension(), reminders_extension()],
        env=tools.env_provider(),
        default_agent=dict(KIT_AGENT),
    )


# --------------------------------------------------------------------------- plumbing


@asynccontextmanager
async def _serving(host: KitHost) -> AsyncIterator[httpx.AsyncClient]:
    """The host started, with an API client talking to its app in-process."""
    app = create_app(host, ApiConfig(KIT_TOKEN))
    await host.start()
    transport = httpx.ASGITransport(app=app)
    headers = {"authorization": f"Bearer {KIT_TOKEN}"}
    try:
        async with httpx.AsyncClient(
            transport=transport, base_url="http://kit", headers=headers
        ) as client:
            yield client
    finally:
        await host.close()


async def _bounded(awaitable: Awaitable[Any]) -> Any:
    return await asyncio.wait_for(awaitable, _TIMEOUT_S)


async def _eventually(predicate: Callable[[], bool]) -> None:
    async def poll() -> None:
        while not predicate():  # noqa: ASYNC110 - the predicate is plain state
            await asyncio.sleep(0.005)

    await _bounded(poll())


async def _submit(client: httpx.AsyncClient, actor: str, body: dict[str, Any]) -> dict[str, Any]:
    r = await client.post(f"/v1/actors/{actor}/submissions", json=body)
    assert r.status_code == 202, (r.status_code, r.text)
    answer: dict[str, Any] = r.json()
    return answer


async def _settled(client: httpx.AsyncClient, actor: str, sid: int) -> dict[str, Any]:
    """The submission once settled (long polls until it is)."""
    while True:
        r = await _bounded(client.get(f"/v1/actors/{actor}/submissions/{sid}", params={"wait": 5}))
        assert r.status_code == 200, (r.status_code, r.text)
        state: dict[str, Any] = r.json()
        if state["status"] in ("done", "unanswered"):
            return state
        await asyncio.sleep(0.01)


_ACCEPTED_KEYS = {"id", "conversation_id", "type", "status", "request_id"}
_STATUSES = {"queued", "placed", "done", "unanswered"}


def _assert_accepted(answer: Mapping[str, Any], request_id: str | None) -> None:
    """The one shape every host answers a submission with: ``{id, conversation_id, type,
    status, request_id}``; ``id`` null only while the submission is ``mailed``."""
    assert set(answer) == _ACCEPTED_KEYS, answer
    assert answer["request_id"] == request_id, answer
    if answer["status"] == "mailed":
        assert answer["id"] is None and request_id is not None, answer
    else:
        assert isinstance(answer["id"], int) and answer["status"] in _STATUSES, answer


def _by_request(actor: str, request_id: str, conversation: int = 1) -> tuple[str, dict[str, Any]]:
    path = f"/v1/actors/{actor}/conversations/{conversation}/submissions/by-request"
    return path, {"request_id": request_id}


async def _settled_by_request(
    client: httpx.AsyncClient, actor: str, request_id: str
) -> dict[str, Any]:
    """The submission of ``request_id`` once settled, polled by its request id alone (as
    a client that has no id polls on every host)."""
    path, params = _by_request(actor, request_id)
    while True:
        r = await _bounded(client.get(path, params={**params, "wait": 5}))
        assert r.status_code == 200, (r.status_code, r.text)
        state: dict[str, Any] = r.json()
        assert state["request_id"] == request_id, state
        if state["status"] in ("done", "unanswered"):
            return state
        await asyncio.sleep(0.01)


async def _entries(client: httpx.AsyncClient, actor: str) -> list[dict[str, Any]]:
    r = await client.get(f"/v1/actors/{actor}/conversations/1/view")
    assert r.status_code == 200, (r.status_code, r.text)
    entries: list[dict[str, Any]] = r.json()["entries"]
    return entries


def _tool_results(entries: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    out: dict[str, str] = {}
    for entry in entries:
        message = entry.get("message")
        if entry.get("kind") == "tool_result" and isinstance(message, dict):
            out[str(message.get("tool_name"))] = str(message.get("content"))
    return out


# --------------------------------------------------------------------------- checks


async def check_submit_tool_answer(target: KitTarget) -> None:
    """A submission runs the tools and is answered with their results."""
    tools = KitTools()
    async with _serving(target.host(kit_config(tools), VirtualClock())) as client:
        accepted = await _submit(client, "kit-a", {"type": "input", "content": "tools"})
        assert accepted["status"] in ("placed", "queued"), accepted
        state = await _settled(client, "kit-a", accepted["id"])
        assert state["status"] == "done", state
        assert state["answer"]["text"] == "done: found train; booked seat; ran hold seat", state
        assert tools.runs == Counter({"kit_search": 1, "kit_book": 1, "kit_hold": 1})
        assert tools.oplog.runs == 1


async def check_submission_shape(target: KitTarget) -> None:
    """Every host answers a submission ``202 {id, conversation_id, type, status,
    request_id}`` and serves ``GET .../conversations/{cid}/submissions/by-request`` — the
    one host-neutral way to poll a submission by its request id. Through a target's own
    front door (AWS), a submission that meets another holder's lease is answered in the
    same shape, ``id`` null and ``status`` ``mailed``; polled by its request id it reads
    ``mailed`` until the actor is free, then settles like any other."""
    async with _serving(target.host(kit_config(), VirtualClock())) as client:
        body = {"type": "input", "content": "hello", "request_id": "kit-s1"}
        accepted = await _submit(client, "kit-s", body)
        _assert_accepted(accepted, "kit-s1")
        note = await _submit(client, "kit-s", {"type": "write", "content": {"kind": "note"}})
        _assert_accepted(note, None)
        polled = await _settled_by_request(client, "kit-s", "kit-s1")
        by_id = await _settled(client, "kit-s", accepted["id"])
        assert polled == by_id and polled["answer"]["text"] == "echo: hello", (polled, by_id)
        _assert_accepted(await _submit(client, "kit-s", body), "kit-s1")  # the retry too
        before = target.digest("kit-s")
        refused: list[tuple[str, int, dict[str, str | int], int]] = [
            ("kit-s", 1, {"request_id": "kit-nothing"}, 404),
            ("kit-s", 99, {"request_id": "kit-s1"}, 404),
            ("kit-nobody", 1, {"request_id": "kit-s1"}, 404),
            ("kit-s", 1, {}, 422),
            ("kit-s", 1, {"request_id": ""}, 422),
            ("kit-s", 1, {"request_id": "kit-s1", "wait": -1}, 422),
        ]
        for actor, conversation, params, status in refused:
            path = f"/v1/actors/{actor}/conversations/{conversation}/submissions/by-request"
            r = await client.get(path, params=params)
            assert r.status_code == status, (actor, conversation, params, r.status_code, r.text)
        assert target.digest("kit-s") == before and not target.exists("kit-nobody")
    front_door: Callable[[ActorConfig, Clock], httpx.AsyncBaseTransport] | None = getattr(
        target, "front_door", None
    )
    if front_door is not None:
        await _mailed_shape(target, front_door(kit_config(), VirtualClock()))


async def _mailed_shape(target: KitTarget, transport: httpx.AsyncBaseTransport) -> None:
    headers = {"authorization": f"Bearer {KIT_TOKEN}"}
    body = {"type": "input", "content": "hello", "request_id": "kit-m1"}
    path, params = _by_request("kit-m", "kit-m1")
    holder = target.host(kit_config(), VirtualClock())
    await holder.start()
    async with httpx.AsyncClient(
        transport=transport, base_url="http://kit", headers=headers
    ) as client:
        try:
            async with holder.use("kit-m", create=True) as harness:
                await harness.root(agent=dict(KIT_AGENT))
                r = await client.post("/v1/actors/kit-m/submissions", json=body)
                assert r.status_code == 202, (r.status_code, r.text)
                _assert_accepted(r.json(), "kit-m1")
                assert r.json()["status"] == "mailed", r.text
                r = await client.get(path, params=params)
                assert r.status_code == 200 and r.json()["status"] == "mailed", r.text
                assert r.json()["id"] is None, r.text
        finally:
            await holder.close()
        state = await _settled_by_request(client, "kit-m", "kit-m1")
        assert isinstance(state["id"], int) and state["status"] == "done", state
        again = await client.post("/v1/actors/kit-m/submissions", json=body)
        assert again.status_code == 202, again.text
        _assert_accepted(again.json(), "kit-m1")
        assert again.json()["id"] == state["id"], (again.text, state)


async def check_request_id_dedupes_across_reopen(target: KitTarget) -> None:
    """A known request id answers the original submission, also from a new host; the
    same id with other content is refused ``422 request_id_conflict`` (the IETF
    Idempotency-Key draft's status for a key reused with another payload), writing
    nothing, and the original keeps answering the retry."""
    body = {"type": "input", "content": "hello", "request_id": "kit-r1"}
    async with _serving(target.host(kit_config(), VirtualClock())) as client:
        first = await _submit(client, "kit-b", body)
        await _settled(client, "kit-b", first["id"])
    host = target.host(kit_config(), VirtualClock())
    async with _serving(host) as client:
        again = await _submit(client, "kit-b", body)
        assert again["id"] == first["id"] and again["status"] == "done", (first, again)
        users = [e for e in await _entries(client, "kit-b") if e["kind"] == "user"]
        assert len(users) == 1, users
        async with host.use("kit-b") as harness:
            await _bounded(harness.wait_for_idle())
        before = target.digest("kit-b")
        for other_body in (
            {**body, "content": "something else"},
            {"type": "write", "content": {"kind": "note"}, "request_id": body["request_id"]},
        ):
            other = await client.post("/v1/actors/kit-b/submissions", json=other_body)
            assert other.status_code == 422, other.text
            assert other.json()["error"]["code"] == "request_id_conflict", other.text
        assert target.digest("kit-b") == before
        retried = await _submit(client, "kit-b", body)
        assert retried["id"] == first["id"] and retried["status"] == "done", retried


async def mid_tools_phase(host: KitHost, tools: KitTools, actor: str) -> int:
    """Start the ``tools`` submission on ``host`` and return once the three tools run
    (the gate of ``tools`` must be closed). Returns the submission id."""
    await host.start()
    async with host.use(actor, create=True) as harness:
        root = await harness.root(agent=dict(KIT_AGENT))
        submission = await root.submit("tools", request_id="kit-mid")
    await _eventually(lambda: tools.running >= _KIT_TOOLS and tools.oplog.ops != {})
    return submission.id


async def resumed_phase(
    target: KitTarget, actor: str, sid: int, oplog: KitOpLog | None = None
) -> None:
    """On a new host: the submission completes; ``kit_search`` (safe) ran again,
    ``kit_book`` (unsafe) was reported interrupted and did not run again, and
    ``kit_hold`` (recoverable) got the result its op log recorded — without running the
    op again — when the op log outlived the host (``oplog``: the one the stopped host
    used, whose running op is let finish now), else was reported interrupted."""
    if oplog is not None:
        oplog.finish_running("held seat")
    tools = KitTools(oplog=oplog or KitOpLog())
    async with _serving(target.host(kit_config(tools), VirtualClock())) as client:
        state = await _settled(client, actor, sid)
        assert state["status"] == "done", state
        results = _tool_results(await _entries(client, actor))
        assert results["kit_search"] == "found train", results
        assert "interrupted" in results["kit_book"], results
        if oplog is not None:
            assert results["kit_hold"] == "held seat", results
            assert tools.runs == Counter({"kit_search": 1, "kit_hold": 1}), tools.runs
            assert oplog.runs == 1, "the recoverable op ran twice"
        else:
            assert "interrupted" in results["kit_hold"], results
            assert tools.runs == Counter({"kit_search": 1}), tools.runs


async def _held() -> None:
    await asyncio.Event().wait()  # never opens: the host is stopped under it


async def check_killed_mid_tools_resumes(target: KitTarget) -> None:
    """A host killed while tools run: the next host resumes (safe reruns, unsafe
    interrupted)."""
    tools = KitTools(gate=_held)
    host = target.host(kit_config(tools), VirtualClock())
    sid = await mid_tools_phase(host, tools, "kit-c")
    await target.kill(host)
    await resumed_phase(target, "kit-c", sid, tools.oplog)


async def check_evicted_mid_tools_resumes(target: KitTarget) -> None:
    """An actor evicted (forced) while tools run: the wake resumes it the same way."""
    tools = KitTools(gate=_held)
    host = target.host(kit_config(tools), VirtualClock())
    sid = await mid_tools_phase(host, tools, "kit-d")
    assert await host.evict("kit-d", force=True)
    assert "kit-d" not in host.active
    await host.close()
    await resumed_phase(target, "kit-d", sid, tools.oplog)


async def check_reminder_across_eviction_fires_once(target: KitTarget) -> None:
    """A reminder set before an eviction fires once when due, even when the wake is
    delivered more than once."""
    clock = VirtualClock()
    host = target.host(kit_config(), clock)
    async with _serving(host) as client:
        await _settled(client, "kit-e", (await _submit(client, "kit-e", _hello))["id"])
        r = await client.post(
            "/v1/actors/kit-e/conversations/1/reminders", json={"message": "ping", "after": 5}
        )
        assert r.status_code == 201, r.text
        due = r.json()["at"]
        assert await host.evict("kit-e")
        assert host.wakes.get("kit-e") == due, host.wakes
        clock.advance(5_000)  # the host's own wake-up fires...
        await asyncio.gather(host.wake("kit-e"), host.wake("kit-e"))  # ...and two more
        await _eventually(lambda: "kit-e" in host.active)

        async def answered() -> list[dict[str, Any]]:
            while True:
                entries = await _entries(client, "kit-e")
                if [e for e in entries if e["kind"] == "assistant"][-1:] and any(
                    e["kind"] == "user" and e["message"]["content"] == "ping" for e in entries
                ):
                    last = entries[-1]
                    if last["kind"] == "assistant":
                        return entries
                await asyncio.sleep(0.01)

        entries = await _bounded(answered())
        pings = [e for e in entries if e["kind"] == "user" and e["message"]["content"] == "ping"]
        assert len(pings) == 1, entries
        timers = (await client.get("/v1/actors/kit-e/timers")).json()
        assert timers["timers"] == [], timers


_hello = {"type": "input", "content": "hello"}


async def check_idle_park_keeps_next_wake(target: KitTarget) -> None:
    """An idle actor with a pending reminder parks; its next wake is kept by the host."""
    host = target.host(kit_config(), VirtualClock())
    async with _serving(host) as client:
        await _settled(client, "kit-f", (await _submit(client, "kit-f", _hello))["id"])
        r = await client.post(
            "/v1/actors/kit-f/conversations/1/reminders", json={"message": "later", "after": 60}
        )
        due = r.json()["at"]
        timers = (await client.get("/v1/actors/kit-f/timers")).json()
        assert timers["next_wake"] == due, timers
        assert await host.evict("kit-f")  # idle: parkable without force
        assert "kit-f" not in host.active
        assert host.wakes.get("kit-f") == due, host.wakes


# Refused requests: (method, path under /v1/actors/{actor}, JSON body). Each must be a
# 4xx that writes nothing, whether the actor exists or not.
BAD_REQUESTS: list[tuple[str, str, Any]] = [
    ("POST", "/submissions", {"type": "input", "content": ""}),
    ("POST", "/submissions", {"type": "input", "content": "x", "when_busy": "never"}),
    ("POST", "/submissions", {"type": "write", "content": {"kind": "note", "message": {}}}),
    ("POST", "/submissions", {"type": "write", "content": {"kind": "system"}}),
    ("POST", "/submissions", {"type": "write", "content": {"kind": "user"}}),
    ("POST", "/submissions", {"type": "input", "content": "x", "conversation_id": 99}),
    ("POST", "/submissions", {"type": "input", "content": "x", "extra": 1}),
    ("POST", "/submissions", [1, 2]),
    ("PATCH", "/conversations/1/agent", {"tools": ["nope"]}),
    ("PATCH", "/conversations/1/agent", {"extensions": ["nope"]}),
    ("PATCH", "/conversations/1/agent", {"thinking": "max"}),
    ("PATCH", "/conversations/1/agent", {"model": 5}),
    ("POST", "/conversations/1/reminders", {"message": "x"}),
    ("POST", "/conversations/1/reminders", {"message": "x", "at": 1, "after": 1}),
    ("POST", "/conversations/1/reminders", {"message": "x", "after": 10**9}),
    ("POST", "/conversations/1/reminders", {"message": " ", "after": 1}),
    ("POST", "/conversations/1/fork", {"at_entry": 10**6}),
    ("POST", "/conversations/1/compact", {"instructions": ""}),
    ("POST", "/conversations/1/reset", {"handoff": 3}),
    ("POST", "/conversations/1/abort", {"background": "yes"}),
    ("DELETE", "/timers/12345", None),
    ("POST", "/conversations/1/schedules", {"message": "x", "cron": "0 9 * *"}),
    ("POST", "/conversations/1/schedules", {"message": "x", "cron": "0 25 * * *"}),
    (
        "POST",
        "/conversations/1/schedules",
        {"message": "x", "cron": "0 9 * * *", "timezone": "Mars/Base"},
    ),
    ("POST", "/conversations/1/schedules", {"message": "x", "every": 30}),
    ("POST", "/conversations/1/schedules", {"message": "x", "every": "10s"}),
    ("POST", "/conversations/1/schedules", {"message": "x", "every": 60, "cron": "* * * * *"}),
    ("POST", "/conversations/1/schedules", {"message": "x"}),
    ("POST", "/conversations/1/schedules", {"message": "x", "every": 60, "until": 1}),
    ("DELETE", "/conversations/1/schedules/12345", None),
    ("POST", "/conversations/7/abort", {}),
]


# Bodies no dict can spell: (method, path under /v1/actors/{actor}, raw JSON, the key
# named twice). JSON leaves duplicates to the reader; the API refuses them 422.
DUPLICATE_KEY_BODIES: list[tuple[str, str, bytes, str]] = [
    ("POST", "/submissions", b'{"type": "write", "type": "input", "content": "x"}', "type"),
    ("POST", "/submissions", b'{"type": "input", "content": "a", "content": "b"}', "content"),
    (
        "POST",
        "/submissions",
        b'{"type": "write", "content": {"kind": "note", "data": {"k": 1, "k": 2}}}',
        "k",
    ),
    ("PATCH", "/conversations/1/agent", b'{"model": "faux/faux-1", "model": "x"}', "model"),
    ("POST", "/conversations/1/reminders", b'{"message": "x", "after": 1, "after": 2}', "after"),
]


async def check_bad_input_writes_nothing(target: KitTarget) -> None:
    """Every refused request is a 4xx with ``{error: {code, message}}``, leaves an
    existing actor's storage unchanged and creates no actor; a JSON body that names a
    key twice is refused ``422 invalid``, naming the key."""
    host = target.host(kit_config(), VirtualClock())
    async with _serving(host) as client:
        await _settled(client, "kit-g", (await _submit(client, "kit-g", _hello))["id"])
        async with host.use("kit-g") as harness:
            await _bounded(harness.wait_for_idle())
        before = target.digest("kit-g")
        assert before is not None
        for number, (method, path, body) in enumerate(BAD_REQUESTS):
            for actor in ("kit-g", f"kit-new-{number}"):
                r = await client.request(method, f"/v1/actors/{actor}{path}", json=body)
                assert 400 <= r.status_code < 500, (method, path, body, r.status_code, r.text)
                error = r.json()["error"]
                assert error["code"] and error["message"], r.text
                assert not target.exists(f"kit-new-{number}"), (method, path, body)
            assert target.digest("kit-g") == before, (method, path, body)
        headers = {"content-type": "application/json"}
        for number, (method, path, raw, key) in enumerate(DUPLICATE_KEY_BODIES):
            for actor in ("kit-g", f"kit-dup-{number}"):
                url = f"/v1/actors/{actor}{path}"
                r = await client.request(method, url, content=raw, headers=headers)
                assert r.status_code == 422, (method, path, raw, r.status_code, r.text)
                error = r.json()["error"]
                assert error["code"] == "invalid" and f'"{key}"' in error["message"], r.text
                assert not target.exists(f"kit-dup-{number}"), (method, path, raw)
            assert target.digest("kit-g") == before, (method, path, raw)


def _forged(cursor: object) -> str:
    """A cursor made up by a client: JSON in the wire's URL-safe base64, unsigned."""
    raw = json.dumps(cursor, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _tampered(cursor: str) -> str:
    """A handed-out cursor with one character changed."""
    middle = len(cursor) // 2
    return cursor[:middle] + ("B" if cursor[middle] == "A" else "A") + cursor[middle + 1 :]


async def check_forged_cursors_are_refused(target: KitTarget) -> None:
    """Every listing's cursor (conversations, submissions, entries) is opaque: a cursor
    the API handed out continues its listing; anything else — made up, out of any id's
    range, tampered with, or handed out by another listing — is ``400 invalid_cursor``
    and writes nothing."""
    host = target.host(kit_config(), VirtualClock())
    async with _serving(host) as client:
        for content in ("one", "two"):
            await _settled(
                client,
                "kit-k",
                (await _submit(client, "kit-k", {**_hello, "content": content}))["id"],
            )
        first_entry = (await _entries(client, "kit-k"))[0]["id"]
        r = await client.post(
            "/v1/actors/kit-k/conversations/1/fork", json={"at_entry": first_entry}
        )
        assert r.status_code == 201, r.text
        async with host.use("kit-k") as harness:
            await _bounded(harness.wait_for_idle())
        base = "/v1/actors/kit-k/conversations"
        listings = {
            "conversations": (base, "conversations"),
            "submissions": (f"{base}/1/submissions", "submissions"),
            "entries": (f"{base}/1/entries", "entries"),
        }
        handed: dict[str, str] = {}
        for name, (path, field) in listings.items():
            page = (await client.get(path, params={"limit": 1})).json()
            assert page["next"] is not None, (name, page)
            handed[name] = page["next"]
            more = await client.get(path, params={"limit": 1, "cursor": page["next"]})
            assert more.status_code == 200 and more.json()[field], (name, more.text)
            assert more.json()[field] != page[field], (name, page, more.text)
        before = target.digest("kit-k")
        for name, (path, _field) in listings.items():
            scan = name
            order = "desc" if name == "entries" else "asc"
            shapes: list[object] = [
                {"scan": scan, "filters": {}, "order": order, "after": after}
                for after in (2**63 - 1, 2**63, 2**70, -1, 0, 1, "1", 1.5, True, None)
            ]
            shapes += [{"scan": scan}, [1], "x", 7, {"after": 1}]
            forged = [_forged(shape) for shape in shapes]
            forged += [_tampered(handed[name]), handed[name] + "A", "A", "bm90LWpzb24"]
            forged += [cursor for other, cursor in handed.items() if other != name]
            for cursor in forged:
                r = await client.get(path, params={"cursor": cursor})
                assert r.status_code == 400, (name, cursor, r.status_code, r.text)
                assert r.json()["error"]["code"] == "invalid_cursor", (name, cursor, r.text)
        assert target.digest("kit-k") == before


async def check_second_writer_is_refused(target: KitTarget) -> None:
    """While one host holds an actor, a second host on the same place is refused."""
    first = target.host(kit_config(), VirtualClock())
    second = target.host(kit_config(), VirtualClock())
    await first.start()
    await second.start()
    try:
        async with first.use("kit-h", create=True) as harness:
            await harness.root(agent=dict(KIT_AGENT))
            try:
                async with second.use("kit-h"):
                    raise AssertionError("a second writer opened the actor")
            except ActorLocked:
                pass
    finally:
        await second.close()
        await first.close()


async def _delta_poll(
    client: httpx.AsyncClient, actor: str, after: int | None, wait: float = 0
) -> dict[str, Any]:
    params: dict[str, Any] = {"wait": wait}
    if after is not None:
        params["after"] = after
    r = await _bounded(client.get(f"/v1/actors/{actor}/conversations/1/deltas", params=params))
    assert r.status_code == 200, (r.status_code, r.text)
    page: dict[str, Any] = r.json()
    return page


async def check_deltas_long_poll(target: KitTarget) -> None:
    """The watch as a long poll: the view and a cursor, then the deltas committed after
    the cursor (waited for), applying to exactly the committed view; a cursor that is
    not covered gets one ``replace`` with the current view; bad parameters are a 4xx."""
    clock = VirtualClock()
    async with _serving(target.host(kit_config(), clock)) as client:
        first = await _submit(client, "kit-d", _hello)
        await _settled(client, "kit-d", first["id"])
        page = await _delta_poll(client, "kit-d", None)
        [frame] = page["frames"]
        assert frame["type"] == "view" and frame["seq"] == page["next"], page
        view: JsonValue = frame["value"]
        assert view == (await client.get("/v1/actors/kit-d/conversations/1/view")).json()
        cursor = page["next"]
        assert isinstance(cursor, int) and cursor > 0, page
        quiet = await _delta_poll(client, "kit-d", cursor, wait=0.05)
        assert quiet == {"frames": [], "next": cursor}, quiet

        async def ticking() -> None:
            # The virtual clock paces watch wake-ups: let it move while the poll waits.
            while True:
                await asyncio.sleep(0.005)
                clock.advance(50)

        # A poll waiting at the cursor is answered by the next commit.
        waiting = asyncio.ensure_future(_delta_poll(client, "kit-d", cursor, wait=10))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        ticker = asyncio.ensure_future(ticking())
        try:
            second = await _submit(client, "kit-d", {"type": "input", "content": "tools"})
            seen: list[int] = []
            page = await waiting
            while True:
                assert page["frames"], page
                for frame in page["frames"]:
                    assert frame["type"] == "delta" and frame["seq"] > cursor, frame
                    view = apply_ops(view, frame["ops"])
                    seen.append(frame["seq"])
                cursor = page["next"]
                # At least the newest frame's commit: a commit that changes nothing in
                # the view (a phase's checkpoint) may have landed after it, frameless.
                assert cursor >= seen[-1], page
                state = (await client.get(f"/v1/actors/kit-d/submissions/{second['id']}")).json()
                if (
                    state["status"] == "done"
                    and view == (await client.get("/v1/actors/kit-d/conversations/1/view")).json()
                ):
                    break
                page = await _delta_poll(client, "kit-d", cursor, wait=10)
        finally:
            ticker.cancel()
            await asyncio.gather(ticker, return_exceptions=True)
        assert len(seen) >= 3 and seen == sorted(set(seen)), seen
        # A client behind the retained frames (or ahead: a cursor from elsewhere) gets
        # the current view whole.
        current = (await client.get("/v1/actors/kit-d/conversations/1/view")).json()
        for stale in (0, cursor + 1000):
            page = await _delta_poll(client, "kit-d", stale, wait=5)
            [frame] = page["frames"]
            assert frame["type"] == "replace" and frame["value"] == current, page
            assert page["next"] == frame["seq"] >= cursor, page
        before = target.digest("kit-d")
        for params in (
            {"after": -1},
            {"after": "x"},
            {"wait": -1},
            {"wait": "nan"},
            {"wait": "soon"},
            {"after": 2**63},
        ):
            r = await client.get("/v1/actors/kit-d/conversations/1/deltas", params=params)
            assert r.status_code == 422 and r.json()["error"]["code"] == "invalid", (params, r.text)
        r = await client.get("/v1/actors/kit-d/conversations/99/deltas")
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found", r.text
        r = await client.get("/v1/actors/kit-nobody/conversations/1/deltas")
        assert r.status_code == 404 and r.json()["error"]["code"] == "unknown_actor", r.text
        assert target.digest("kit-d") == before and not target.exists("kit-nobody")


LISTED_ACTORS = 1000
"""How many actors :func:`check_actor_listing_pages` creates before it lists them."""


async def _create_actor(host: KitHost, name: str) -> None:
    """``name`` created as a first request creates it (its first commit: the root
    conversation), then let go, so a thousand actors are not all held open at once."""
    async with host.use(name, create=True) as harness:
        await harness.root(agent=dict(KIT_AGENT))
    await host.evict(name, force=True)


async def _create_all(host: KitHost, names: Sequence[str], at_once: int) -> None:
    queue = list(names)

    async def worker() -> None:
        while queue:
            await _create_actor(host, queue.pop())

    await asyncio.gather(*(worker() for _ in range(at_once)))


async def _actor_pages(client: httpx.AsyncClient, limit: int) -> list[list[str]]:
    pages: list[list[str]] = []
    after: str | None = None
    while True:
        params: dict[str, Any] = {"limit": limit, **({"after": after} if after else {})}
        r = await _bounded(client.get("/v1/actors", params=params))
        assert r.status_code == 200, (r.status_code, r.text)
        page = r.json()
        assert set(page) == {"actors", "next_after"}, page
        pages.append([a["id"] for a in page["actors"]])
        after = page["next_after"]
        if after is None:
            return pages
        assert after == pages[-1][-1], page


async def check_actor_listing_pages(target: KitTarget) -> None:
    """``GET /v1/actors?after=&limit=`` lists what the storage holds: every actor whose
    first commit landed, ascending, paged by ``next_after``, never one a refused request
    named. Paging a thousand actors a hundred at a time while more are created between
    (and during) the page requests skips none that existed before the listing began,
    lists none twice and none that is not stored; listed again afterwards, the pages
    are exactly the stored actors. Bad paging parameters are ``422``; the name a
    refused request named is listed once a good request has created it.

    A target may set ``listed_actors`` (default :data:`LISTED_ACTORS`; pages are a tenth
    of it) where creating an actor is slow (moto), and ``one_call_at_a_time = True``
    where its storage takes one call at a time (moto's backends are not safe across
    threads): each batch is then created between two page reads instead of during one.
    """
    count: int = getattr(target, "listed_actors", LISTED_ACTORS)
    overlap = 1 if getattr(target, "one_call_at_a_time", False) else 8
    limit = max(1, count // 10)
    host = target.host(kit_config(), VirtualClock())
    before = [f"kit-l-{i:04d}" for i in range(0, 2 * count, 2)]
    during = [f"kit-l-{i:04d}" for i in range(1, 2 * count, 20)]  # spread over the range
    async with _serving(host) as client:
        await _create_all(host, before, overlap)
        for body in ({"type": "nope"}, {**_hello, "conversation_id": 99}):
            # Refused before the actor is opened, and after (no conversation 99).
            r = await client.post("/v1/actors/kit-l-refused/submissions", json=body)
            assert 400 <= r.status_code < 500, r.text
        for bad in ({"limit": 0}, {"limit": 1001}, {"limit": "x"}, {"after": "no/id"}):
            r = await client.get("/v1/actors", params=bad)
            assert r.status_code == 422 and r.json()["error"]["code"] == "invalid", (bad, r.text)
        pages: list[list[str]] = []
        after: str | None = None
        batches = [during[i : i + 10] for i in range(0, len(during), 10)]
        while True:
            batch = batches.pop() if batches else []
            creating = asyncio.ensure_future(_create_all(host, batch, overlap))
            if overlap == 1:
                await creating
            params: dict[str, str | int] = {"limit": limit, **({"after": after} if after else {})}
            r = await _bounded(client.get("/v1/actors", params=params))
            await creating
            assert r.status_code == 200, (r.status_code, r.text)
            page = [a["id"] for a in r.json()["actors"]]
            assert 0 < len(page) <= limit, r.text
            pages.append(page)
            after = r.json()["next_after"]
            if after is None:
                break
        await _create_all(host, [name for batch in batches for name in batch], overlap)
        listed = [name for page in pages for name in page]
        assert len(pages) >= 10, [len(p) for p in pages]
        assert listed == sorted(set(listed)), "duplicates or out of order"
        assert not set(before) - set(listed), sorted(set(before) - set(listed))[:5]
        assert set(listed) <= set(before) | set(during), sorted(set(listed) - set(before))[:5]
        created = before + during
        assert all(target.exists(name) for name in created)
        assert not target.exists("kit-l-refused") and "kit-l-refused" not in listed
        again = await _actor_pages(client, limit)
        assert [name for page in again for name in page] == sorted(created)
        assert all(len(page) == limit for page in again[:-1]), [len(p) for p in again]
        # The name a refused request left free is created by the next good one.
        await _submit(client, "kit-l-refused", _hello)
        r = await client.get("/v1/actors", params={"after": "kit-l-refuse", "limit": 1})
        assert [a["id"] for a in r.json()["actors"]] == ["kit-l-refused"], r.text


async def check_schedule_fires_each_occurrence_once(target: KitTarget) -> None:
    """``every: 60`` for ten virtual minutes, with an eviction (its wake delivered twice)
    after the third occurrence and a kill right after the seventh was admitted, submits
    exactly ten messages, each answered; the listing shows the next occurrences in
    ISO-8601 with their zone, and a cancel stops the schedule."""
    clock, actor = VirtualClock(), "kit-s"
    path = f"/v1/actors/{actor}/conversations/1/schedules"
    due: list[int] = []
    made: dict[str, Any] = {}

    async def occurrence(client: httpx.AsyncClient, at: int) -> dict[str, Any]:
        return await _settled_by_request(client, actor, f"schedule:{made['id']}:{at}")

    async def minutes(client: httpx.AsyncClient, host: KitHost, first: int, last: int) -> None:
        for minute in range(first, last + 1):
            clock.set(due[minute - 1])
            # The host's own wake-up, or the timer of an actor it keeps open; then the
            # same wake again (delivered twice), harmless.
            await asyncio.gather(host.wake(actor), host.wake(actor))
            await _bounded(_fired(client, path, minute))  # the occurrence is admitted
            if minute == last == 7:  # killed right after the occurrence's commit
                return
            assert (await occurrence(client, due[minute - 1]))["status"] == "done"
            if minute == 3:  # idle: evicted, its next deadline kept by the host
                async with host.use(actor) as harness:
                    await _bounded(harness.wait_for_idle())
                assert await host.evict(actor)
                assert host.wakes.get(actor) == due[3], host.wakes

    host = target.host(kit_config(), clock)
    async with _serving(host) as client:
        await _settled(client, actor, (await _submit(client, actor, _hello))["id"])
        body = {"message": "tick", "every": 60, "timezone": "Europe/Vienna", "request_id": "s1"}
        r = await client.post(path, json=body)
        assert r.status_code == 201, r.text
        made.update(r.json())
        assert (await client.post(path, json=body)).json()["id"] == made["id"]  # a retry
        assert len(made["next"]) == 3 and made["next"][0][-6:] in ("+01:00", "+02:00"), made
        due.extend(made["next_at"] + minute * 60_000 for minute in range(10))
        await minutes(client, host, 1, 7)
        await target.kill(host)
    host = target.host(kit_config(), clock)
    async with _serving(host) as client:
        await host.wake(actor)  # the occurrence admitted before the kill is answered...
        assert (await occurrence(client, due[6]))["status"] == "done"
        await minutes(client, host, 8, 10)  # ...and the schedule goes on
        for at in due:
            assert (await occurrence(client, at))["status"] == "done", at
        entries = await _entries(client, actor)
        ticks = [e for e in entries if e["kind"] == "user" and e["message"]["content"] == "tick"]
        assert len(ticks) == 10, [e["message"] for e in entries]
        (listed,) = (await client.get(path)).json()["schedules"]
        assert listed["fired"] == 10 and listed["next_at"] == due[-1] + 60_000, listed
        r = await client.delete(f"{path}/{made['id']}")
        assert r.status_code == 200 and r.json()["status"] == "aborted", r.text
        assert (await client.get(path)).json()["schedules"] == []


async def check_schedules_share_the_actor_s_one_wake(target: KitTarget) -> None:
    """Two schedules and a reminder of one actor: evicted, the host keeps one wake-up,
    at the earliest of their deadlines; delivered, it fires that one only and the host
    re-arms at the next earliest."""
    clock, actor = VirtualClock(), "kit-w"
    host = target.host(kit_config(), clock)
    async with _serving(host) as client:
        await _settled(client, actor, (await _submit(client, actor, _hello))["id"])
        path = f"/v1/actors/{actor}/conversations/1/schedules"
        hourly = (await client.post(path, json={"message": "hourly", "every": "1h"})).json()
        r = await client.post(path, json={"message": "five", "cron": "*/5 * * * *"})
        five = r.json()
        r = await client.post(
            f"/v1/actors/{actor}/conversations/1/reminders", json={"message": "r", "after": 150}
        )
        reminder = r.json()["at"]
        deadlines = sorted([hourly["next_at"], five["next_at"], reminder])
        assert await host.evict(actor)
        assert host.wakes.get(actor) == deadlines[0], (host.wakes, deadlines)
        clock.set(deadlines[0])
        assert await host.wake(actor)
        async with host.use(actor) as harness:
            await _bounded(harness.wait_for_idle())
            await _eventually(lambda: harness.next_wake() not in (None, deadlines[0]))
            expected = harness.next_wake()
        assert await host.evict(actor)
        assert host.wakes.get(actor) == expected == deadlines[1], (host.wakes, deadlines)
        listed = (await client.get(path)).json()["schedules"]
        fired = {s["message"]: s["fired"] for s in listed}
        assert sum(fired.values()) == (0 if deadlines[0] == reminder else 1), fired


async def _fired(client: httpx.AsyncClient, path: str, count: int) -> None:
    """Return once the conversation's one schedule has fired ``count`` occurrences."""
    while True:
        r = await client.get(path)
        assert r.status_code == 200, r.text
        if r.json()["schedules"][0]["fired"] >= count:
            return
        await asyncio.sleep(0.005)


async def client_script(
    client: ActorClient,
    actor: str,
    request_id: str,
    *,
    submitted: Callable[[Accepted], Awaitable[None]] | None = None,
) -> str:
    """The client script every host passes unchanged: submit (with a request id), poll
    the submission until it is answered — by id, or by request id while it is ``mailed``
    — watch the conversation until its view shows the answer, and read the answer back
    from the transcript; a retry answers the original. ``submitted`` runs between the
    submission and the poll (the AWS check frees the actor there). Returns how the
    watch read the conversation (``sse`` or ``poll``)."""
    accepted = await client.submit(actor, "hello", request_id=request_id)
    assert accepted.request_id == request_id and accepted.conversation_id == 1, accepted
    if submitted is not None:
        await submitted(accepted)
    state: SubmissionState = await client.wait(actor, accepted, timeout=_TIMEOUT_S)
    assert state.status == "done" and state.answer is not None, state
    assert state.answer.text == "echo: hello" and state.request_id == request_id, state
    answer = state.answer.entry
    async with client.watch(actor) as watch:
        async for _frame in watch:
            if watch.view is not None and answer in watch.view["entries"]:
                break
    transcript = [entry async for entry in client.entries(actor)]
    assert transcript[-1] == answer, (transcript, answer)
    again = await client.submit(actor, "hello", request_id=request_id)
    assert again.id == state.id and again.status == "done", (again, state)
    return watch.via


async def check_client_script(target: KitTarget) -> None:
    """:func:`client_script` through the typed client (``runtimes.client``), in-process
    against the host's app, where the watch is an event stream; through a target's own
    front door (AWS: Lambda cannot stream, so the client falls back to the long poll),
    also for a submission mailed while another invocation holds the actor."""
    clock = VirtualClock()
    host = target.host(kit_config(), clock)
    app = create_app(host, ApiConfig(KIT_TOKEN))
    await host.start()
    transport = StreamingASGITransport(app)

    async def ticking() -> None:
        # The virtual clock paces watch wake-ups: let it move while the script runs.
        while True:
            await asyncio.sleep(0.005)
            clock.advance(50)

    ticker = asyncio.ensure_future(ticking())
    try:
        async with ActorClient("http://kit", KIT_TOKEN, transport=transport) as client:
            assert await _bounded(client_script(client, "kit-c", "kit-c1")) == "sse"
    finally:
        ticker.cancel()
        await asyncio.gather(ticker, return_exceptions=True)
        await host.close()
    front_door: Callable[[ActorConfig, Clock], httpx.AsyncBaseTransport] | None = getattr(
        target, "front_door", None
    )
    if front_door is None:
        return
    door = front_door(kit_config(), VirtualClock())
    async with ActorClient("http://kit", KIT_TOKEN, transport=door) as client:
        assert await _bounded(client_script(client, "kit-c", "kit-c2")) == "poll"
        holder = target.host(kit_config(), VirtualClock())
        await holder.start()
        held = AsyncExitStack()  # the other invocation's hold on the actor

        async def free(accepted: Accepted) -> None:
            assert accepted.id is None and accepted.status == "mailed", accepted
            await held.aclose()
            await holder.close()  # the actor is free: the next invocation drains its mail

        try:
            harness = await held.enter_async_context(holder.use("kit-cm", create=True))
            await harness.root(agent=dict(KIT_AGENT))
            await _bounded(client_script(client, "kit-cm", "kit-cm1", submitted=free))
        finally:
            await held.aclose()
            await holder.close()


HOST_CHECKS: list[Callable[[KitTarget], Awaitable[None]]] = [
    check_submit_tool_answer,
    check_submission_shape,
    check_request_id_dedupes_across_reopen,
    check_killed_mid_tools_resumes,
    check_evicted_mid_tools_resumes,
    check_reminder_across_eviction_fires_once,
    check_idle_park_keeps_next_wake,
    check_bad_input_writes_nothing,
    check_second_writer_is_refused,
    check_deltas_long_poll,
    check_forged_cursors_are_refused,
    check_schedule_fires_each_occurrence_once,
    check_schedules_share_the_actor_s_one_wake,
    check_client_script,
    check_actor_listing_pages,
]
"""Every check, for a host's test suite to parametrize over."""
