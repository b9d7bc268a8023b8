"""The cold start benchmark inside real Pyodide: one fresh process, one sample.

``tests/pyodide/run.py`` runs this module in a Pyodide process of its own, several
times. Nothing of perdure is imported before ``main`` starts the clock; then, in order:

1. **import core** (``core.harness``);
2. **import the Workers SDK** (``workers``; the entry classes subclass its types);
3. **import the runtime**: ``runtimes.cloudflare.worker`` (the front door and the
   Durable Object class) and what it imports (``workload.RUNTIME_MODULES``: the actor
   host, the alarm, the storage facade, the watch hub, the settings);
4. **open a harness on the 10,000-entry actor** (``workload.cold_open``: the facade over
   ``ctx.storage`` through the real SDK, ``Harness.open``, the root conversation,
   ``resume()``, idle).

1-4 are the benchmark's "import + open" (the target: <= 1 s, Pyodide's own load and the
wheels' install excluded). Then, reported apart so the cost that moved is visible:

5. **an alarm wake** of a new ``PerdureActor`` on another copy of the actor (bound to
   its name): ``alarm()`` re-opens the actor and resumes it. run.py fails if it imported
   FastAPI or the actor API (``alarm_wake_imports``): an alarm never builds the app;
6. **the first HTTP request** of a new ``PerdureActor`` on another copy of the actor: the
   host opens it inside ``blockConcurrencyWhile``, the object imports FastAPI and the
   actor API and builds the app, and ``POST /submissions`` is served through the SDK's
   ASGI bridge (202); then the same on a third copy, the app already imported, and on
   a new, empty actor;
7. **the default configuration's adapters** (``workload.ADAPTER_MODULES``: the model
   over httpx, the sandbox client, the coding tools), which an object opened from the
   Worker's vars and secrets imports on its first event.

Every step also reports the part of it spent compiling sources to bytecode
(:mod:`compile_meter`), and which of ``workload.NOT_ON_THE_OPEN_PATH`` steps 1-4
imported: run.py fails on any (a module that pulls the HTTP app or httpx back onto the
open path), deterministically, unlike a timing. It also returns the files compiled
through step 4 by origin (repository, wheels, standard library): the cached variant
(run with ``pycache_prefix``) must compile none of the first two. With
``write_bytecode`` (the process that fills that cache), the bytecode of every
repository and wheel module it compiled is stored hash-checked at the end.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

from tests.pyodide.inside import compile_meter

__all__ = ["compiled_by_origin", "main"]

TOKEN = "pyodide-cold-start-token-0123456789"
# The Worker's entry module, in the mounted repository.
_ENTRY = Path(__file__).resolve().parents[3] / "infra" / "cloudflare" / "src" / "entry.py"


class _Steps:
    def __init__(self) -> None:
        self.ms: dict[str, float] = {}
        self.compile_ms: dict[str, float] = {}
        self.cpu_ms: dict[str, float] = {}  # the Node process's CPU time (see _cpu_ms)
        self.restart()

    def mark(self, name: str) -> None:
        """Record the step ``name`` as everything since the last mark (or restart)."""
        now, compiled, cpu = time.perf_counter(), compile_meter.seconds(), _cpu_ms()
        self.ms[name] = (now - self._at) * 1000
        self.compile_ms[name] = (compiled - self._compiled) * 1000
        self.cpu_ms[name] = cpu - self._cpu
        self.restart()

    def restart(self) -> None:
        """Start the next step here (what ran since the last mark is not a step)."""
        self._at, self._compiled = time.perf_counter(), compile_meter.seconds()
        self._cpu = _cpu_ms()


async def main(options: Any) -> dict[str, Any]:
    opts: dict[str, Any] = options.to_py() if hasattr(options, "to_py") else dict(options)
    compile_meter.install()
    if opts.get("snapshot"):
        return await _from_the_snapshot(opts)
    steps = _Steps()
    import core.harness  # noqa: F401

    steps.mark("import_core")
    import workers  # type: ignore[import-not-found]  # noqa: F401

    steps.mark("import_workers_sdk")
    import runtimes.cloudflare.worker  # noqa: F401

    steps.mark("import_runtime")
    # Test scaffolding, untimed: the JS stand-in's home and the workloads.
    from tests.pyodide.inside.durable import Home, js_request
    from tests.pyodide.inside.workload import (
        ADAPTER_MODULES,
        NOT_ON_THE_OPEN_PATH,
        RUNTIME_MODULES,
        cold_open,
    )

    steps.restart()
    opened = await cold_open(Home(opts["long_actor"]).storage, _cpu_ms)
    assert opened["entries"] >= int(opts.get("entries", 10_000)), opened
    steps.mark("open_harness")  # the compile part; the times are cold_open's own:
    steps.ms["open_harness"] = opened["open_harness_ms"]  # its count of entries is not
    steps.cpu_ms["open_harness"] = opened["open_harness_cpu_ms"]
    compiled = compile_meter.compiled()
    # Checked by run.py (a failure there), reported here so a timing still comes back.
    leaked = [m for m in NOT_ON_THE_OPEN_PATH if m in sys.modules]
    unused = [m for m in RUNTIME_MODULES if m not in sys.modules]

    steps.restart()
    await _alarm_wake(opts["alarm_actor"], Home)
    steps.mark("alarm_wake")
    alarm_imports = [m for m in ("fastapi", "starlette", "runtimes.actor.api") if m in sys.modules]

    # The requests are timed from the object's construction to the 202 (imports and
    # compiling included); the model turn they start is awaited afterwards, untimed.
    steps.restart()
    first = await _first_request(opts["first_request_actor"], Home, js_request)
    steps.mark("first_request")
    steps.ms["first_request"] = _wall(first)
    again = await _first_request(opts["second_request_actor"], Home, js_request)
    fresh = await _first_request(opts["new_actor"], Home, js_request)
    steps.ms["request_on_a_new_object"] = _wall(again)
    import importlib

    steps.restart()
    for module in ADAPTER_MODULES:
        importlib.import_module(module)
    steps.mark("import_default_adapters")
    if opts.get("write_bytecode"):
        _store_checked_bytecode(compiled_by_origin(compile_meter.compiled()))
    return {
        "ok": True,
        "ms": steps.ms,
        "compile_ms": steps.compile_ms,
        "cpu_ms": steps.cpu_ms,
        "entries": opened["entries"],
        "first_request_parts": first,
        "second_request_parts": again,
        "new_actor_request_parts": fresh,
        "open_path_imports": leaked,
        "alarm_wake_imports": alarm_imports,
        "runtime_modules_not_imported": unused,
        "compiled_through_open": compiled_by_origin(compiled),
        "pycache_prefix": sys.pycache_prefix,
    }


async def _from_the_snapshot(opts: dict[str, Any]) -> dict[str, Any]:
    """The first request of an isolate restored from the deploy-time snapshot, modelled:
    the Worker's entry module (``infra/cloudflare/src/entry.py``: every import of a
    deployment, then the collector frozen) is run first, untimed, as the snapshot holds
    what it did; then a new ``PerdureActor`` on a copy of the long actor serves its first
    request (timed as in step 6), then one on another copy and one on a new, empty actor.
    A model, not Pyodide's memory snapshot: beforehand, only what the entry module does
    is done. Returns the parts and what the first request imported until its 202 (it
    should be nothing: the snapshot would not hold it)."""
    import runpy

    runpy.run_path(str(_ENTRY), run_name="entry")
    from tests.pyodide.inside.durable import Home, js_request

    _configure()  # the test's configuration (its imports are scaffolding, not the request's)
    imported: list[str] = []
    first = await _first_request(opts["first_request_actor"], Home, js_request, imported)
    again = await _first_request(opts["second_request_actor"], Home, js_request)
    fresh = await _first_request(opts["new_actor"], Home, js_request)
    return {
        "ok": True,
        "snapshot": True,
        "first_request_parts": first,
        "second_request_parts": again,
        "new_actor_request_parts": fresh,
        "first_request_imports": imported,
    }


def compiled_by_origin(paths: list[str]) -> dict[str, list[str]]:
    """Compiled files by where they come from: the mounted repository, the installed
    wheels, or Pyodide's standard library zip (which ``pycache_prefix`` does not cover:
    ``zipimport`` only reads bytecode stored inside the zip)."""
    origins: dict[str, list[str]] = {"repo": [], "wheels": [], "stdlib": []}
    for path in paths:
        if path.startswith("/perdure/"):
            origins["repo"].append(path)
        elif "/site-packages/" in path:
            origins["wheels"].append(path)
        else:
            origins["stdlib"].append(path)
    return origins


def _configure() -> Any:
    """The faux configuration every object of this process opens with; the env."""
    from js import Object  # type: ignore[import-not-found]
    from pyodide.ffi import to_js  # type: ignore[import-not-found]

    from core.faux import FauxModel, faux_message
    from runtimes.actor import ActorConfig
    from runtimes.cloudflare import names, worker
    from tests.pyodide.inside.workload import MODEL, noop_extension

    worker.configure(
        ActorConfig(
            models=FauxModel(fallback=lambda request, state: faux_message("first answer")),
            extensions=[noop_extension()],
            default_agent={"model": MODEL},
        )
    )
    return to_js({names.API_TOKEN_SECRET: TOKEN}, dict_converter=Object.fromEntries)


async def _alarm_wake(path: str, home_class: Any) -> None:
    """A new ``PerdureActor`` on the actor at ``path`` woken by its alarm."""
    from runtimes.cloudflare import worker

    env = _configure()
    obj = worker.PerdureActor(home_class(path, "long").js.open(), env)
    await obj.alarm()
    assert obj.host.is_open, "the alarm did not open the actor"
    await obj.host.close()


def _cpu_ms() -> float:
    """The Node process's CPU time in ms (user + system, every thread: V8's compiler and
    collector included). Pyodide's ``time.process_time`` is the wall clock, which on a
    shared machine measures the load as much as the work; CPU time does not."""
    from js import process  # type: ignore[import-not-found]

    usage = process.cpuUsage()
    return float(usage.user + usage.system) / 1000


def _wall(parts: dict[str, float]) -> float:
    """A request's wall time: its parts but the CPU figure."""
    return parts["open"] + parts["app"] + parts["request"]


