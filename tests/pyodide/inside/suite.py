"""The Cloudflare runtime's checks inside real Pyodide (run by ``tests/pyodide/run.py``).

Runs in Pyodide's own event loop, as in workerd. Each check raises on failure; ``main``
collects them into one JSON result with the timings the benchmark needs.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import traceback
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel

from core.faux import FauxModel, FauxState, faux_message, faux_tool_call
from core.harness import (
    AssistantMessage,
    Extension,
    Harness,
    ModelRequest,
    Registry,
    ToolContext,
    ToolResultMessage,
    define_extension,
    define_tool,
)
from core.storage import MemoryStorage, Storage
from core.testing.clock import VirtualClock
from core.testing.storage_conformance import storage_cases
from core.testing.wrappers import ReopeningStorage
from runtimes.actor import ActorConfig
from runtimes.cloudflare.storage import DurableObjectDatabase
from tests.pyodide.inside import workload
from tests.pyodide.inside.durable import Home, js_request, main_thread_cpu_ms, node_cpu_ms

Check = Callable[[dict[str, Any]], Awaitable[dict[str, Any] | None]]
_CHECKS: list[tuple[str, Check]] = []


def check(fn: Check) -> Check:
    _CHECKS.append((fn.__name__, fn))
    return fn


def _path(options: dict[str, Any], name: str) -> str:
    return f"{options['scratch']}/{name}"


@check
async def cold_start_10k(options: dict[str, Any]) -> dict[str, Any] | None:
    """Open a harness on the actor CPython built with 10,000 entries (a copy of it).

    Runs first, so its time includes every first-use cost a fresh isolate pays."""
    if not options.get("long_actor"):
        return None
    home = Home(options["long_actor"])
    result = await workload.cold_open(home.storage)
    assert result["entries"] >= int(options.get("entries", 10_000)), result
    return result


def _wasm_heap_mb() -> float:
    import pyodide_js  # type: ignore[import-not-found]

    return float(pyodide_js._module.HEAP8.length) / (1024 * 1024)


@check
async def busy_durable_object_memory(options: dict[str, Any]) -> dict[str, Any] | None:
    """One busy Durable Object: the runtime's host (``DurableActor``) on the 10,000-entry
    actor, its heartbeat armed, running tool rounds on the long conversation (each model
    request carries the whole transcript). Runs right after the cold start, so the wasm
    heap then is Pyodide's baseline + the imports + this one object; the heap never
    shrinks, so its size is an upper bound of what the object needed at its peak.
    run.py runs it in a Pyodide process of its own, after the cold start: the number is
    then this one object's, and the main suite stays below the heap size at which
    Node 20's V8 aborted later checks (a fatal error in its deoptimizer, seen with the
    heap grown to 75-90 MB)."""
    if not options.get("long_actor"):
        return None
    rounds = min(int(options.get("rounds", 50)), 50)
    import importlib

    # Every module the deployed entry imports (the HTTP app and the adapters included:
    # a busy object serves requests), so the number is Pyodide's baseline + all imports
    # + this one object.
    for module in (*workload.DEPLOYED_MODULES, "runtimes.cloudflare.worker"):
        importlib.import_module(module)

    def step(request: ModelRequest, state: FauxState) -> AssistantMessage:
        if state.call_count <= rounds:
            return faux_message(faux_tool_call("noop", {}, id=f"busy_{state.call_count}"))
        return faux_message("done")

    from runtimes.cloudflare.actor import DurableActor

    home = Home(options["long_actor"])
    config = ActorConfig(
        models=FauxModel([step] * (rounds + 1), record_requests=False),
        extensions=[workload.noop_extension()],
    )
    before = _wasm_heap_mb()
    actor = DurableActor(
        home.state().storage,
        config,
        clock=VirtualClock(),
        alarm_report=lambda r: None,
        actor="long",
    )
    async with actor.serving() as harness:
        root = await harness.root()
        record = await (await root.submit("busy")).wait()
    assert record.status == "done", record
    await actor.settle()
    await actor.close()
    baseline = float(options["timings"]["heap_baseline_mb"])
    heap = _wasm_heap_mb()
    return {
        "rounds": rounds,
        "wasm_heap_before_mb": before,
        "wasm_heap_mb": heap,
        "over_pyodide_baseline_mb": heap - baseline,
    }


@check
async def storage_kit(options: dict[str, Any]) -> dict[str, Any]:
    """The whole storage conformance kit on ``self.ctx.storage`` as the SDK hands it over:
    the facade's native path, plain and evicted after every commit, and its portable
    path through the SDK's wrapper."""
    db = DurableObjectDatabase(Home(_path(options, "native.sqlite")).state().storage)
    assert db.native, "the facade no longer finds the JS storage behind the SDK wrapper"
    runs = 0
    for i, case in enumerate(storage_cases()):
        for variant in ("native", "evicting", "sdk"):
            home = Home(_path(options, f"kit-{variant}-{i}.sqlite"))
            storage: Storage
            if variant == "evicting":
                storage = await ReopeningStorage.open(home.storage)
            else:
                storage = await home.storage(native=variant == "native")
            try:
                await case.run(storage)
            finally:
                await storage.close()
            runs += 1
    return {"case_runs": runs}


@check
async def sql_limits_bite(options: dict[str, Any]) -> None:
    """The JS stand-in refuses what workerd refuses, as seen from Python."""
    sql = Home(_path(options, "limits.sqlite")).state().storage.sql
    sql.exec("CREATE TABLE t (v TEXT)")
    refusals = {
        "BEGIN": (),
        "SAVEPOINT s": (),
        "PRAGMA journal_mode = WAL": (),
        "INSERT INTO t (v) VALUES (?)": ("x" * 2_000_001,),
        "SELECT " + ", ".join("?" * 101): tuple(range(101)),
        "SELECT 1 -- " + "x" * 100_000: (),
    }
    for statement, binds in refusals.items():
        try:
            sql.exec(statement, *binds)
        except Exception:
            continue
        raise AssertionError(f"the stand-in accepted {statement[:40]!r}")


