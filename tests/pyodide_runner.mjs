// Runs Python snippets in Pyodide under Node (driven by tests/pyodide_runner.py).
//
// Usage: node pyodide_runner.mjs '<config json>'
//   config: {indexURL, packages: [...], wheels: [host paths], mounts: {pyodide path: host path},
//            pool?: {threads, timeoutMs, js, worker, module, variant}}
// With `pool`, the page's kernel pool (web/pool.js) runs on worker_threads and this thread calls it, as the page's
// Pyodide worker does: globalThis.emberPool is what ember's Python finds, globalThis.emberPoolOwner the owner.
// Protocol: after setup, one JSON line {"ready": true, "timings": {...}} on stdout; then each
// stdin line {"id", "code"} gets one stdout line {"id", "result", "stdout", "stderr", "error"}.
// stdout carries only the protocol: Pyodide's own console output goes to stderr.
import { readFileSync } from "node:fs";
import path from "node:path";
import readline from "node:readline";
import { pathToFileURL } from "node:url";

const config = JSON.parse(process.argv[2]);
const send = (msg) => process.stdout.write(JSON.stringify(msg) + "\n");
console.log = (...args) => console.error(...args);

// Each snippet runs in a fresh namespace with stdout/stderr captured; it reports by binding
// a JSON-able `result`. eval_code_async allows top-level await (WebGPU readbacks need it).
const DRIVER = `
import contextlib, io, json, traceback
from pyodide.code import eval_code_async

async def _ember_run_snippet(code):
    out, err, ns, error = io.StringIO(), io.StringIO(), {"__name__": "__main__"}, None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            await eval_code_async(code, ns, filename="<snippet>")
        except BaseException:
            error = traceback.format_exc()
    try:
        result = json.dumps(ns.get("result"), allow_nan=True)
    except (TypeError, ValueError) as exc:
        result, error = "null", error or f"result is not JSON-able: {exc}"
    return json.dumps({"result": result, "stdout": out.getvalue(),
                       "stderr": err.getvalue(), "error": error})
`;

async function startPool(cfg, heap) {
  const { startPool, attachPool } = await import(pathToFileURL(cfg.js).href);
  const { Worker } = await import("node:worker_threads");
  const module = await WebAssembly.compile(readFileSync(cfg.module));
  const owner = await startPool({ threads: cfg.threads, module, timeoutMs: cfg.timeoutMs,
    spawn: () => new Worker(pathToFileURL(cfg.worker)) });
  globalThis.emberPoolOwner = owner;
  globalThis.emberPool = await attachPool({ memory: owner.memory, module, layout: owner.layout,
    threads: owner.threads, variant: cfg.variant, reason: owner.reason, heap });
  for (const w of owner.workers) if (w) w.unref(); // the pool does not keep the process alive
}

async function setup() {
  const start = performance.now();
  const { loadPyodide } = await import(
    pathToFileURL(path.join(config.indexURL, "pyodide.mjs")).href);
  const toStderr = (line) => process.stderr.write(line + "\n");
  const pyodide = await loadPyodide({ indexURL: config.indexURL, stdout: toStderr,
                                      stderr: toStderr });
  const seconds = () => (performance.now() - start) / 1000;
  const timings = { pyodide_s: seconds() };
  if (config.pool) {
    await startPool(config.pool, () => pyodide._module.HEAPU8);
    timings.pool_s = seconds();
  }
  const wheels = config.wheels ?? [];
  const packages = [...(config.packages ?? []), ...(wheels.length ? ["micropip"] : [])];
  if (packages.length) {
    await pyodide.loadPackage(packages, { messageCallback: () => {}, errorCallback: toStderr });
  }
  timings.packages_s = seconds();
  if (wheels.length) {
    // micropip reads emfs: URLs from Pyodide's in-memory FS, so no server is needed.
    pyodide.FS.mkdirTree("/tmp/wheels");
    const micropip = pyodide.pyimport("micropip");
    for (const wheel of wheels) {
      const target = `/tmp/wheels/${path.basename(wheel)}`;
      pyodide.FS.writeFile(target, readFileSync(wheel));
      await micropip.install(`emfs:${target}`);
    }
    micropip.destroy();
  }
  timings.wheels_s = seconds();
  for (const [pyPath, hostPath] of Object.entries(config.mounts ?? {})) {
    pyodide.FS.mkdirTree(pyPath);
    pyodide.mountNodeFS(pyPath, hostPath);
  }
  await pyodide.runPythonAsync(DRIVER);
  return { pyodide, timings: { ...timings, setup_s: seconds() } };
}

let pyodide;
try {
  const ready = await setup();
  pyodide = ready.pyodide;
  send({ ready: true, timings: ready.timings, pyodide: pyodide.version });
} catch (err) {
  send({ ready: false, error: String(err?.stack ?? err) });
  process.exit(1);
}

const runSnippet = pyodide.globals.get("_ember_run_snippet");
const lines = readline.createInterface({ input: process.stdin });
for await (const line of lines) {
  if (!line.trim()) continue;
  const { id, code } = JSON.parse(line);
  try {
    send({ id, ...JSON.parse(await runSnippet(code)) });
  } catch (err) {
    // Only failures of the driver itself (e.g. a fatal wasm trap) land here.
    send({ id, result: "null", stdout: "", stderr: "", error: String(err?.stack ?? err) });
  }
}
