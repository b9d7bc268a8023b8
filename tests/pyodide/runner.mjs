// Boots real Pyodide (314.0.7) under Node, installs the pinned wheels from local files,
// mounts this repository, registers the Workers SDK's two runtime-internal modules as
// stubs and the Durable Object stand-in, then runs a Python entry point inside Pyodide.
//
//   node runner.mjs <repo> <wheels dir> <python module> <json options>
//
// With `bundle` in the options (a Worker directory built by infra/cloudflare/build.py)
// the isolate is booted from that directory as a deployment would be: no wheels are
// loaded and the repository is not on sys.path; sys.path is the bundle's `src` (the
// entry module and the project's sources), its `python_modules` (a site directory,
// as pywrangler vendors it) and the directory of the check module only (`checks`,
// mounted at /checks).
//
// The module's `async def main(options) -> dict` runs in Pyodide's own event loop (as in
// workerd); its result is printed as one JSON line prefixed with "RESULT ". A module
// with `def main_sync(options) -> dict` is run synchronously instead (pytest inside
// Pyodide drives its own loop). No network is used: everything comes from disk.
// `python_args` in the options are Python's command-line arguments (run.py's
// --importtime passes ["-X", "importtime"]); `pycache_prefix` and `write_bytecode`
// are described where they are applied.

import { readFileSync, readdirSync } from "node:fs";
import path from "node:path";
import { performance } from "node:perf_hooks";
import { loadPyodide } from "pyodide";
import * as standin from "./durable_object.mjs";

const [repo, wheels, moduleName, optionsJson] = process.argv.slice(2);
const options = JSON.parse(optionsJson || "{}");
const timings = {};

function heapMB(py) {
  return py._module.HEAP8.length / (1024 * 1024);
}

let t = performance.now();
const pyodide = await loadPyodide({ args: options.python_args || [] });
// Raw writes, so pytest's progress dots stay on one line.
pyodide.setStdout({ write: (buf) => (process.stdout.write(buf), buf.length) });
pyodide.setStderr({ write: (buf) => (process.stderr.write(buf), buf.length) });
timings.pyodide_load_ms = performance.now() - t;

t = performance.now();
if (!options.bundle) {
  const files = readdirSync(wheels).filter((f) => f.endsWith(".whl")).map((f) => path.resolve(wheels, f));
  await pyodide.loadPackage(files, { messageCallback: () => {} });
}
timings.wheels_install_ms = performance.now() - t;

pyodide.registerJsModule("_cloudflare_compat_flags", {});
pyodide.registerJsModule("_pyodide_entrypoint_helper", {
  patchWaitUntil() {},
  cloudflareWorkersModule: { env: {}, waitUntil() {} },
  cloudflareSocketsModule: {},
  async doAnImport(name) {
    throw new Error(`no runtime module ${name} under Node`);
  },
});
pyodide.registerJsModule("perdure_do_standin", standin);
// CPU clocks for the benchmarks, in ms: the process's (every thread: V8's compiler and
// collector too) and the main thread's alone, the one that runs Python, the stand-in
// and its SQLite, as a Worker's isolate thread does (Linux's per-thread schedstat;
// elsewhere the process's). Pyodide's own time.process_time is the wall clock.
const schedstat = `/proc/self/task/${process.pid}/schedstat`;
pyodide.registerJsModule("perdure_cpu", {
  processMs() {
    const usage = process.cpuUsage();
    return (usage.user + usage.system) / 1000;
  },
  mainThreadMs() {
    try {
      return Number(readFileSync(schedstat, "latin1").split(" ")[0]) / 1e6;
    } catch {
      return this.processMs();
    }
  },
});
// An HTTP listener for a Worker's fetch handler (tests/pyodide/deployed/http_server.py):
// Pyodide has no sockets, so Node listens and hands each request to the handler as a
// fetch Request, streaming its Response's body back (SSE included).
pyodide.registerJsModule("perdure_http_bridge", { serve: serveHttp });