def _travel_extension(effects: list[str], gate: asyncio.Event) -> Extension:
    class Route(BaseModel):
        route: str

    class Train(BaseModel):
        train: str

    async def search(args: Route, ctx: ToolContext) -> str:
        effects.append("search start")
        await gate.wait()
        return f"Train IC 511 {args.route} departs 10:02"

    async def book(args: Train, ctx: ToolContext) -> str:
        effects.append("book start")
        await gate.wait()
        return f"Booked a seat on {args.train}"

    return define_extension(
        "travel",
        tools=[
            define_tool(
                "search",
                description="Search",
                parameters=Route,
                execute=search,
                replay="safe",
            ),
            define_tool("book", description="Book", parameters=Train, execute=book),
        ],
    )


def _travel(effects: list[str], gate: asyncio.Event) -> Registry:
    return Registry([_travel_extension(effects, gate)])


def _travel_model(seen: list[list[dict[str, Any]]]) -> FauxModel:
    def model(request: ModelRequest, state: FauxState) -> AssistantMessage:
        if request.messages[-1].role == "user":
            return faux_message(
                "Searching and booking.",
                faux_tool_call("search", {"route": "Vienna-Graz"}, id="call_search"),
                faux_tool_call("book", {"train": "IC 511"}, id="call_book"),
            )
        seen.append(
            [
                {"tool": m.tool_name, "error": m.is_error, "content": m.content}
                for m in request.messages
                if isinstance(m, ToolResultMessage)
            ]
        )
        return faux_message("The search worked; the booking was interrupted.")

    return FauxModel(fallback=model)


@check
async def seed_scenario_across_eviction(options: dict[str, Any]) -> dict[str, Any]:
    """search (safe) and book (unsafe) run; the isolate is evicted; a new one resumes:
    search reruns, book is reported interrupted, job-42 resent returns the original."""
    home = Home(_path(options, "seed.sqlite"))
    clock = VirtualClock()
    effects: list[str] = []
    stuck = asyncio.Event()  # never set: the first isolate's tools hang until evicted
    seen: list[list[dict[str, Any]]] = []
    first = await Harness.open(
        await home.storage(),
        models=_travel_model(seen),
        registry=_travel(effects, stuck),
        clock=clock,
        report=lambda error: None,  # it dies with its isolate; errors expected
    )
    root = await first.root(agent={"model": workload.MODEL})
    sub = await root.submit("Find a train to Graz and book it", request_id="job-42")
    for _ in range(200):
        if {"search start", "book start"} <= set(effects):
            break
        await asyncio.sleep(0)
    assert sorted(effects) == ["book start", "search start"], effects

    free = asyncio.Event()
    free.set()
    second = await Harness.open(  # home.storage() evicts the first isolate
        await home.storage(),
        models=_travel_model(seen),
        registry=_travel(effects, free),
        clock=clock,
    )
    # The first isolate is gone; stop its leftovers here (workerd would drop them whole).
    with contextlib.suppress(Exception):
        await first.close()
    second.resume()
    root = await second.root()
    again = await root.submit("Find a train to Graz and book it", request_id="job-42")
    assert again.id == sub.id, (again.id, sub.id)
    record = await again.wait()
    assert record.status == "done", record
    assert sorted(effects) == ["book start", "search start", "search start"], effects
    (results,) = seen
    by_tool = {r["tool"]: r for r in results}
    assert not by_tool["search"]["error"]
    assert by_tool["book"]["error"]
    assert "interrupted" in str(by_tool["book"]["content"])
    await second.close()
    return {"effects": effects}


async def _answer(h: Harness, entry_id: int | None) -> str:
    entry = await h.session.storage.entry(entry_id or 0)
    assert entry is not None and isinstance(entry.message, dict), entry
    content = entry.message["content"]
    return "".join(b["text"] for b in content) if isinstance(content, list) else str(content)


@check
async def harness_smoke_and_reopen(options: dict[str, Any]) -> dict[str, Any]:
    """Open → submit → tool → answer → close; a new isolate reopens and continues."""
    home = Home(_path(options, "smoke.sqlite"))
    t0 = time.perf_counter()
    storage = await home.storage()
    faux = FauxModel(
        [faux_message(faux_tool_call("noop", {}, id="c1")), faux_message("first answer")],
        fallback=lambda r, s: faux_message("later answer"),
    )
    h = await Harness.open(
        storage, models=faux, registry=workload.noop_registry(), clock=VirtualClock()
    )
    root = await h.root(agent={"model": workload.MODEL})
    opened_ms = (time.perf_counter() - t0) * 1000
    record = await (await root.submit("hello", request_id="r1")).wait()
    assert record.status == "done" and await _answer(h, record.answer) == "first answer", record
    await h.close()
    h = await Harness.open(
        await home.storage(), models=faux, registry=workload.noop_registry(), clock=VirtualClock()
    )
    h.resume()
    root = await h.root()
    assert (await root.submit("hello", request_id="r1")).id == record.id  # deduped
    second = await (await root.submit("again")).wait()
    assert await _answer(h, second.answer) == "later answer", second
    await h.close()
    return {"fresh_open_harness_ms": opened_ms}


@check
async def tool_rounds(options: dict[str, Any]) -> dict[str, Any]:
    rounds = int(options.get("rounds", 100))
    native = await workload.tool_rounds(
        await Home(_path(options, "rounds.sqlite")).storage(), rounds
    )
    sdk = await workload.tool_rounds(
        await Home(_path(options, "rounds-sdk.sqlite")).storage(native=False), rounds
    )
    memory = min(
        [await workload.tool_rounds(MemoryStorage(), rounds) for _ in range(3)],
        key=lambda r: r["ms_per_round"],
    )
    return {
        "rounds": rounds,
        **native,
        "through_sdk_wrapper_ms_per_round": sdk["ms_per_round"],
        "memory_storage_ms_per_round": memory["ms_per_round"],
    }


