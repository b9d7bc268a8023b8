"""The Pyodide suite: the Cloudflare runtime inside real Pyodide 314.0.7 under Node.

``python tests/pyodide/run.py`` (``.ci/run`` calls it) does everything itself:

1. ``npm ci`` here (Pyodide 314.0.7 and better-sqlite3 12, the Durable Object
   stand-in's SQLite; v13 crashes on Node 20) into ``tests/pyodide/node_modules``;
2. ``pip download`` of the pinned wheels into ``tests/pyodide/wheels`` (pydantic-core
   for ``pyemscripten_2026_0_wasm32``, checked by file name: for a platform without a
   build, pip silently takes a 1 KB placeholder), the rest pure wheels;
3. builds, on CPython, an actor with 10,000 entries and measures the same workloads on
   CPython (the local host's SQLite facade) for the ratios;
4. starts, on CPython, two real servers on 127.0.0.1 — the models tests' scripted
   OpenAI-compatible server and a ``remote_env`` sandbox server (a subprocess) — and
   runs ``tests/pyodide/inside/suite.py`` in Pyodide (its own event loop, as in
   workerd): a harness opened on the 10,000-entry actor; the storage conformance kit
   over the facade over the JS stand-in through the real Workers SDK, plain and
   evicted after every commit; the SQL limits; the seed
   crash scenario across an eviction, directly and through HTTP on the real
   ``PerdureActor`` via the SDK's ASGI bridge; the kit's submit → tools → answer over
   the bridge; a reminder that fires after an eviction; the hibernatable watch, and
   the WebSocket upgrade on the ``WebSocketPair`` / 101 stand-ins across hibernation;
   the model adapter and the sandbox client over ``fetch`` to those servers; the
   actor configured from the Worker's vars and secrets alone (model and sandbox, tokens
   minted from the secret); a harness smoke with reopen; ms per tool round;
   then, in a Pyodide process of its own, the memory of one busy Durable Object (every
   import the deployed entry makes, then tool rounds on the 10,000-entry actor);
5. the cold start benchmark: ``--cold-starts N`` (default 3) fresh Pyodide processes
   each running ``tests/pyodide/inside/cold_start.py`` — import core, the Workers SDK
   and the runtime (``runtimes.cloudflare.worker``), open a harness on the 10,000-entry
   actor (the target: <= 1 s, Pyodide's load excluded), then, reported apart, the
   first HTTP request (the app imported and built) and the default adapters; each
   step with its compile time; CPython's fresh-process figures in the same run.
   Fails if the import + open path imports FastAPI or httpx, if an alarm wake on a
   new object (before any request) imports FastAPI or the actor API, or if the best sample
   exceeds ``IMPORT_OPEN_FAIL_MS`` (5x the target: the target itself is reported, met
   or not, since a loaded machine measures 2-5x its idle time); ``--importtime`` adds
   one cold start's per-module import times.
   That headline is "sources only": nothing is cached, every module is compiled.
   Alternating with those, as many processes measure the first request after open as a
   deployment serves it: each first runs the Worker's entry module (every import of a
   deployment, then the collector frozen: what Cloudflare's deploy-time snapshot
   keeps; a model of it, not Pyodide's snapshot), then a new object's first
   ``POST /submissions`` on the long actor. Fails if that request imports anything
   (the snapshot would not hold it) or if the best sample's CPU time exceeds
   ``FIRST_REQUEST_MARGIN`` (2) x the 300 ms target (the wall time is reported against
   the target); ``--only-cold-starts`` runs just this step.
   Then ``--cached-cold-starts N`` (default 3; 0 skips it) the same with a bytecode
   cache, reported apart: one process writes ``.pyc`` (``sys.pycache_prefix`` in the
   scratch directory, never the repository), N fresh ones read it, alternating with the
   sources-only samples so both see the same load — like for like with
   CPython's figure, which reads cached ``.pyc`` too. Fails if a cached sample still
   compiled a repository or wheel module (the cache was not read); its timing is
   reported only;
6. the Worker as deployed: the directory ``infra/cloudflare/build.py`` builds
   (``--worker DIR``, as ``.ci/run`` passes the one it built and dry-ran; by default a
   fresh build in the scratch directory) booted in a Pyodide process that sees only
   that directory — its ``src`` and ``python_modules``, no wheel loaded by the runner,
   not the repository — running ``tests/pyodide/deployed/worker_bundle.py``: through
   the entry module's front door, a submission and its answer, a reminder delivered by
   the alarm on a new instance after an eviction, and a half configuration answered
   ``503 misconfigured``;
7. runs pytest inside Pyodide on ``tests/cloudflare`` (its normal summary line);
8. prints the timings and ratios, and exits non-zero if anything failed.

Nothing is fetched at run time beyond what npm and pip fetch in steps 1 and 2.
``--rounds N`` sets the benchmark's tool rounds; ``--entries N`` the long actor's size.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))

PYODIDE_PLATFORM = "pyemscripten_2026_0_wasm32"
# Exact pins: the wheels Pyodide installs, matching what the repository runs on CPython.
WHEELS = {
    "pydantic-core": ("2.50.5", f"pydantic_core-2.50.5-cp314-cp314-{PYODIDE_PLATFORM}.whl"),
    "pydantic": ("2.14.4", None),
    "typing-extensions": ("4.16.0", None),
    "typing-inspection": ("0.4.5", None),
    "annotated-types": ("0.8.0", None),
    "workers-runtime-sdk": ("1.9.5", None),
    "fastapi": ("0.165.0", None),
    "opentelemetry-api": ("1.45.2", None),  # fastapi 0.165 imports it at import time
    "starlette": ("1.10.0", None),
    "anyio": ("4.16.0", None),
    "sniffio": ("1.3.1", None),
    "idna": ("3.20", None),
    "annotated-doc": ("0.0.7", None),
    "httpx": ("0.28.1", None),
    "httpcore": ("1.0.9", None),
    "h11": ("0.16.0", None),
    "certifi": ("2026.10.19.post1", None),
    "cronsim": ("2.8", None),  # recurring schedules' cron (core/harness/cadence.py)
    # zoneinfo's zone database: Pyodide has no /usr/share/zoneinfo
    "tzdata": ("2026.6", "tzdata-2026.6-py2.py3-none-any.whl"),
    "pytest": ("9.2.0", None),
    "pluggy": ("1.7.0", None),
    "iniconfig": ("2.3.1", None),
    "packaging": ("26.4", None),
    "pygments": ("2.21.0", None),
}


BUSY = "busy_durable_object_memory"


def _log(text: str) -> None:
    print(f"[pyodide] {text}", flush=True)


def install_node_packages() -> None:
    marker = HERE / "node_modules" / ".package-lock.json"
    lock = HERE / "package-lock.json"
    if marker.exists() and marker.stat().st_mtime >= lock.stat().st_mtime:
        return
    _log("npm ci (pyodide, better-sqlite3)")
    subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=HERE, check=True)


def fetch_wheels(dest: Path) -> list[Path]:
    dest.mkdir(exist_ok=True)
    wanted = [f"{name}=={version}" for name, (version, _) in WHEELS.items()]
    missing = [
        w for w in wanted if not list(dest.glob(w.split("==")[0].replace("-", "_") + "-*.whl"))
    ]
    if missing:
        _log(f"pip download {len(missing)} wheels")
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--only-binary=:all:",
                "--platform",
                PYODIDE_PLATFORM,
                "--python-version",
                "3.14",
                "--implementation",
                "cp",
                "-d",
                str(dest),
                *missing,
            ],
            check=True,
        )
    for name, (version, exact) in WHEELS.items():
        stem = name.replace("-", "_")
        found = sorted(p.name for p in dest.glob(f"{stem}-*.whl"))
        expected = exact or f"{stem}-{version}-py3-none-any.whl"
        if expected not in found:
            raise SystemExit(f"wheel {expected} missing in {dest} (found {found})")
        stale = [f for f in found if f != expected]
        for f in stale:  # an older pin (or pip's placeholder) must not be loaded too
            (dest / f).unlink()
    return sorted(dest.glob("*.whl"))


async def cpython_side(scratch: Path, entries: int, rounds: int) -> dict[str, Any]:
    """The long actor (built once, via the DO facade) and the CPython baselines."""
    from core.storage import MemoryStorage
    from runtimes.local.sqlite import open_sqlite_storage
    from tests.pyodide.inside import workload

    actor = scratch / "long-actor.sqlite"
    t = time.perf_counter()
    count = await workload.long_actor(await open_sqlite_storage(actor), entries)
    built = time.perf_counter() - t
    for copy in ("long-actor-cpython.sqlite", "long-actor-pyodide.sqlite"):
        shutil.copy(actor, scratch / copy)  # closed cleanly: the WAL is checkpointed
    # A first process fills the bytecode cache, so the figure is CPython with cached .pyc
    # whatever the environment says (PYTHONDONTWRITEBYTECODE, a fresh checkout).
    cache = scratch / "cpython-pycache"
    cpython_cold_start(scratch / "long-actor-cpython.sqlite", cache)
    cold = min(  # best of three fresh processes, like the Pyodide samples' best
        (cpython_cold_start(scratch / "long-actor-cpython.sqlite", cache) for _ in range(3)),
        key=lambda r: r["import_ms"] + r["open_harness_ms"],
    )
    # Best of three: the machine is shared, the minimum is the least disturbed run.
    local = min(
        [
            await workload.tool_rounds(await open_sqlite_storage(scratch / f"r{i}.sqlite"), rounds)
            for i in range(3)
        ],
        key=lambda r: r["ms_per_round"],
    )
    memory = min(
        [(await workload.tool_rounds(MemoryStorage(), rounds))["ms_per_round"] for _ in range(3)]
    )
    local["memory_storage_ms_per_round"] = memory
    return {
        "round_costs": await cpython_round_costs(scratch, rounds=50),
        "long_actor_entries": count,
        "long_actor_build_s": built,
        "cold_start_10k": cold,
        "tool_rounds": local,
    }


async def cpython_round_costs(scratch: Path, rounds: int) -> dict[str, Any]:
    """``workload.durable_rounds`` on CPython over the Python stand-in, for the ratios."""
    from tests.cloudflare.standin import DurableObjectHome
    from tests.pyodide.inside import workload

    out: dict[str, Any] = {}
    for replay in ("warm-up-1", "warm-up-2", "safe", "unsafe"):  # as inside Pyodide
        home = DurableObjectHome(scratch / f"costs-cpython-{replay}.sqlite")
        storage = home.open()

        def counters(storage: Any = storage, home: Any = home) -> dict[str, int]:
            return {
                "statements": storage.sql.statements,
                "rows_read": storage.sql.rows_read,
                "rows_written": storage.sql.rows_written,
                "transactions": storage.transactions,
                "alarm_calls": home.alarm_sets + home.alarm_deletes,
            }

        out[replay] = await workload.durable_rounds(
            storage, counters, rounds, replay="safe" if replay.startswith("warm-up") else replay
        )
        home.close()
    return {replay: out[replay] for replay in ("safe", "unsafe")}


def report_round_costs(cpython: dict[str, Any], inside: dict[str, Any]) -> None:
    """Per tool round on the Durable Object: Pyodide (JS stand-in) and CPython side by side."""
    print("\n=== per tool round on the Durable Object (stand-in counts; issue 36) ===")
    print(
        "cpu ms: the main thread's CPU time (Pyodide: Node's main thread, which runs Python, "
        "the stand-in and its SQLite;\n  all threads: with V8's background compiler and "
        "collector); CPython: the process's"
    )
    keys = ("statements", "rows_read", "rows_written", "transactions", "alarm_calls")
    print(
        f"{'tool':8} {'host':8} "
        + " ".join(f"{k:>13}" for k in keys)
        + "   cpu ms  all threads   wall ms"
    )
    for replay in ("safe", "unsafe"):
        for host, r in (("pyodide", inside.get(replay)), ("cpython", cpython.get(replay))):
            if not r:
                continue
            threads = r.get("process_cpu_ms", r["cpu_ms_per_round"])
            print(
                f"{replay:8} {host:8} "
                + " ".join(f"{r[k]:13.2f}" for k in keys)
                + f" {r['cpu_ms_per_round']:8.2f} {threads:12.2f} {r['ms_per_round']:9.2f}"
            )
        p, c = inside.get(replay), cpython.get(replay)
        if p and c:
            ratio = p["cpu_ms_per_round"] / c["cpu_ms_per_round"]
            threads = p.get("process_cpu_ms", p["cpu_ms_per_round"]) / c["cpu_ms_per_round"]
            print(
                f"{'':8} Pyodide / CPython CPU per round: {ratio:.1f}x (target <= 3x; "
                f"all of Node's threads: {threads:.1f}x)"
            )


_COLD_START = """
import asyncio, importlib, json, sys, time
from tests.pyodide.inside import compile_meter
compile_meter.install()
started = time.perf_counter()
import core.harness
core_imported = time.perf_counter()
from tests.pyodide.inside.workload import RUNTIME_MODULES
for module in RUNTIME_MODULES:  # the runtime Pyodide imports, but for the Workers SDK
    importlib.import_module(module)