async function serveHttp(handler, port) {
  const http = await import("node:http");
  const server = http.createServer(async (req, res) => {
    try {
      const chunks = [];
      for await (const chunk of req) chunks.push(chunk);
      const body = chunks.length ? Buffer.concat(chunks) : undefined;
      const headers = Object.entries(req.headers).map(([k, v]) => [k, Array.isArray(v) ? v.join(", ") : v]);
      const request = new Request(`http://${req.headers.host}${req.url}`, { method: req.method, headers, body });
      const response = await handler(request);
      res.writeHead(response.status, Object.fromEntries(response.headers.entries()));
      if (!response.body) return res.end();
      const reader = response.body.getReader();
      res.on("close", () => reader.cancel().catch(() => {}));
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        res.write(value);
      }
      res.end();
    } catch (e) {
      if (!res.headersSent) res.writeHead(500, { "content-type": "text/plain" });
      res.end(String(e && e.stack ? e.stack : e));
    }
  });
  await new Promise((resolve) => server.listen(port, "127.0.0.1", resolve));
  return server.address().port;
}
// The globals workerd has and Node lacks (or has differently): WebSocketPair, and a
// Response that takes a 101 upgrade.
globalThis.WebSocketPair = standin.WebSocketPair;
globalThis.Response = standin.Response;

if (options.bundle) {
  pyodide.FS.mkdirTree("/bundle");
  pyodide.mountNodeFS("/bundle", path.resolve(options.bundle));
  pyodide.FS.mkdirTree("/checks");
  pyodide.mountNodeFS("/checks", path.resolve(options.checks));
} else {
  pyodide.FS.mkdirTree("/perdure");
  pyodide.mountNodeFS("/perdure", path.resolve(repo));
}
pyodide.FS.mkdirTree("/scratch");
pyodide.mountNodeFS("/scratch", path.resolve(options.scratch || "/tmp"));
// `pycache_prefix` (a directory under /scratch, never the repository) keeps bytecode
// caches across processes: Python reads .pyc from it, and with `write_bytecode` writes
// them there too (run.py's cached cold start). Without it nothing is written or read.
const prefix = options.pycache_prefix || null;
if (prefix !== null && !prefix.startsWith("/scratch/")) {
  throw new Error(`pycache_prefix must be under /scratch, not ${prefix}`);
}
pyodide.globals.set("_pycache_prefix", prefix);
pyodide.globals.set("_write_bytecode", Boolean(options.write_bytecode && prefix !== null));
pyodide.runPython(`
import sys
sys.pycache_prefix = _pycache_prefix
# never write cpython-314 caches into the repository (only into the prefix, if asked)
sys.dont_write_bytecode = not _write_bytecode
del _pycache_prefix, _write_bytecode
`);
if (options.bundle) {
  pyodide.runPython(`
import site, sys
sys.path[:0] = ["/bundle/src", "/checks"]
site.addsitedir("/bundle/python_modules")  # its .pth files run, as on a site directory
`);
} else {
  pyodide.runPython(`import sys; sys.path.insert(0, "/perdure")`);
}
timings.heap_baseline_mb = heapMB(pyodide);

try {
  const mod = pyodide.pyimport(moduleName);
  const opts = pyodide.toPy({ ...options, timings });
  let result;
  if (mod.main_sync !== undefined) {
    result = mod.main_sync(opts);
  } else {
    result = await mod.main(opts);
  }
  const out = result.toJs({ dict_converter: Object.fromEntries });
  out.timings = { ...timings, ...(out.timings || {}) };
  out.timings.heap_final_mb = heapMB(pyodide);
  console.log("RESULT " + JSON.stringify(out));
  process.exit(out.ok === false ? 1 : 0);
} catch (e) {
  console.error("Pyodide run failed: " + (e && e.message ? e.message : String(e)));
  process.exit(2);
}