@check
async def durable_object_round_costs(options: dict[str, Any]) -> dict[str, Any]:
    """What a tool round costs the Durable Object (workload.durable_rounds), counted by
    the JS stand-in behind the real SDK: a safe and an unsafe tool."""
    rounds = int(options.get("cost_rounds", 50))
    out: dict[str, Any] = {}
    # Two warm-ups: V8 compiles the hot WebAssembly again, optimised, in the background
    # during the first runs; not reported.
    for run in ("warm-up-1", "warm-up-2", "safe", "unsafe"):
        # Not CPython's files: each side counts a new actor's first submission.
        home = Home(_path(options, f"costs-pyodide-{run}.sqlite"))
        state = home.state()

        def counters(js: Any = home.js) -> dict[str, float]:
            storage = js.current.storage
            return {
                "statements": int(storage.sql.statements),
                "rows_read": int(storage.sql.rowsRead),
                "rows_written": int(storage.sql.rowsWritten),
                "transactions": int(storage.transactions),
                "alarm_calls": int(js.alarmSets) + int(js.alarmDeletes),
                "process_cpu_ms": node_cpu_ms(),  # Node's other threads included
            }

        out[run] = await workload.durable_rounds(
            state.storage,
            counters,
            rounds,
            replay="safe" if run.startswith("warm-up") else run,
            cpu_ms=main_thread_cpu_ms,
        )
    return {replay: out[replay] for replay in ("safe", "unsafe")}


TOKEN = "pyodide-suite-token-0123456789"
ROUTES = [  # a few of the actor API's routes (its router is not importable here yet)
    ("POST", "/v1/actors/{actor}/submissions", True),  # needs a body
    ("GET", "/v1/actors/{actor}/submissions/{submission_id}"),
    ("GET", "/v1/actors/{actor}/tasks"),
    ("PATCH", "/v1/actors/{actor}/conversations/{conversation_id}/agent"),
]


@check
async def worker_front_door(options: dict[str, Any]) -> dict[str, Any]:
    """The real entry class on the real SDK: refusals never address a Durable Object;
    an admitted request reaches ``getByName(actor)`` with its body intact."""
    from js import Object  # type: ignore[import-not-found]
    from perdure_do_standin import DurableObjectNamespace  # type: ignore[import-not-found]
    from pyodide.ffi import to_js  # type: ignore[import-not-found]

    from runtimes.cloudflare import worker
    from runtimes.cloudflare.front_door import RouteTable

    worker.configure(_travel_config([]), routes=RouteTable.from_routes(ROUTES))
    namespace = DurableObjectNamespace.new()
    env = to_js(
        {"PERDURE_API_TOKEN": TOKEN, "ACTORS": namespace, "PERDURE_MAX_BODY_BYTES": "2000"},
        dict_converter=Object.fromEntries,
    )
    entry = worker.Default(to_js({}, dict_converter=Object.fromEntries), env)
    auth = {"authorization": f"Bearer {TOKEN}"}
    as_json = {**auth, "content-type": "application/json"}
    refused = [
        ("GET", "/v1/actors/alice/tasks", {}, None, 401, "unauthorized"),
        (
            "GET",
            "/v1/actors/alice/tasks",
            {"authorization": "Bearer wrong"},
            None,
            401,
            "unauthorized",
        ),
        ("GET", "/v1/actors/al.ce/tasks", auth, None, 400, "invalid_actor"),
        ("GET", "/v1/actors/alice/nowhere", auth, None, 404, "no_route"),
        ("POST", "/v1/actors/alice/submissions", as_json, "{broken", 400, "malformed_json"),
        ("POST", "/v1/actors/alice/submissions", as_json, "x" * 2001, 413, "body_too_large"),
        # Refused by the app without its actor: refused here, so no object is created.
        ("POST", "/v1/actors/alice/submissions", as_json, None, 422, "invalid"),
        ("POST", "/v1/actors/alice/submissions", as_json, "", 422, "invalid"),
        (
            "POST",
            "/v1/actors/alice/submissions",
            as_json,
            '{"type": "write", "type": "input", "content": "x"}',
            422,
            "invalid",
        ),
    ]
    for method, path, headers, body, status, code in refused:
        response = await entry.fetch(js_request(method, path, headers, body))
        got = await response.json()
        assert (response.status, got["error"]["code"]) == (status, code), (path, got)
    assert list(namespace.addressed) == [], "a refused request addressed a Durable Object"
    payload = '{"type": "input", "content": "hi"}'
    response = await entry.fetch(
        js_request("POST", "/v1/actors/alice/submissions", as_json, payload)
    )
    assert response.status == 200 and (await response.json()) == {"forwarded": "alice"}
    assert [list(f) for f in namespace.fetched] == [
        ["alice", "POST", "/v1/actors/alice/submissions", payload]
    ]
    return {"refusals": len(refused)}