async def _first_request(
    path: str, home_class: Any, js_request: Any, imported: list[str] | None = None
) -> dict[str, float]:
    """A new ``PerdureActor`` on the actor at ``path``, its first request ``POST
    /submissions``; the answer is checked after the timing (through the same app).
    ``imported`` gets the modules imported from the object's construction to the 202."""
    import json

    from runtimes.cloudflare import worker

    env = _configure()
    home = home_class(path, "long")
    headers = {"authorization": f"Bearer {TOKEN}", "content-type": "application/json"}
    body = json.dumps({"type": "input", "content": "hello"})
    request = js_request("POST", "/v1/actors/long/submissions", headers, body)
    modules = set(sys.modules)
    start, cpu = time.perf_counter(), _cpu_ms()
    obj = worker.PerdureActor(home.js.open(), env)
    sql = home.js.current.storage.sql  # the stand-in's counters
    await obj._start()  # what fetch does first, timed apart: the open
    opened = time.perf_counter()
    await obj._serve()  # then the app: imported (the first time) and built
    built = time.perf_counter()
    # As a task, as workerd runs the handler: its Response reaches the runtime through the
    # task's done callback, one more turn of the loop (awaited directly, it would not wait
    # behind work the request left ready, such as the first page of a turn's context).
    response = await asyncio.ensure_future(obj.fetch(request))
    # Done when the Response is the runtime's (its body is bytes already; reading it here
    # would let the loop run the turn first, which a client's read does not).
    done, cpu, rows = time.perf_counter(), _cpu_ms() - cpu, float(sql.rowsRead)
    accepted = json.loads(await response.text())
    parts = {
        "open": (opened - start) * 1000,
        "app": (built - opened) * 1000,
        "request": (done - built) * 1000,
        "cpu": cpu,  # the three together, in CPU time (see _cpu_ms)
        "rows_read": rows,  # until the 202: the turn's context is not among them
    }
    if imported is not None:
        imported += sorted(set(sys.modules) - modules)
    assert int(response.status) == 202, (response.status, accepted)
    settled = None
    for _ in range(200):
        get = js_request("GET", f"/v1/actors/long/submissions/{accepted['id']}?wait=1", headers)
        settled = json.loads(await (await obj.fetch(get)).text())
        if settled["status"] == "done":
            break
    assert settled is not None and settled["answer"]["text"] == "first answer", settled
    await obj.host.close()
    return parts


def _store_checked_bytecode(origins: dict[str, list[str]]) -> None:
    """Rewrite the ``.pyc`` of every repository and wheel module this process compiled
    as a hash-checked one (in ``sys.pycache_prefix``). The timestamp-checked ``.pyc`` the
    import system writes would be stale in the next process for the wheels: the runner
    re-extracts them, with new modification times, in every process. A hash-checked
    ``.pyc`` is valid while the source's content is the same."""
    import py_compile

    for path in origins["repo"] + origins["wheels"]:
        py_compile.compile(
            path, doraise=True, invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH
        )