imported = time.perf_counter()
compiled = compile_meter.seconds()
compiled_modules = len(compile_meter.compiled())
from runtimes.local.sqlite import open_sqlite_storage
from tests.pyodide.inside import workload
result = asyncio.run(workload.cold_open(lambda: open_sqlite_storage(sys.argv[1])))
t = time.perf_counter()
for module in workload.APP_MODULES:
    importlib.import_module(module)
result["import_app_ms"] = (time.perf_counter() - t) * 1000
result["import_core_ms"] = (core_imported - started) * 1000
result["import_ms"] = (imported - started) * 1000
result["compile_ms"] = compiled * 1000
result["compiled_modules"] = compiled_modules
print(json.dumps(result))
"""


def cpython_cold_start(path: Path, pycache: Path) -> dict[str, Any]:
    """Import + first harness open in a fresh CPython process (what a cold host pays),
    reading and writing bytecode in ``pycache`` (not in the repository)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    out = subprocess.run(
        [sys.executable, "-X", f"pycache_prefix={pycache}", "-c", _COLD_START, str(path)],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    result: dict[str, Any] = json.loads(out)
    return result


def run_in_pyodide(
    module: str, options: dict[str, Any], wheels: Path | None
) -> tuple[int, dict[str, Any]]:
    """``module``'s ``main`` in a fresh Pyodide process; ``wheels`` ``None`` only with a
    ``bundle`` option (the runner then loads none)."""
    proc = subprocess.Popen(
        [
            "node",
            str(HERE / "runner.mjs"),
            str(ROOT),
            str(wheels or "-"),
            module,
            json.dumps(options),
        ],
        cwd=HERE,
        stdout=subprocess.PIPE,
        text=True,
    )
    result: dict[str, Any] = {}
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("RESULT "):
            result = json.loads(line[len("RESULT ") :])
        else:
            sys.stdout.write(line)
    return proc.wait(), result


def bind_actor_name(path: Path, name: str) -> None:
    """Bind the actor file at ``path`` to ``name`` as a Durable Object's first request
    does (``runtimes.cloudflare.actor``'s one-row table), so an alarm knows whom to wake."""
    import sqlite3

    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("CREATE TABLE perdure_actor_name (name TEXT NOT NULL) STRICT")
        conn.execute("INSERT INTO perdure_actor_name (name) VALUES (?)", (name,))


def pyodide_cold_starts(
    samples: int,
    scratch: Path,
    entries: int,
    wheels: Path,
    variant: str = "cold",
    extra: dict[str, Any] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """``samples`` runs of ``tests/pyodide/inside/cold_start.py``, each in a fresh Pyodide
    process on fresh copies of the long actor (``extra``: more runner options); the
    samples and any failures, named after ``variant``."""
    runs: list[dict[str, Any]] = []
    failures: dict[str, str] = {}
    for i in range(samples):
        copies = {}
        for key in ("long_actor", "first_request_actor", "second_request_actor", "alarm_actor"):
            copies[key] = str(scratch / f"{variant}-{i}-{key}.sqlite")
            shutil.copy(scratch / "long-actor.sqlite", copies[key])
        bind_actor_name(Path(copies["alarm_actor"]), "long")
        code, result = run_in_pyodide(
            "tests.pyodide.inside.cold_start",
            {
                **copies,
                "new_actor": str(scratch / f"{variant}-{i}-new.sqlite"),
                "scratch": str(scratch),
                "entries": entries,
                **(extra or {}),
            },
            wheels,
        )
        if code != 0 or not result.get("ok"):
            failures[f"{variant}_start_sample_{i}"] = f"exit {code}: {result}"
            continue
        if result.get("snapshot"):
            if result["first_request_imports"]:
                failures[f"{variant}_start_sample_{i}"] = (
                    f"the first request after the entry module imported"
                    f" {result['first_request_imports']}: a deployment's snapshot would not"
                    f" hold them (import them in infra/cloudflare/src/entry.py)"
                )
            runs.append(result)
            continue
        if result["alarm_wake_imports"]:
            failures[f"{variant}_start_sample_{i}"] = (
                f"an alarm wake imported {result['alarm_wake_imports']}: only an HTTP"
                " request may build the app"
            )
        if result["open_path_imports"] or result["runtime_modules_not_imported"]:
            failures[f"{variant}_start_sample_{i}"] = (
                f"import + open imported {result['open_path_imports']} (the HTTP app and"
                f" httpx belong to the first request); workload.RUNTIME_MODULES lists"
                f" modules the runtime does not import: {result['runtime_modules_not_imported']}"
            )
        runs.append(result)
    return runs, failures


# The cached variant's cache: under the scratch directory (mounted at /scratch), so
# nothing lands in the repository, and gone with it at the end of the run.
PYCACHE = "pycache"


def write_bytecode_cache(scratch: Path, entries: int, wheels: Path) -> tuple[str, dict[str, str]]:
    """The cached variant's cache: one Pyodide process runs the cold start with bytecode
    writing on and ``sys.pycache_prefix`` in the scratch directory, so Python writes a
    ``.pyc`` there for every module it compiles (the repository's and the wheels'; the
    standard library is a zip, which the prefix does not cover). The prefix, as Pyodide
    sees it, and any failures."""
    prefix = f"/scratch/{PYCACHE}"
    _, failures = pyodide_cold_starts(
        1,
        scratch,
        entries,
        wheels,
        "pycache-writer",
        {"pycache_prefix": prefix, "write_bytecode": True},
    )
    if not failures and not list((scratch / PYCACHE).rglob("*.pyc")):
        failures["cached_cold_start_cache"] = f"no .pyc written under {prefix}"
    return prefix, failures


def cache_misses(runs: list[dict[str, Any]]) -> dict[str, str]:
    """Failures for the cached samples that still compiled a module of the repository or
    of the wheels: they did not measure a cache."""
    failures: dict[str, str] = {}
    for i, run in enumerate(runs):
        missed = run["compiled_through_open"]["repo"] + run["compiled_through_open"]["wheels"]
        if missed:
            failures[f"cached_start_sample_{i}"] = (
                f"{len(missed)} modules compiled despite the bytecode cache: {missed[:5]}"
            )
    return failures


def import_profile(scratch: Path, wheels: Path, top: int = 25) -> None:
    """One cold start under ``-X importtime``: where the import + open path's import time
    goes, per module (self time: the module's own body, compiling it included) and per
    top-level package. The timer's own overhead inflates every figure."""
    import re
    from collections import Counter

    shutil.copy(scratch / "long-actor.sqlite", scratch / "profile-long.sqlite")
    shutil.copy(scratch / "long-actor.sqlite", scratch / "profile-alarm.sqlite")
    bind_actor_name(scratch / "profile-alarm.sqlite", "long")
    options = {
        "python_args": ["-X", "importtime"],
        "long_actor": str(scratch / "profile-long.sqlite"),
        "first_request_actor": str(scratch / "profile-long.sqlite"),
        "second_request_actor": str(scratch / "profile-long.sqlite"),
        "alarm_actor": str(scratch / "profile-alarm.sqlite"),
        "new_actor": str(scratch / "profile-new.sqlite"),
        "scratch": str(scratch),
    }
    proc = subprocess.run(
        [
            "node",
            str(HERE / "runner.mjs"),
            str(ROOT),
            str(wheels),
            "tests.pyodide.inside.cold_start",
            json.dumps(options),
        ],
        cwd=HERE,
        capture_output=True,
        text=True,
    )
    rows: list[tuple[int, str]] = []
    started = False
    for line in proc.stderr.splitlines():
        match = re.match(r"import time:\s+(\d+) \|\s+\d+ \|\s*(\S+)", line)
        if match is None:
            continue
        if not started:  # the benchmark module itself; what it imports comes after
            started = match[2] == "tests.pyodide.inside.compile_meter"
            continue
        rows.append((int(match[1]), match[2]))
        if match[2] == "runtimes.cloudflare.worker":
            break
    total = sum(us for us, _ in rows)
    print(
        f"\n=== -X importtime, import core + SDK + runtime: {len(rows)} modules,"
        f" {total / 1000:.0f} ms ==="
    )
    for us, name in sorted(rows, reverse=True)[:top]:
        print(f"  {us / 1000:7.1f} ms  {name}")
    packages: Counter[str] = Counter()
    for us, name in rows:
        packages[name.split(".")[0]] += us
    print(
        "by top-level package:",
        ", ".join(f"{p} {us / 1000:.0f}" for p, us in packages.most_common(12)),
    )


# Generous on purpose: the 1 s target is reported (met / not met), not enforced, because
# a loaded machine measures 2-5x its idle time (2 cores at load 10: 4-5 s a sample).
# This bound (best sample) only catches a gross regression; the deterministic check that
# the HTTP app and httpx stay off the import + open path (cold_start.py) catches the
# likely one.
IMPORT_OPEN_TARGET_MS = 1000.0
IMPORT_OPEN_FAIL_MS = 5000.0
_STEPS = (
    ("import_core", "import core (core.harness)"),
    ("import_workers_sdk", "import the Workers SDK (workers)"),
    ("import_runtime", "import the runtime (runtimes.cloudflare.worker and its host)"),
    ("open_harness", "open a harness on the long actor"),
)


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def _import_open(runs: list[dict[str, Any]], label: str) -> tuple[float, list[float]]:
    """Print the import + open steps of ``runs`` and their total, met or not against
    the target; the best total and the totals."""
    totals = [sum(r["ms"][k] for k, _ in _STEPS) for r in runs]
    compiles = [sum(r["compile_ms"].get(k, 0.0) for k, _ in _STEPS) for r in runs]
    # CPU time (the Node process's): steadier than the wall time on a loaded machine.
    cpus = [sum(r.get("cpu_ms", {}).get(k, 0.0) for k, _ in _STEPS) for r in runs]
    for key, step in _STEPS:
        ms = [r["ms"][key] for r in runs]
        comp = [r["compile_ms"].get(key, 0.0) for r in runs]
        print(f"  {step:<64} {min(ms):7.0f} / {_median(ms):6.0f} ms  [{_median(comp):4.0f}]")
    best = min(totals)
    met = "met" if best <= IMPORT_OPEN_TARGET_MS else "NOT met"
    print(
        f"  import + open, {label} ({runs[0]['entries']} entries): {best:.0f} /"
        f" {_median(totals):.0f} ms  [compiling {_median(compiles):.0f}]"
        f"  target <= {IMPORT_OPEN_TARGET_MS:.0f} ms: {met}"
    )
    print(f"  the same in CPU time: {min(cpus):.0f} / {_median(cpus):.0f} ms")
    return best, totals


def _cpython_line(base: dict[str, Any], best: float, label: str) -> None:
    cpython_total = base["import_ms"] + base["open_harness_ms"]
    print(
        f"  CPython, same imports but the SDK, fresh process (cached .pyc): "
        f"{cpython_total:.0f} ms (core {base['import_core_ms']:.0f}, runtime"
        f" {base['import_ms'] - base['import_core_ms']:.0f}, open {base['open_harness_ms']:.1f};"
        f" compiling {base['compile_ms']:.0f} ms, {base['compiled_modules']} modules)"
        f"  ratio {label} {best / cpython_total:.1f}x"
    )


def report_cold_start(cpython: dict[str, Any], runs: list[dict[str, Any]]) -> bool:
    """Print the cold start; False if it breaks the generous bound."""
    base = cpython["cold_start_10k"]
    n = len(runs)
    print(f"\n=== cold start: {n} fresh Pyodide processes (min / median; compiling in [ ]) ===")
    print("Each sample starts with nothing of perdure imported; Pyodide's load and the wheels'")
    print("install come before and are excluded. Sources only: no snapshot and no bytecode")
    print("cache, every module is compiled from source (an isolate that compiles everything;")
    print("the cached variant below reads .pyc written by an earlier process).")
    best, totals = _import_open(runs, "sources only")
    _cpython_line(base, best, "sources only")
    print("Where the rest went (not in import + open):")
    first = [r["ms"]["first_request"] for r in runs]
    adapters = [r["ms"]["import_default_adapters"] for r in runs]
    print(
        f"  first HTTP request (a new PerdureActor on another copy: open in"
        f" blockConcurrencyWhile, import FastAPI + the actor API, build the app, POST"
        f" /submissions -> 202): {min(first):.0f} / {_median(first):.0f} ms"
        f"  [{_median([r['compile_ms']['first_request'] for r in runs]):.0f}]"
    )
    for key, label in (
        ("first_request_parts", "first request"),
        ("second_request_parts", "the same on a third copy, the app already imported"),
        ("new_actor_request_parts", "the same on a new, empty actor"),
    ):
        parts = {p: _median([r[key][p] for r in runs]) for p in ("open", "app", "request")}
        print(
            f"    {label}: open {parts['open']:.0f}, import + build the app {parts['app']:.0f},"
            f" serve POST /submissions {parts['request']:.0f} ms (medians)"
        )
    print(f"    CPython imports the same app in {base['import_app_ms']:.0f} ms")
    with_first = [t + f for t, f in zip(totals, first, strict=True)]
    print(f"  import + open + first request: {min(with_first):.0f} / {_median(with_first):.0f} ms")
    print(
        f"  the default configuration's adapters (model over httpx, sandbox client, coding"
        f" tools; imported on the first event of an object configured from its vars):"
        f" {min(adapters):.0f} / {_median(adapters):.0f} ms"
        f"  [{_median([r['compile_ms']['import_default_adapters'] for r in runs]):.0f}]"
    )
    if best > IMPORT_OPEN_FAIL_MS:
        print(f"cold start FAILED: best import + open {best:.0f} ms > {IMPORT_OPEN_FAIL_MS:.0f}")
        return False
    return True


# The first request after open of an isolate restored from a deployment's snapshot (issue
# 36): <= 300 ms. The wall time is reported against it; the check bounds the CPU time of
# the best sample (the Node process's, every thread) by twice the target, because a
# shared machine's load inflates the wall time 2-5x and the CPU time much less. In one
# run at load 9: the first request before issue 36 took 703 ms of CPU (1.56 s wall: it
# waited for the long actor's whole context, a GC pass over the snapshot's objects and
# 321 pydantic fields), after it 209 ms (0.35 s wall).
FIRST_REQUEST_TARGET_MS = 300.0
FIRST_REQUEST_MARGIN = 2.0
# Rows the long actor's first request may read before its 202 beyond a new actor's: two
# pages of the turn's context (which pages run before the answer is a race of the loop's
# turns); before issue 36 the whole context (10,000 rows) was read first.
FIRST_REQUEST_EXTRA_ROWS = 1000


def _request_ms(parts: dict[str, float]) -> float:
    """A first request's wall time: the object's open, the app, the request."""
    return parts["open"] + parts["app"] + parts["request"]


def report_first_request(sources: list[dict[str, Any]], snapshot: list[dict[str, Any]]) -> bool:
    """Print the first request after open as a deployment serves it (the snapshot model:
    ``cold_start.py``'s ``_from_the_snapshot``) beside the sources-only one; False if
    the best sample's CPU time breaks the bound (see ``FIRST_REQUEST_TARGET_MS``)."""
    print(
        f"\n=== the first request after open, as a deployment serves it: {len(snapshot)}"
        f" fresh Pyodide processes (min / median) ==="
    )
    print("Each process first runs the Worker's entry module (infra/cloudflare/src/entry.py:")
    print("every import of a deployment, then the collector frozen), untimed: Cloudflare keeps")
    print("what the entry module did in the deploy-time memory snapshot a cold start restores.")
    print("A model of that snapshot (the entry module run beforehand), not Pyodide's own")
    print("snapshot. Then a new PerdureActor on a copy of the long actor: open")
    print("(blockConcurrencyWhile), build the app, POST /submissions -> 202.")
    for key, label in (
        ("first_request_parts", "first request"),
        ("second_request_parts", "the same, a second object in the isolate"),
        ("new_actor_request_parts", "the same on a new, empty actor"),
    ):
        walls = [_request_ms(r[key]) for r in snapshot]
        parts = {p: _median([r[key][p] for r in snapshot]) for p in ("open", "app", "request")}
        cpu = _median([r[key]["cpu"] for r in snapshot])
        rows = max(r[key]["rows_read"] for r in snapshot)
        print(
            f"  {label}: {min(walls):.0f} / {_median(walls):.0f} ms (open {parts['open']:.0f},"
            f" app {parts['app']:.0f}, request {parts['request']:.0f}; CPU {cpu:.0f} ms;"
            f" {rows:.0f} rows read)"
        )
    first = [_request_ms(r["first_request_parts"]) for r in snapshot]
    from_sources = [_request_ms(r["first_request_parts"]) for r in sources]
    print(
        f"  sources only (the request imports and compiles the app; no snapshot):"
        f" {min(from_sources):.0f} / {_median(from_sources):.0f} ms"
    )
    cpu = min(r["first_request_parts"]["cpu"] for r in snapshot)
    bound = FIRST_REQUEST_MARGIN * FIRST_REQUEST_TARGET_MS
    met = "met" if min(first) <= FIRST_REQUEST_TARGET_MS else "NOT met"
    print(
        f"  best {min(first):.0f} ms: target <= {FIRST_REQUEST_TARGET_MS:.0f} ms {met};"
        f" best CPU {cpu:.0f} ms, bound {bound:.0f} ms ({FIRST_REQUEST_MARGIN:.0f} x the target)"
    )
    if cpu > bound:
        print(f"first request FAILED: best CPU {cpu:.0f} ms > {bound:.0f} ms")
        return False
    # Counted, not timed: the long actor's first request reads about what a new actor's
    # does, not the context of the turn it starts (see FIRST_REQUEST_EXTRA_ROWS).
    rows = max(r["first_request_parts"]["rows_read"] for r in snapshot)
    new = min(r["new_actor_request_parts"]["rows_read"] for r in snapshot)
    if rows > new + FIRST_REQUEST_EXTRA_ROWS:
        print(
            f"first request FAILED: it read {rows:.0f} rows before its 202, a new actor's"
            f" {new:.0f}: the turn it started read the context first"
        )
        return False
    return True


def report_cached_cold_start(cpython: dict[str, Any], runs: list[dict[str, Any]]) -> None:
    """Print the cold start with a bytecode cache, beside the CPython figure (both read
    cached bytecode). Report only: the sources-only variant carries the bound."""
    compiled = [r["compiled_through_open"] for r in runs]
    print(
        f"\n=== cold start with a bytecode cache: {len(runs)} fresh Pyodide processes"
        f" (min / median; compiling in [ ]) ==="
    )
    print(f"The same steps, each process reading the .pyc an earlier one wrote in {PYCACHE}/")
    print("of the scratch directory (sys.pycache_prefix; hash-checked, since the wheels are")
    print("re-extracted in every process): a runtime that keeps bytecode. Compiled through")
    print(
        f"the open: {_median([len(c['repo']) for c in compiled])} repository,"
        f" {_median([len(c['wheels']) for c in compiled])} wheel and"
        f" {_median([len(c['stdlib']) for c in compiled])} standard library modules (the"
        f" stdlib zip is outside the prefix: still compiled, in the [ ] figures)."
    )
    best, _ = _import_open(runs, "bytecode cached")
    _cpython_line(cpython["cold_start_10k"], best, "cached")


def report(cpython: dict[str, Any], inside: dict[str, Any]) -> None:
    t = inside["timings"]
    checks = inside["checks"]
    print("\n=== Pyodide 314.0.7 under Node: timings ===")
    print(f"load Pyodide:                 {t['pyodide_load_ms']:8.0f} ms")
    print(f"install wheels:               {t['wheels_install_ms']:8.0f} ms")
    print(
        f"(CPython built the {cpython['long_actor_entries']}-entry actor in"
        f" {cpython['long_actor_build_s']:.1f} s)"
    )
    smoke = checks.get("harness_smoke_and_reopen", {})
    if smoke:
        print(f"open a harness (new actor):   {smoke['fresh_open_harness_ms']:8.1f} ms")
    rounds, local = checks.get("tool_rounds"), cpython["tool_rounds"]
    if rounds:
        ratio = rounds["ms_per_round"] / local["ms_per_round"]
        print(
            f"tool round (best of 3 x {rounds['rounds']} rounds):"
            f" {rounds['ms_per_round']:.2f} ms on the DO facade in Pyodide,"
            f" {local['ms_per_round']:.2f} ms on CPython + local SQLite"
            f"  (ratio {ratio:.1f}x, target <= 3x)"
        )
        print(
            f"  same rounds in Pyodide: {rounds['through_sdk_wrapper_ms_per_round']:.2f} ms with"
            f" every SQL call through the SDK's wrapper;"
            f" {rounds['memory_storage_ms_per_round']:.2f} ms on MemoryStorage (no SQL at all;"
            f" CPython: {local['memory_storage_ms_per_round']:.2f} ms)"
        )
    costs = checks.get("durable_object_round_costs")
    if costs:
        report_round_costs(cpython["round_costs"], costs)
    busy = checks.get("busy_durable_object_memory")
    if busy:
        print(
            f"one busy Durable Object ({busy['rounds']} tool rounds on the"
            f" {cpython['long_actor_entries']}-entry actor): wasm heap"
            f" {busy['wasm_heap_mb']:.0f} MB, +{busy['over_pyodide_baseline_mb']:.0f} MB over"
            f" Pyodide's baseline with every import (target <= 64);"
            f" {busy['wasm_heap_mb'] - busy['wasm_heap_before_mb']:.0f} MB of it"
            f" grown while the object opened and worked"
        )
    print(
        f"wasm heap: {t['heap_baseline_mb']:.0f} MB after load, {t['heap_final_mb']:.0f} MB"
        f" after the suite (+{t['heap_final_mb'] - t['heap_baseline_mb']:.0f} MB)"
    )


def _openai_server() -> Any:
    """A real OpenAI-compatible streaming server on 127.0.0.1 (the models tests' own),
    for the model adapter over ``fetch`` inside Pyodide."""
    from tests.models.fake_openai import FakeOpenAI, Stream, finish, text, tool_call, usage

    server = FakeOpenAI()
    server.start()
    # In the order the suite's checks ask: model_over_fetch_to_a_real_server, then
    # durable_object_configured_from_env (a bash call on the sandbox, then the answer).
    command = json.dumps({"command": "echo from-the-worker > note.txt; cat note.txt"})
    server.script(
        Stream([text("Hello "), text("from 127.0.0.1"), finish("stop"), usage(5, 4)]),
        Stream([tool_call(0, id="call_1", name="bash", arguments=command), finish("tool_calls")]),
        Stream([text("wrote the note"), finish("stop")]),
    )
    return server


def _sandbox_server(stack: contextlib.ExitStack, scratch: Path) -> tuple[str, str, str]:
    """A real sandbox server (``python -m remote_env.server``) on 127.0.0.1 (its root is
    ``scratch/sandbox/root``), a workspace token for it and its token secret, for the
    ``remote_env`` client over ``fetch`` and for a Worker minting its own tokens."""
    from tests.remote_env.support import SECRET, server_process, token

    where = scratch / "sandbox"
    where.mkdir()
    server = stack.enter_context(server_process(where))
    return server.url, token("fetch-ws"), SECRET.decode()


MCP_TOKEN = "mcp-bearer-from-a-worker-secret"


def _mcp_server(stack: contextlib.ExitStack, scratch: Path) -> str:
    """A real MCP server (the SDK's, ``python -m tests.mcp.server``) on 127.0.0.1 that
    wants ``Authorization: Bearer MCP_TOKEN``, for the MCP client over ``fetch``."""
    from tests.mcp.support import mcp_server

    where = scratch / "mcp"
    where.mkdir()
    return stack.enter_context(mcp_server(where, token=MCP_TOKEN)).url


def worker_bundle(worker: Path | None, scratch: Path) -> bool:
    """Step 6: the built Worker directory booted as deployed; True if every check held."""
    from tests.models.fake_openai import FakeOpenAI, Stream, finish, text, usage

    if worker is None:
        import importlib.util

        spec = importlib.util.spec_from_file_location(
            "perdure_worker_build", ROOT / "infra" / "cloudflare" / "build.py"
        )
        assert spec is not None and spec.loader is not None
        build = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(build)
        worker = scratch / "worker"
        _log(f"building the Worker directory into {worker}")
        try:
            build.build(worker)
        except build.BuildError as error:
            print(f"FAILED worker_bundle: the Worker directory did not build: {error}")
            return False
    if not (worker / "python_modules").is_dir() or not (worker / "src" / "entry.py").is_file():
        print(f"FAILED worker_bundle: {worker} is not a built Worker directory")
        return False
    _log(f"Pyodide: the Worker as deployed, from {worker}")
    server = FakeOpenAI()
    server.start()
    server.script(
        Stream([text("Hello from the bundle"), finish("stop"), usage(5, 4)]),
        Stream([text("pong"), finish("stop"), usage(9, 1)]),
    )
    where = scratch / "bundle"
    where.mkdir()
    try:
        code, result = run_in_pyodide(
            "worker_bundle",
            {
                "bundle": str(worker.resolve()),
                "checks": str(HERE / "deployed"),
                "scratch": str(where),
                "openai_base_url": server.base_url,
            },
            None,
        )
    finally:
        server.stop()
    for name, trace in result.get("failures", {}).items():
        print(f"\nFAILED {name}\n{trace}")
    checks = result.get("checks", {})
    print(f"Worker bundle: {len(checks)} checks passed: {', '.join(sorted(checks))}")
    if code != 0 or not result.get("ok"):
        print(f"Worker bundle FAILED (exit {code})")
        return False
    return True


@dataclasses.dataclass
class ColdStarts:
    """The cold start samples of every variant, and each variant's failures."""

    sources: list[dict[str, Any]]
    sources_failures: dict[str, str]
    cached: list[dict[str, Any]]
    cached_failures: dict[str, str]
    snapshot: list[dict[str, Any]]  # its failures are among the sources-only ones


def cold_start_samples(args: argparse.Namespace, scratch: Path, wheels: Path) -> ColdStarts:
    """The sources-only samples, those after the entry module (the snapshot model) and
    the cached ones, alternating (after the process that writes the cache) so every
    variant sees the same load."""
    runs: list[dict[str, Any]] = []
    cached: list[dict[str, Any]] = []
    snapshot: list[dict[str, Any]] = []
    cold_failures: dict[str, str] = {}
    cached_failures: dict[str, str] = {}
    samples, prefix = args.cold_starts, ""
    if args.cached_cold_starts:
        _log("Pyodide: one cold start writing a bytecode cache")
        prefix, cached_failures = write_bytecode_cache(scratch, args.entries, wheels)
        if not cached_failures:
            samples = max(samples, args.cached_cold_starts)
    _log(
        f"Pyodide: {args.cold_starts} cold starts from sources, {args.cached_cold_starts}"
        f" with the bytecode cache, alternating, each in a fresh process"
    )
    for i in range(samples):
        if i < args.cold_starts:
            got, failures = pyodide_cold_starts(1, scratch, args.entries, wheels, f"cold{i}")
            runs += got
            cold_failures.update(failures)
            got, failures = pyodide_cold_starts(
                1, scratch, args.entries, wheels, f"snapshot{i}", {"snapshot": True}
            )
            snapshot += got
            cold_failures.update(failures)
        if args.cached_cold_starts and not cached_failures and i < args.cached_cold_starts:
            got, failures = pyodide_cold_starts(
                1, scratch, args.entries, wheels, f"cached{i}", {"pycache_prefix": prefix}
            )
            cached += got
            cached_failures.update(failures)
    cached_failures.update(cache_misses(cached))
    return ColdStarts(runs, cold_failures, cached, cached_failures, snapshot)


def only_cold_starts(args: argparse.Namespace, wheels: Path) -> int:
    """Step 5 alone: the long actor, CPython's fresh process, the samples, the reports."""
    from runtimes.local.sqlite import open_sqlite_storage
    from tests.pyodide.inside import workload

    with tempfile.TemporaryDirectory(prefix="perdure-pyodide-") as tmp:
        scratch = Path(tmp)

        async def build() -> None:
            storage = await open_sqlite_storage(scratch / "long-actor.sqlite")
            await workload.long_actor(storage, args.entries)

        asyncio.run(build())
        shutil.copy(scratch / "long-actor.sqlite", scratch / "long-actor-cpython.sqlite")
        actor, cache = scratch / "long-actor-cpython.sqlite", scratch / "cpython-pycache"
        cpython_cold_start(actor, cache)  # fills the bytecode cache
        cpython = {"cold_start_10k": cpython_cold_start(actor, cache)}
        starts = cold_start_samples(args, scratch, wheels)
        for name, trace in {**starts.sources_failures, **starts.cached_failures}.items():
            print(f"\nFAILED {name}\n{trace}")
        if starts.sources_failures or not starts.sources or not starts.snapshot:
            return 1
        ok = report_cold_start(cpython, starts.sources)
        ok = report_first_request(starts.sources, starts.snapshot) and ok
        if args.cached_cold_starts:
            if starts.cached_failures or not starts.cached:
                return 1
            report_cached_cold_start(cpython, starts.cached)
    return 0 if ok else 1


def only_round_costs(wheels: Path) -> int:
    with tempfile.TemporaryDirectory(prefix="perdure-pyodide-") as tmp:
        scratch = Path(tmp)
        cpython = asyncio.run(cpython_round_costs(scratch, rounds=50))
        check = "durable_object_round_costs"
        code, inside = run_in_pyodide(
            "tests.pyodide.inside.suite", {"scratch": str(scratch), "only": [check]}, wheels
        )
        for name, trace in inside.get("failures", {}).items():
            print(f"\nFAILED {name}\n{trace}")
        if code != 0 or not inside.get("ok"):
            return 1
        report_round_costs(cpython, inside["checks"][check])
    return 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--no-pytest", action="store_true")
    parser.add_argument("--cold-starts", type=int, default=3, help="cold start samples")
    parser.add_argument(
        "--cached-cold-starts",
        type=int,
        default=3,
        help="cold start samples with a bytecode cache (after one process that writes it; 0: none)",
    )
    parser.add_argument(
        "--importtime", action="store_true", help="also profile one cold start's imports"
    )
    parser.add_argument(
        "--worker",
        type=Path,
        default=None,
        help="the Worker directory built by infra/cloudflare/build.py (default: build one)",
    )
    parser.add_argument(
        "--only-worker", action="store_true", help="run only the Worker bundle step (6)"
    )
    parser.add_argument(
        "--only-cold-starts",
        action="store_true",
        help="run only the cold start samples and their reports (step 5)",
    )
    parser.add_argument(
        "--only-round-costs",
        action="store_true",
        help="run only the Durable Object's per-round counts, Pyodide and CPython",
    )
    args = parser.parse_args()
    install_node_packages()
    if args.only_worker:
        with tempfile.TemporaryDirectory(prefix="perdure-pyodide-") as tmp:
            return 0 if worker_bundle(args.worker, Path(tmp)) else 1
    wheels = HERE / "wheels"
    fetch_wheels(wheels)
    if args.only_round_costs:
        return only_round_costs(wheels)
    if args.only_cold_starts:
        return only_cold_starts(args, wheels)
    failed = False
    with tempfile.TemporaryDirectory(prefix="perdure-pyodide-") as tmp:
        scratch = Path(tmp)
        _log(f"CPython: building a {args.entries}-entry actor and the baselines")
        cpython = asyncio.run(cpython_side(scratch, args.entries, args.rounds))
        _log("Pyodide: the suite")
        openai = _openai_server()
        sandbox = contextlib.ExitStack()
        sandbox_url, sandbox_token, sandbox_secret = _sandbox_server(sandbox, scratch)
        mcp_url = _mcp_server(sandbox, scratch)
        options = {
            "mcp_url": mcp_url,
            "mcp_token": MCP_TOKEN,
            "openai_base_url": openai.base_url,
            "sandbox_url": sandbox_url,
            "sandbox_token": sandbox_token,
            "sandbox_secret": sandbox_secret,
            "scratch": str(scratch),
            "rounds": args.rounds,
            "long_actor": str(scratch / "long-actor-pyodide.sqlite"),
            "entries": args.entries,
        }
        try:
            code, inside = run_in_pyodide(
                "tests.pyodide.inside.suite", {**options, "skip": [BUSY]}, wheels
            )
            # One busy Durable Object's memory, in a Pyodide process of its own.
            shutil.copy(scratch / "long-actor.sqlite", scratch / "long-actor-busy.sqlite")
            busy_code, busy = run_in_pyodide(
                "tests.pyodide.inside.suite",
                {
                    **options,
                    "only": ["cold_start_10k", BUSY],
                    "long_actor": str(scratch / "long-actor-busy.sqlite"),
                },
                wheels,
            )
            inside.setdefault("failures", {}).update(busy.get("failures", {}))
            if BUSY in busy.get("checks", {}):
                inside.setdefault("checks", {})[BUSY] = busy["checks"][BUSY]
            if busy_code != 0 or not busy.get("ok"):
                code = code or busy_code or 1
        finally:
            openai.stop()
            sandbox.close()
        for name, trace in inside.get("failures", {}).items():
            print(f"\nFAILED {name}\n{trace}")
        names = sorted(inside.get("checks", {}))
        print(f"\nPyodide suite: {len(names)} checks passed: {', '.join(names)}")
        if code != 0 or not inside.get("ok"):
            failed = True
            print(f"Pyodide suite FAILED (exit {code})")
        else:
            report(cpython, inside)
        starts = cold_start_samples(args, scratch, wheels)
        for name, trace in {**starts.sources_failures, **starts.cached_failures}.items():
            print(f"\nFAILED {name}\n{trace}")
        if starts.sources_failures or not starts.sources or not starts.snapshot:
            failed = True
        else:
            cold_ok = report_cold_start(cpython, starts.sources)
            first_ok = report_first_request(starts.sources, starts.snapshot)
            failed = failed or not (cold_ok and first_ok)
        if args.cached_cold_starts:
            if starts.cached_failures or not starts.cached:
                failed = True
            else:
                report_cached_cold_start(cpython, starts.cached)
        if args.importtime:
            import_profile(scratch, wheels)
        if not worker_bundle(args.worker, scratch):
            failed = True
        if not args.no_pytest:
            _log("Pyodide: pytest on tests/cloudflare")
            pytest_dir = scratch / "pytest"
            pytest_dir.mkdir()
            code, result = run_in_pyodide(
                "tests.pyodide.inside.pytest_main", {"scratch": str(pytest_dir)}, wheels
            )
            if code != 0 or not result.get("ok"):
                failed = True
                print(f"pytest inside Pyodide FAILED (exit {code})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