@check
async def worker_scoped_tokens(options: dict[str, Any]) -> dict[str, Any]:
    """Scoped tokens and the CORS allow-list at the real entry class: a token outside its
    scope, expired or forged is refused before any Durable Object is addressed; one in
    scope is forwarded; a preflight from an allowed origin is answered at the door."""
    import time as clock

    from js import Object  # type: ignore[import-not-found]
    from perdure_do_standin import DurableObjectNamespace  # type: ignore[import-not-found]
    from pyodide.ffi import to_js  # type: ignore[import-not-found]

    from runtimes.actor.scopes import ROUTE_RIGHTS
    from runtimes.actor.tokens import SigningKeys
    from runtimes.cloudflare import worker
    from runtimes.cloudflare.front_door import RouteTable

    # The door's own table routes every actor route the rights table maps.
    table = worker.api_routes()
    for method, template in ROUTE_RIGHTS:
        if template.startswith("/v1/actors/{actor}/"):
            rest = template.removeprefix("/v1/actors/{actor}")
            sample = rest.replace("{conversation_id}", "1").replace("{submission_id}", "1")
            allowed = table.allowed(sample.replace("{task_id}", "1"))
            assert allowed is not None and method in allowed, (method, template)
    worker.configure(_travel_config([]), routes=RouteTable.from_routes(ROUTES))
    namespace = DurableObjectNamespace.new()
    app = "https://app.example.com"
    keys = "newest-key-0123456789,older-key-0123456789"
    env = to_js(
        {
            "PERDURE_API_TOKEN": TOKEN,
            "ACTORS": namespace,
            "PERDURE_TOKEN_KEYS": keys,
            "PERDURE_CORS_ORIGINS": app,
        },
        dict_converter=Object.fromEntries,
    )
    entry = worker.Default(to_js({}, dict_converter=Object.fromEntries), env)
    newest, older = (SigningKeys([k]) for k in keys.split(","))
    read = newest.mint("alice", "read", 60)
    as_json = {"content-type": "application/json", "origin": app}
    payload = '{"type": "input", "content": "hi"}'
    refused = [
        ("POST", "/v1/actors/alice/submissions", read, 403),
        ("GET", "/v1/actors/bob/tasks", read, 403),
        ("GET", "/v1/actors/alice/tasks", newest.mint("alice", "read", 60, now=1), 401),
        (
            "GET",
            "/v1/actors/alice/tasks",
            SigningKeys.for_host(TOKEN).mint("alice", "read", 60),
            401,
        ),
    ]
    for method, path, token, status in refused:
        headers = {**as_json, "authorization": f"Bearer {token}"}
        body = payload if method == "POST" else None
        response = await entry.fetch(js_request(method, path, headers, body))
        assert response.status == status, (path, status, await response.text())
        assert response.headers.get("access-control-allow-origin") == app  # readable
    assert list(namespace.addressed) == [], "a refused request addressed a Durable Object"
    preflight = await entry.fetch(
        js_request(
            "OPTIONS",
            "/v1/actors/alice/submissions",
            {"origin": app, "access-control-request-method": "POST"},
        )
    )
    assert preflight.status == 200 and preflight.headers.get("access-control-allow-origin") == app
    assert list(namespace.addressed) == []
    submit = older.mint("alice", "submit", 60)  # signed by the older key: still listed
    headers = {**as_json, "authorization": f"Bearer {submit}"}
    started = clock.perf_counter()
    response = await entry.fetch(
        js_request("POST", "/v1/actors/alice/submissions", headers, payload)
    )
    assert response.status == 200 and (await response.json()) == {"forwarded": "alice"}
    admit_ms = (clock.perf_counter() - started) * 1000
    # The operator mints at the Worker itself (no object): the token works at once.
    host = {"authorization": f"Bearer {TOKEN}", "content-type": "application/json"}
    request = '{"actor": "carol", "rights": "read", "ttl_s": 60}'
    response = await entry.fetch(js_request("POST", "/v1/tokens", host, request))
    assert response.status == 201, await response.text()
    minted = (await response.json())["token"]
    assert newest.verify(minted).actor == "carol"  # signed with the newest key
    with_read = {"authorization": f"Bearer {minted}"}
    response = await entry.fetch(js_request("GET", "/v1/actors/carol/tasks", with_read))
    assert response.status == 200 and (await response.json()) == {"forwarded": "carol"}
    scoped = {"authorization": f"Bearer {read}", "content-type": "application/json"}
    response = await entry.fetch(js_request("POST", "/v1/tokens", scoped, request))
    assert response.status == 403
    return {"refusals": len(refused), "admit_ms": admit_ms}


def _travel_config(effects: list[str], gate: asyncio.Event | None = None) -> ActorConfig:
    seen: list[list[dict[str, Any]]] = []
    free = gate or asyncio.Event()
    if gate is None:
        free.set()
    return ActorConfig(
        models=_travel_model(seen),
        extensions=[_travel_extension(effects, free)],
        default_agent={"model": workload.MODEL},
        report=lambda actor, error: None,
    )


def _env() -> Any:
    from js import Object  # type: ignore[import-not-found]
    from pyodide.ffi import to_js  # type: ignore[import-not-found]

    return to_js({"PERDURE_API_TOKEN": TOKEN}, dict_converter=Object.fromEntries)


class _Client:
    """Requests to one Durable Object instance's ``fetch`` (a JS ``Request`` in, the
    SDK bridge's JS ``Response`` out), as the front door's stub would send them."""

    def __init__(self, obj: Any, actor: str) -> None:
        self.obj = obj
        self.base = f"/v1/actors/{actor}"

    async def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        import json

        headers = {"authorization": f"Bearer {TOKEN}"}
        text = None
        if body is not None:
            headers["content-type"] = "application/json"
            text = json.dumps(body)
        response = await self.obj.fetch(js_request(method, self.base + path, headers, text))
        raw = await response.text()
        return int(response.status), json.loads(raw) if raw else None

    async def settled(self, sid: int) -> dict[str, Any]:
        for _ in range(200):
            status, state = await self.call("GET", f"/submissions/{sid}?wait=1")
            assert status == 200, (status, state)
            if state["status"] in ("done", "unanswered"):
                return dict(state)
            await asyncio.sleep(0.01)
        raise AssertionError(f"submission {sid} did not settle")


@check
async def kit_submit_tool_answer_over_the_bridge(options: dict[str, Any]) -> dict[str, Any]:
    """The kit's agent on the real ``PerdureActor``: submit → the three tools → the
    answer, every call HTTP through ``workers.asgi.fetch`` into the actor API app."""
    from runtimes.actor.testing import KitTools, kit_config
    from runtimes.cloudflare import worker

    tools = KitTools()
    worker.configure(kit_config(tools))
    home = Home(_path(options, "kit-bridge.sqlite"), "kit-a")
    obj = worker.PerdureActor(home.js.open(), _env())
    client = _Client(obj, "kit-a")
    status, accepted = await client.call(
        "POST", "/submissions", {"type": "input", "content": "tools"}
    )
    assert status == 202 and accepted["status"] in ("placed", "queued"), (status, accepted)
    state = await client.settled(accepted["id"])
    assert state["status"] == "done", state
    assert state["answer"]["text"] == "done: found train; booked seat; ran hold seat", state
    assert dict(tools.runs) == {"kit_search": 1, "kit_book": 1, "kit_hold": 1}, tools.runs
    status, refused = await client.call("POST", "/submissions", {"type": "input", "content": ""})
    assert status == 422 and refused["error"]["code"], (status, refused)  # the app's own 4xx
    await obj.host.close()
    return {"answer": state["answer"]["text"]}


async def _fire_alarm(home: Home, obj: Any, tries: int = 7) -> int:
    """workerd's delivery: clear the alarm, call ``alarm()``, retry (up to 6 times, no
    backoff here) while it throws. Returns the attempts made."""
    home.js.alarm = None
    for attempt in range(tries):
        try:
            await obj.alarm(to_js_info(attempt))
            return attempt + 1
        except Exception:
            continue
    return tries


def to_js_info(attempt: int) -> Any:
    from js import Object  # type: ignore[import-not-found]
    from pyodide.ffi import to_js  # type: ignore[import-not-found]

    return to_js({"retryCount": attempt, "isRetry": attempt > 0}, dict_converter=Object.fromEntries)


@check
async def durable_object_class_evicted_then_alarm(options: dict[str, Any]) -> dict[str, Any]:
    """The seed scenario on the real ``PerdureActor`` class, through HTTP on the SDK
    bridge: job-42 starts search (safe) and book (unsafe); the isolate is evicted while
    both run; the heartbeat alarm fires on a new instance, which re-opens and resumes:
    search reruns, book is reported interrupted; job-42 resent returns the original."""
    from runtimes.cloudflare import worker

    home = Home(_path(options, "do-class.sqlite"), "tree-7")
    effects: list[str] = []
    stuck = asyncio.Event()
    worker.configure(_travel_config(effects, stuck))
    first = worker.PerdureActor(home.js.open(), _env())
    job = {"type": "input", "content": "Find a train to Graz and book it", "request_id": "job-42"}
    status, accepted = await _Client(first, "tree-7").call("POST", "/submissions", job)
    assert status == 202, (status, accepted)
    for _ in range(500):
        if {"search start", "book start"} <= set(effects):
            break
        await asyncio.sleep(0)
    await first.host.settle()
    assert home.js.alarm is not None  # the heartbeat while the tools run

    worker.configure(_travel_config(effects))
    second = worker.PerdureActor(home.js.open(), _env())  # evicted: a new isolate, same file
    with contextlib.suppress(Exception):
        await first.host.close()
    attempts = await _fire_alarm(home, second)
    assert attempts == 1 and second.host.is_open
    client = _Client(second, "tree-7")
    status, again = await client.call("POST", "/submissions", job)
    assert status == 202 and again["id"] == accepted["id"], (status, again, accepted)
    state = await client.settled(again["id"])
    assert state["status"] == "done", state
    assert sorted(effects) == ["book start", "search start", "search start"], effects
    status, view = await client.call("GET", "/conversations/1/view")
    results = {
        e["message"]["tool_name"]: e["message"]
        for e in view["entries"]
        if e["kind"] == "tool_result"
    }
    assert not results["search"]["is_error"], results
    assert results["book"]["is_error"] and "interrupted" in str(results["book"]["content"])
    await second.host.settle()
    await second.host.close()
    return {"alarm_attempts": attempts}


@check
async def reminder_fires_after_an_eviction(options: dict[str, Any]) -> dict[str, Any]:
    """A reminder set over HTTP on the real ``PerdureActor`` arms the alarm at its time;
    the isolate is evicted; the alarm fires on a new instance, which re-opens the actor
    and delivers the reminder; delivered again, it fires nothing more."""
    from runtimes.cloudflare import worker

    home = Home(_path(options, "do-remind.sqlite"), "tree-r")
    worker.configure(
        ActorConfig(
            models=FauxModel(fallback=lambda r, s: faux_message("noted")),
            default_agent={"model": workload.MODEL},
        )
    )
    first = _instance(home, _env())
    client = _Client(first, "tree-r")
    status, accepted = await client.call("POST", "/submissions", {"type": "input", "content": "hi"})
    await client.settled(accepted["id"])
    status, reminder = await client.call(
        "POST", "/conversations/1/reminders", {"message": "ping", "after": 0.3}
    )
    assert status == 201, (status, reminder)
    await first.host.settle()
    assert home.js.alarm == reminder["at"], (home.js.alarm, reminder)  # armed exactly

    second = _instance(home, _env())  # evicted: a new isolate on the same file
    with contextlib.suppress(Exception):
        await first.host.close()
    assert not second.host.is_open
    await asyncio.sleep(max(0.0, (reminder["at"] - time.time() * 1000) / 1000) + 0.05)
    assert await _fire_alarm(home, second) == 1 and second.host.is_open
    client = _Client(second, "tree-r")

    async def users() -> list[str]:
        _, view = await client.call("GET", "/conversations/1/view")
        return [str(e["message"]["content"]) for e in view["entries"] if e["kind"] == "user"]

    for _ in range(200):
        if any("ping" in u for u in await users()):
            break
        await asyncio.sleep(0.01)
    await _fire_alarm(home, second)  # delivered twice
    await second.host.settle()
    fired = [u for u in await users() if "ping" in u]
    assert len(fired) == 1, await users()
    status, timers = await client.call("GET", "/timers")
    assert status == 200 and not [t for t in timers["timers"] if t["task"] == reminder["task"]]
    await second.host.close()
    return {"reminder_task": reminder["task"]}


@check
async def hibernatable_watch_on_the_durable_object(options: dict[str, Any]) -> dict[str, Any]:
    """The real ``PerdureActor``'s watch hub on the JS ``ctx``: an accepted socket gets
    the view, then deltas; a new isolate (the socket still connected) sends it the
    current view first when the socket's next message wakes the object."""
    import json

    from perdure_do_standin import StandinWebSocket  # type: ignore[import-not-found]

    from runtimes.cloudflare import worker

    home = Home(_path(options, "do-watch.sqlite"), "tree-9")
    worker.configure(_travel_config([]))
    first = worker.PerdureActor(home.js.open(), _env())
    client = _Client(first, "tree-9")
    status, accepted = await client.call("POST", "/submissions", {"type": "input", "content": "hi"})
    assert status == 202, accepted
    await client.settled(accepted["id"])
    ws = StandinWebSocket.new()
    await first.hub.accept(ws, "tree-9", 1)

    def kinds() -> list[str]:
        return [json.loads(m)["type"] for m in ws.sent]

    for _ in range(500):
        if kinds():
            break
        await asyncio.sleep(0)
    assert kinds() == ["view"], kinds()
    status, again = await client.call("POST", "/submissions", {"type": "input", "content": "more"})
    await client.settled(again["id"])
    for _ in range(500):
        if "delta" in kinds():
            break
        await asyncio.sleep(0)
    assert kinds()[0] == "view" and set(kinds()[1:]) == {"delta"}, kinds()
    await first.hub.stop_all()
    await first.host.close()

    second = worker.PerdureActor(home.js.open(), _env())  # evicted; the socket stays
    before = len(ws.sent)
    await second.webSocketMessage(ws, "hello")
    for _ in range(500):
        if len(ws.sent) > before:
            break
        await asyncio.sleep(0)
    frame = json.loads(ws.sent[before])
    assert frame["type"] == "view", frame
    users = [e for e in frame["value"]["entries"] if e["kind"] == "user"]
    assert len(users) == 2, frame  # the current view, everything so far
    await second.webSocketClose(ws, 1000, "bye", True)
    assert list(ws.closed) == [1000, "bye"] and second.hub.pumping == 0
    await second.host.close()
    return {"frames": len(ws.sent)}


async def _until(predicate: Callable[[], bool], what: str, turns: int = 2000) -> None:
    for _ in range(turns):
        if predicate():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"not reached: {what}")


def _instance(home: Home, env: Any) -> Any:
    """A new instance of the Durable Object on ``home`` (the last one is gone), which
    the object's hibernatable sockets now deliver to, as workerd routes them."""
    from pyodide.ffi import create_proxy  # type: ignore[import-not-found]

    from runtimes.cloudflare import worker

    obj = worker.PerdureActor(home.js.open(), env)
    home.js.attach(create_proxy(obj))
    return obj


@check
async def websocket_upgrade_survives_hibernation(options: dict[str, Any]) -> dict[str, Any]:
    """The upgrade branch of ``PerdureActor.fetch`` on workerd's ``WebSocketPair`` and
    101 response (the JS stand-ins): the client gets the view, then deltas; the instance
    is dropped (hibernation: no pump, no isolate state) while the client stays connected;
    a new instance woken by a request sends it the current view first, then the deltas
    of that request; the client's own message reaches the new instance's
    ``webSocketMessage``; its close reaches ``webSocketClose``."""
    import json

    from runtimes.cloudflare import worker

    home = Home(_path(options, "do-upgrade.sqlite"), "tree-u")
    worker.configure(_travel_config([]))
    first = _instance(home, _env())
    client = _Client(first, "tree-u")
    status, accepted = await client.call("POST", "/submissions", {"type": "input", "content": "a"})
    assert status == 202, accepted
    await client.settled(accepted["id"])

    headers = {"authorization": f"Bearer {TOKEN}", "upgrade": "websocket"}
    refused = await first.fetch(
        js_request("GET", "/v1/actors/tree-u/conversations/1/watch", {"upgrade": "websocket"})
    )
    assert refused.status == 401, refused.status  # the upgrade checks auth too
    missing = await first.fetch(
        js_request("GET", "/v1/actors/tree-u/conversations/99/watch", headers)
    )
    assert missing.status == 404, missing.status  # refused before accepting
    response = await first.fetch(
        js_request("GET", "/v1/actors/tree-u/conversations/1/watch", headers)
    )
    assert response.status == 101, response.status
    socket = response.webSocket

    def frames() -> list[dict[str, Any]]:
        return [json.loads(m) for m in socket.received]

    await _until(lambda: len(frames()) >= 1, "the first frame")
    assert [f["type"] for f in frames()] == ["view"], frames()
    status, more = await client.call("POST", "/submissions", {"type": "input", "content": "b"})
    await client.settled(more["id"])
    await _until(lambda: any(f["type"] == "delta" for f in frames()), "a delta")
    assert {f["type"] for f in frames()[1:]} == {"delta"}, frames()

    # Hibernation: the instance and everything it held in memory are gone.
    await first.hub.stop_all()
    await first.host.close()
    seen = len(socket.received)
    second = _instance(home, _env())
    assert second.hub.pumping == 0
    status, late = await _Client(second, "tree-u").call(
        "POST", "/submissions", {"type": "input", "content": "c"}
    )
    assert status == 202, late
    await _Client(second, "tree-u").settled(late["id"])
    await _until(
        lambda: any(f["type"] == "delta" for f in frames()[seen + 1 :]), "deltas after the wake"
    )
    after = frames()[seen:]
    assert after[0]["type"] == "view", after[0]  # the current view first...
    assert {f["type"] for f in after[1:]} == {"delta"}, after  # ...then deltas
    status, view = await _Client(second, "tree-u").call("GET", "/conversations/1/view")
    assert len([e for e in view["entries"] if e["kind"] == "user"]) == 3, view

    # Dropped again; this time the client's message is what wakes the object.
    await second.hub.stop_all()
    await second.host.close()
    third = _instance(home, _env())
    seen = len(socket.received)
    socket.send("sync")
    await socket.delivered()
    await _until(lambda: len(socket.received) > seen, "the view after the client's message")
    frame = frames()[seen]
    assert frame["type"] == "view", frame
    assert len([e for e in frame["value"]["entries"] if e["kind"] == "user"]) == 3, frame
    socket.close(1000, "bye")
    await socket.delivered()
    assert third.hub.pumping == 0
    server_end = home.js.sockets[0][0]
    assert list(server_end.closed) == [1000, "bye"], server_end.closed
    await third.host.close()
    return {"frames": len(socket.received)}


@check
async def model_over_fetch_to_a_real_server(options: dict[str, Any]) -> dict[str, Any] | None:
    """A harness turn whose model is the OpenAI-compatible httpx adapter over
    :class:`FetchTransport`: Node's ``fetch`` reaches a real streaming server on
    127.0.0.1 (started by run.py on CPython)."""
    base_url = options.get("openai_base_url")
    if not base_url:
        raise AssertionError("run.py did not start the OpenAI-compatible server")
    from core.harness import ModelInfo
    from runtimes.cloudflare.fetch_transport import FetchTransport
    from runtimes.models.openai_http import OpenAICompatibleModels, OpenAIModel

    info = ModelInfo(id="openai/fake", context_window=8192, max_tokens=512)
    route = OpenAIModel(info=info, base_url=base_url, api_key="sk-test", model="gpt-fake")
    models = OpenAICompatibleModels({info.id: route}, transport=FetchTransport())
    harness = await Harness.open(
        MemoryStorage(), models=models, registry=Registry([]), clock=VirtualClock()
    )
    try:
        root = await harness.root(agent={"model": info.id})
        record = await (await root.submit("hello over fetch")).wait()
        assert record.status == "done", record
        answer = await _answer(harness, record.answer)
        assert answer == "Hello from 127.0.0.1", answer
    finally:
        await harness.close()
        await models.aclose()
    return {"answer": answer}


@check
async def mcp_tools_over_fetch_on_the_durable_object(options: dict[str, Any]) -> dict[str, Any]:
    """MCP tools on the real ``PerdureActor``: the MCP client over httpx alone
    (``runtimes.mcp.http_client``; the ``mcp`` SDK does not import here) with
    :class:`FetchTransport` lists and calls the tools of a real MCP server (the SDK's,
    on 127.0.0.1, started by run.py), its bearer token a Worker secret
    (``worker_secret``); after an eviction a new instance offers the tools from the
    actor's listing and calls one without listing again."""
    url = options.get("mcp_url")
    if not url:
        raise AssertionError("run.py did not start the MCP server")
    from core.harness import ToolResultMessage
    from runtimes.cloudflare import worker
    from runtimes.cloudflare.fetch_transport import FetchTransport
    from runtimes.mcp import McpServer, mcp_extension
    from runtimes.mcp.http_client import HttpConnector

    listings: list[str] = []
    offered: list[list[str]] = []

    class Counting(HttpConnector):
        async def list_tools(self, server: Any, headers: Any) -> Any:
            listings.append(server.name)
            return await super().list_tools(server, headers)

    def step(request: ModelRequest, state: FauxState) -> AssistantMessage:
        last = request.messages[-1]
        if isinstance(last, ToolResultMessage):
            return faux_message(f"result: {last.content}")
        offered.append(sorted(t.name for t in request.tools))
        to = str(last.content).removeprefix("search ")
        call = faux_tool_call("trains__search", {"to": to}, id=f"c{len(request.messages)}")
        return faux_message(call)

    from js import Object  # type: ignore[import-not-found]
    from pyodide.ffi import to_js  # type: ignore[import-not-found]

    env = to_js(
        {"PERDURE_API_TOKEN": TOKEN, "MCP_TRAINS_TOKEN": options["mcp_token"]},
        dict_converter=Object.fromEntries,
    )
    trains = McpServer(
        "trains",
        url,
        headers={"Authorization": "Bearer ${MCP_TRAINS_TOKEN}"},
        timeout_s=20,
    )
    mcp = mcp_extension(
        [trains],
        connector=Counting(make_transport=FetchTransport),
        secrets=worker.worker_secret,
    )
    worker.configure(
        ActorConfig(
            models=FauxModel(fallback=step),
            extensions=[mcp],
            default_agent={"model": workload.MODEL},
            report=lambda actor, error: None,
        )
    )
    home = Home(_path(options, "mcp.sqlite"), "mcp-a")
    answers = []
    for city in ("Graz", "Linz"):  # the second on a new instance: the first is evicted
        obj = worker.PerdureActor(home.js.open(), env)
        client = _Client(obj, "mcp-a")
        body = {"type": "input", "content": f"search {city}"}
        status, accepted = await client.call("POST", "/submissions", body)
        assert status == 202, (status, accepted)
        state = await client.settled(accepted["id"])
        assert state["status"] == "done", state
        answers.append(state["answer"]["text"])
        await obj.host.close()
    assert answers == [
        "result: IC 501 to Graz leaves at 09:12",
        "result: IC 501 to Linz leaves at 09:12",
    ], answers
    assert all("trains__search" in names for names in offered), offered
    assert listings == ["trains"], listings  # listed once, kept with the actor
    return {"answers": answers}


@check
async def remote_env_over_fetch_to_a_real_sandbox(options: dict[str, Any]) -> dict[str, Any]:
    """The ``remote_env`` client over :class:`FetchTransport`: a real sandbox server
    (``python -m remote_env.server`` on 127.0.0.1, started by run.py) runs a command;
    the same op id sent again answers the recorded result without running it again."""
    url, token = options.get("sandbox_url"), options.get("sandbox_token")
    if not url or not token:
        raise AssertionError("run.py did not start the sandbox server")
    from core.env import OpRef
    from remote_env.client import RemoteEnv
    from runtimes.cloudflare.fetch_transport import FetchTransport

    async with RemoteEnv(url, token, transport=FetchTransport()) as env:
        op = OpRef("9:call_fetch")
        first = await env.run_command("echo hi from the sandbox >> log.txt; cat log.txt", op=op)
        again = await env.run_command("echo hi from the sandbox >> log.txt; cat log.txt", op=op)
    assert first.exit_code == 0 and first.output.strip() == "hi from the sandbox", first
    assert again.output == first.output, (first, again)  # deduped: the line is there once
    return {"output": first.output.strip()}


@check
async def durable_object_configured_from_env(options: dict[str, Any]) -> dict[str, Any]:
    """No ``configure()``: the real ``PerdureActor`` opens its actor from the Worker's
    vars and secrets alone — the OpenAI-compatible adapter on the model server, the
    coding tools on the sandbox server with workspace tokens minted from the sandbox
    secret, both over Node's ``fetch``. The model asks for ``bash``; the command runs in
    the actor's own workspace; the model answers. A deployment missing its model vars
    is refused at the front door (503, naming them), no Durable Object addressed."""
    import json

    from js import Object  # type: ignore[import-not-found]
    from perdure_do_standin import DurableObjectNamespace  # type: ignore[import-not-found]
    from pyodide.ffi import to_js  # type: ignore[import-not-found]

    from runtimes.cloudflare import names, worker

    worker.configure_from_env()
    namespace = DurableObjectNamespace.new()
    bad = to_js(
        {names.API_TOKEN_SECRET: TOKEN, names.DURABLE_OBJECT_BINDING: namespace},
        dict_converter=Object.fromEntries,
    )
    door = worker.Default(to_js({}, dict_converter=Object.fromEntries), bad)
    headers = {"authorization": f"Bearer {TOKEN}"}
    response = await door.fetch(js_request("GET", "/v1/actors/tree-env/tasks", headers))
    body = await response.json()
    assert response.status == 503 and body["error"]["code"] == "misconfigured", body
    assert names.MODEL_VAR in body["error"]["message"], body
    assert TOKEN not in json.dumps(body.to_py() if hasattr(body, "to_py") else body)
    assert list(namespace.addressed) == []
    # An object woken anyway (an alarm armed before the configuration broke) does not
    # fail to construct: a request it gets answers the same 503, its alarm fails (left
    # to workerd's bounded retries), naming the variables.
    from runtimes.cloudflare.settings import MisconfiguredWorker

    stray = worker.PerdureActor(Home(_path(options, "do-misconfigured.sqlite")).js.open(), bad)
    response = await stray.fetch(js_request("GET", "/v1/actors/tree-env/tasks", headers))
    body = await response.json()
    assert response.status == 503 and body["error"]["code"] == "misconfigured", body
    try:
        await stray.alarm(to_js_info(0))
    except MisconfiguredWorker as error:
        assert names.MODEL_VAR in str(error), error
    else:
        raise AssertionError("a misconfigured object's alarm succeeded")

    env = to_js(
        {
            names.API_TOKEN_SECRET: TOKEN,
            names.MODEL_VAR: "gpt-env",
            names.MODEL_BASE_URL_VAR: options["openai_base_url"],
            names.MODEL_API_KEY_SECRET: "sk-from-env",
            names.SANDBOX_URL_VAR: options["sandbox_url"],
            names.SANDBOX_SECRET: options["sandbox_secret"],
        },
        dict_converter=Object.fromEntries,
    )
    home = Home(_path(options, "do-env.sqlite"), "tree-env")
    obj = _instance(home, env)
    client = _Client(obj, "tree-env")
    status, accepted = await client.call(
        "POST", "/submissions", {"type": "input", "content": "write a note"}
    )
    assert status == 202, (status, accepted)
    state = await client.settled(accepted["id"])
    assert state["status"] == "done" and state["answer"]["text"] == "wrote the note", state
    note = "/scratch/sandbox/root/tree-env/note.txt"  # run.py's scratch, mounted here
    with open(note) as f:  # noqa: ASYNC230  (the mounted host file; tiny, a test)
        assert f.read() == "from-the-worker\n"
    status, view = await client.call("GET", "/conversations/1/view")
    (result,) = [e["message"] for e in view["entries"] if e["kind"] == "tool_result"]
    assert result["tool_name"] == "bash" and not result["is_error"], result
    await obj.host.close()
    config = worker._Deployment.from_env
    assert config is not None
    await config.models.aclose()  # type: ignore[attr-defined]
    return {"answer": state["answer"]["text"]}


@check
async def the_deployed_entry_module_imports(options: dict[str, Any]) -> None:
    """``infra/cloudflare/src/entry.py`` (wrangler's ``main``) imports here and exports
    the runtime's own classes under the names wrangler binds."""
    import importlib.util

    from runtimes.cloudflare import names, worker

    spec = importlib.util.spec_from_file_location(
        "perdure_entry", "/perdure/infra/cloudflare/src/entry.py"
    )
    assert spec is not None and spec.loader is not None
    entry = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(entry)
    assert getattr(entry, names.ENTRY_CLASS) is worker.Default
    assert getattr(entry, names.DURABLE_OBJECT_CLASS) is worker.PerdureActor


@check
async def sse_watch_streams_through_the_bridge(options: dict[str, Any]) -> dict[str, Any]:
    """The API's SSE watch through ``workers.asgi.fetch``: the response streams (the
    view event arrives while the stream is still open), then a commit's delta."""
    from runtimes.cloudflare import worker

    home = Home(_path(options, "do-sse.sqlite"), "tree-s")
    worker.configure(_travel_config([]))
    obj = worker.PerdureActor(home.js.open(), _env())
    client = _Client(obj, "tree-s")
    status, accepted = await client.call("POST", "/submissions", {"type": "input", "content": "a"})
    await client.settled(accepted["id"])
    headers = {"authorization": f"Bearer {TOKEN}"}
    response = await obj.fetch(
        js_request("GET", "/v1/actors/tree-s/conversations/1/watch", headers)
    )
    assert response.status == 200, response.status
    reader = response.body.getReader()
    seen = ""

    async def read_until(marker: str) -> None:
        nonlocal seen
        while marker not in seen:
            chunk = await asyncio.wait_for(_js_read(reader), 10)
            assert not chunk.done, seen
            seen += bytes(chunk.value.to_bytes()).decode()

    await read_until("event: view")
    status, _ = await client.call("POST", "/submissions", {"type": "input", "content": "b"})
    assert status == 202, status
    await read_until("event: delta")
    await obj.host.close()  # shutdown ends the stream with an end event
    await read_until("shutting_down")
    return {"bytes": len(seen)}


async def _js_read(reader: Any) -> Any:
    return await reader.read()


async def main(options: Any) -> dict[str, Any]:
    opts: dict[str, Any] = options.to_py() if hasattr(options, "to_py") else dict(options)
    only = set(opts.get("only") or [])
    skip = set(opts.get("skip") or [])
    out: dict[str, Any] = {
        "ok": True,
        "checks": {},
        "failures": {},
        "timings": {},
    }
    for name, fn in _CHECKS:
        if (only and name not in only) or name in skip:
            continue
        t = time.perf_counter()
        try:
            result = await fn(opts)
        except BaseException:
            out["ok"] = False
            out["failures"][name] = traceback.format_exc()
            continue
        out["checks"][name] = {"ms": (time.perf_counter() - t) * 1000, **(result or {})}
    return out
