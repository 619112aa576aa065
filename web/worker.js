// ember's Web Worker: Pyodide + numpy + the ember wheel run here, so the page never freezes.
//
// Protocol (every message carries the `id` of the request it belongs to); `tool` is any name of
// ember.wasm.tools.TOOLS, and nothing here depends on which:
//   page -> worker  {type: "boot", pyodideURL, wheelURL, stdlibURL?, pycacheURL?, bootURL?}   (no reply:
//                                                   Pyodide starts and ember is imported while the page starts
//                                                   the kernel pool; the init that follows waits for it)
//                   {type: "init", pyodideURL, wheelURL, stdlibURL?, pycacheURL?, bootURL?, device,
//                    pool?: {memory, module, layout, threads, variant}, poolReason?}   (the kernel pool: pool.js)
//                                                   -> {type: "ready", device, reason, adapter, kernels, threads,
//                                                       threads_reason, tools, marks}
//                                                      (tools: {name: {files, beside, packages}}, tools.table())
//                                                      (interrupt: a SharedArrayBuffer under cross-origin isolation:
//                                                      the page writes 2 into it to interrupt Python mid-step)
//                   {type: "device", device, probe?} -> {type: "result", data: {device, reason, adapter, kernels, auto,
//                                                                               threads, threads_reason}}
//                   {type: "load", tool, key, label?, files: [{name, url, size?, sha256?, optional?, unless?} | {name, bytes}]}
//                                                   -> {type: "result", data: {tool, device, parameters, bytes, ...}}
//                   {type: "run", tool, input, opts} -> {type: "partial", data} ... {type: "result"}
//                                                      (data.wasm_memory_bytes: the heap after it)
//                   {type: "cancel"}                (no reply: a download stops at once, a run at its next step;
//                                                   the request ends "cancelled")
//   worker -> page  {type: "progress", stage, file, done, total}       bytes for downloads, 0..1 otherwise
//                   {type: "error", code, message}                    code picks the page's human message
// The kernel pool's workers belong to the page; this worker instantiates the pool's module too (the caller's
// share of every job) and sets self.emberPool, which ember's Python (core/backends/cpu_pool.py) calls.
// Both load and run end in ember.wasm.worker_api.handle, which hands them to the tool's module.
// A model's files are kept in the Cache API once it has loaded (model-cache.js), so a reload, or a visit
// offline, reads them from disk, their sha256 checked.

const MAX_MODEL_BYTES = 1.5 * 2 ** 30; // wasm32: 4 GiB address space, weights are held twice while loading

let pyodide = null;
let device = "cpu";
let tools = {}; // name -> {files, beside, packages}: what each tool module declares
let downloads = null; // the AbortController of the load request downloading now: a cancel aborts it
let interrupt = null; // Int32Array on a SharedArrayBuffer (cross-origin isolated pages): Pyodide's interrupt buffer

class WorkerFail extends Error {
  constructor(code, message) { super(message); this.code = code; }
}

const post = (msg, transfer) => self.postMessage(msg, transfer || []);

self.onmessage = async (ev) => {
  const msg = ev.data;
  if (msg.type === "cancel") { // handled at once: a download stops, the running Python task sees the flag at its next step
    if (downloads) downloads.abort();
    if (pyodide) pyodide.runPython("from ember.wasm import worker_api; worker_api.cancel()");
    return;
  }
  if (msg.type === "boot") { startBoot(msg); return; } // no reply: the "init" that follows awaits it
  queue = queue.then(() => serve(msg)); // one request at a time, in order
};
let queue = Promise.resolve();

async function serve(msg) {
  const { id } = msg;
  const progress = (stage, file, done, total) => post({ type: "progress", id, stage, file, done, total });
  if (interrupt) Atomics.store(interrupt, 0, 0); // an interrupt meant for an earlier request is void
  try {
    if (msg.type === "init") post({ type: "ready", id, ...(await init(msg, progress)) });
    else if (!pyodide) throw new WorkerFail("not_ready", "ember: the runtime is not started yet");
    else if (msg.type === "device") post({ type: "result", id, data: await setDevice(msg.device, msg.probe) });
    else if (msg.type === "load") post({ type: "result", id, data: await load(msg, progress) });
    else if (msg.type === "run") post({ type: "result", id, data: await run(msg) });
    else throw new WorkerFail("bad_request", `ember: unknown message type ${msg.type}`);
  } catch (e) {
    const code = e.code || (e instanceof RangeError ? "out_of_memory" : "internal");
    post({ type: "error", id, code, message: String(e.message || e) });
  }
}

// ------------------------------------------------------------------ runtime

// The runtime's start, once per worker: Pyodide booted, numpy and ember installed and imported; -> {marks}
let booting = null;
function startBoot(msg) {
  if (!booting) {
    booting = boot(msg, (stage, file, done, total) => post({ type: "progress", id: msg.id, stage, file, done, total }));
    booting.catch(() => {}); // awaited by init; no "unhandled" report meanwhile
  }
  return booting;
}

async function boot(msg, progress) {
  const marks = {}; // stage -> epoch ms, so the page can place each stage after its own navigation start
  const mark = (name) => { marks[name] = performance.timeOrigin + performance.now(); };
  mark("worker");
  const abs = (u) => new URL(u, self.location.href).href;
  const base = abs(msg.pyodideURL).replace(/\/?$/, "/");
  // fetched while Pyodide boots: numpy + ember + their bytecode in one tar (`ember build-web`: wasm/boot.py), or
  // the ember wheel and the bytecode zip (numpy then comes from Pyodide's own packages)
  const bundle = msg.bootURL ? fetchGunzipped(abs(msg.bootURL), "numpy and ember") : null;
  const wheel = bundle ? null : fetchBytes(abs(msg.wheelURL), "the ember wheel");
  const pycache = !bundle && msg.pycacheURL ? fetchBytes(abs(msg.pycacheURL), "precompiled bytecode") : null;
  for (const p of [bundle, wheel, pycache]) if (p) p.catch(() => {}); // awaited below; no "unhandled" report meanwhile
  // (no prefetch of Pyodide's wasm and stdlib: loadPyodide asks for them before it loads pyodide.asm.js, and a
  // second request for the wasm waited for the first whole, then read it again, past the service worker too)
  progress("runtime", "pyodide", 0, 4);
  let loadPyodide;
  try {
    ({ loadPyodide } = await import(base + "pyodide.mjs"));
  } catch (e) {
    throw new WorkerFail("download", `ember: cannot load Pyodide from ${base} (${e.message})`);
  }
  pyodide = await loadPyodide({ indexURL: base, ...(msg.stdlibURL ? { stdLibURL: abs(msg.stdlibURL) } : {}),
    stdout: (s) => console.log(s), stderr: (s) => console.warn(s) });
  mark("pyodide");
  progress("runtime", "numpy", 1, 4);
  const site = pyodide.runPython("import sysconfig; sysconfig.get_path('purelib')");
  // numpy's extension modules are compiled as Python imports them (not all 19 up front, as loadPackage does)
  const numpy = bundle ? null : pyodide.loadPackage(["numpy"], { messageCallback: () => {}, errorCallback: (s) => console.warn(s) });
  if (bundle) untar(await bundle, site);
  else pyodide.unpackArchive(await wheel, "wheel", { extractDir: site }); // pure Python: no loadPackage round trip
  if (pycache) {
    try {
      pyodide.unpackArchive(await pycache, "zip", { extractDir: site }); // __pycache__ beside numpy's, ember's .py
    } catch (e) {
      console.warn(`ember: no precompiled bytecode (${e.message}); Python compiles at import instead`);
    }
  }
  if (numpy) await numpy;
  mark("numpy");
  progress("runtime", "ember", 2, 4);
  pyodide.runPython("import ember, ember.wasm.worker_api");
  tools = JSON.parse(pyodide.runPython("import json\nfrom ember.wasm import tools\njson.dumps(tools.table())"));
  mark("import");
  return { marks };
}

async function init(msg, progress) {
  const booted = startBoot(msg); // begun by "boot" already, unless the page sent none
  self.emberPool = { threads: 1, reason: msg.poolReason || "no kernel pool" };
  if (msg.pool) { // the caller's instance over the pool's shared memory (Python copies between it and its heap)
    try {
      const { attachPool } = await import("./pool.js");
      self.emberPool = await attachPool({ ...msg.pool, heap: () => pyodide._module.HEAPU8 });
    } catch (e) {
      self.emberPool.reason = `this worker could not join the kernel pool (${e.message})`;
    }
  }
  const { marks } = await booted;
  const mark = (name) => { marks[name] = performance.timeOrigin + performance.now(); };
  progress("runtime", "device", 3, 4);
  const want = msg.device === "cpu" || msg.device === "webgpu" ? msg.device : "auto";  // auto skips software adapters
  const picked = self.navigator.gpu || want === "cpu" ? await setDevice(want, msg.probe)
    : { device: "cpu", reason: "this browser has no WebGPU (navigator.gpu is missing)" };
  mark("device");
  progress("runtime", "ready", 4, 4);
  if (self.crossOriginIsolated && typeof SharedArrayBuffer === "function") { // Python can then be stopped mid-step
    interrupt = new Int32Array(new SharedArrayBuffer(4));
    pyodide.setInterruptBuffer(interrupt);
  }
  return { ...picked, tools, pyodide: pyodide.version, marks, interrupt: interrupt && interrupt.buffer };
}

// A gzipped file, decompressed by the browser as it streams in.
async function fetchGunzipped(url, what) {
  let resp;
  try {
    resp = await fetch(url);
  } catch (e) {
    throw new WorkerFail("download", `ember: cannot download ${what} from ${url} (${e.message})`);
  }
  if (!resp.ok) throw new WorkerFail("download", `ember: downloading ${what} from ${url} failed: HTTP ${resp.status}`);
  return new Uint8Array(await new Response(resp.body.pipeThrough(new DecompressionStream("gzip"))).arrayBuffer());
}

// A ustar archive's files into Pyodide's file system under `dest`, each handed over without a copy (MEMFS owns a
// view of `tar`; nothing writes to these files). Python's own unzip took ~1 s for the same ~1100 files.
function untar(tar, dest) {
  const FS = pyodide.FS, text = new TextDecoder(), made = new Set();
  const field = (at, n) => { let end = at; while (end < at + n && tar[end]) end++; return text.decode(tar.subarray(at, end)); };
  for (let at = 0; at + 512 <= tar.length;) {
    const name = field(at, 100), prefix = field(at + 345, 155);
    if (!name) break; // the two zero blocks that end the archive
    const size = parseInt(field(at + 124, 12).trim() || "0", 8), type = tar[at + 156];
    at += 512;
    if (type === 48 || type === 0) { // "0" or NUL: a regular file
      const path = `${dest}/${prefix ? prefix + "/" : ""}${name}`, dir = path.slice(0, path.lastIndexOf("/"));
      if (!made.has(dir)) { FS.mkdirTree(dir); made.add(dir); }
      const stream = FS.open(path, "w");
      try { FS.write(stream, tar.subarray(at, at + size), 0, size, 0, true); } finally { FS.close(stream); }
    }
    at += Math.ceil(size / 512) * 512;
  }
}

async function fetchBytes(url, what) {
  let resp;
  try {
    resp = await fetch(url);
  } catch (e) {
    throw new WorkerFail("download", `ember: cannot download ${what} from ${url} (${e.message})`);
  }
  if (!resp.ok) throw new WorkerFail("download", `ember: downloading ${what} from ${url} failed: HTTP ${resp.status}`);
  return new Uint8Array(await resp.arrayBuffer());
}

// Pyodide packages a tool needs beyond numpy (its module's PACKAGES), loaded on its first load/run so the page
// starts without them
const toolPackages = {};
function ensureToolPackages(tool) {
  const want = tools[tool] && tools[tool].packages;
  if (!want || !want.length) return null;
  if (!toolPackages[tool]) {
    toolPackages[tool] = pyodide.loadPackage(want, { messageCallback: () => {}, errorCallback: (s) => console.warn(s) })
      .catch((e) => {
        delete toolPackages[tool]; // a failed download is tried again next time
        throw new WorkerFail("download", `ember: cannot load ${want.join(", ")} for ${tool} (${e.message})`);
      });
    toolPackages[tool].catch(() => {}); // the caller may fail first (weights refused) and never await it
  }
  return toolPackages[tool];
}

async function setDevice(name, probe = false) {
  const r = await callPy("device", { device: name, probe: !!probe });
  device = r.device;
  return r;
}

// Call worker_api.handle(op, args) and unwrap its answer: as a task of Pyodide's event loop (as runPythonAsync's code
// runs: JSPI can suspend inside it, for WebGPU's synchronous reads), not through runPythonAsync, which parses and
// compiles its source each request (~1 ms). A run on the CPU, which never reads a GPU, goes through handle_now: on
// this call's stack until it first waits (most never do), sparing a task's scheduling (~0.25 ms a request).
let pyHandle = null, pyHandleNow = null;
async function callPy(op, args) {
  if (!pyHandle) {
    const api = pyodide.pyimport("ember.wasm.worker_api");
    pyHandle = api.handle;
    pyHandleNow = api.handle_now;
  }
  const pyArgs = pyodide.toPy(args, { depth: 1 });
  try {
    let out;
    try {
      out = await (op === "run" && device === "cpu" ? pyHandleNow : pyHandle)(op, pyArgs);
    } catch (e) { // the page's interrupt landed outside handle()'s own net
      if (/KeyboardInterrupt/.test(e.message)) throw new WorkerFail("cancelled", "ember: cancelled");
      throw e;
    }
    const r = out.toJs({ dict_converter: Object.fromEntries });
    out.destroy();
    if (r.error) throw new WorkerFail(r.error, r.message);
    return r.ok;
  } finally {
    pyArgs.destroy();
  }
}

// ------------------------------------------------------------------ weights

const cancelled = () => new WorkerFail("cancelled", "ember: cancelled");

// Download one file -> its bytes (null: an optional file the host does not have). `signal` aborts it at once.
async function download(file, progress, signal) {
  let resp;
  try {
    resp = await fetch(file.url, { signal });
  } catch (e) {
    if (signal.aborted) throw cancelled();
    throw new WorkerFail("download", `ember: cannot download ${file.url} (${e.message}); check the address and your connection`);
  }
  if (resp.status === 404 && file.optional) return null;
  if (!resp.ok) throw new WorkerFail("download", `ember: downloading ${file.url} failed: HTTP ${resp.status} ${resp.statusText}`);
  const total = Number(resp.headers.get("content-length")) || file.size || 0;
  if (total > MAX_MODEL_BYTES) {
    resp.body.cancel(); // refuse before downloading a byte of it
    throw tooLarge(file.name, total);
  }
  // With its size known the file streams into one buffer: a list of chunks beside the assembled copy would hold
  // the weights twice at the end of the download (with FS.write below, Gemma 3's 253 MB GGUF: renderer peak 1529 -> 1293 MiB).
  // A body longer than announced (a compressed transfer) falls back to the chunk list.
  let bytes = null;
  if (total) {
    try { bytes = new Uint8Array(total); } catch (e) { throw tooLarge(file.name, total); }
  }
  const chunks = [];
  let done = 0;
  const reader = resp.body.getReader();
  progress("download", file.name, 0, total);
  for (;;) {
    let step;
    try {
      step = await reader.read();
    } catch (e) {
      if (signal.aborted) throw cancelled();
      throw new WorkerFail("download", `ember: downloading ${file.url} broke off after ${done} bytes (${e.message})`);
    }
    if (step.done) break;
    const value = step.value;
    if (bytes && done + value.length <= bytes.length) bytes.set(value, done);
    else {
      if (bytes) { chunks.push(bytes.subarray(0, done)); bytes = null; }
      chunks.push(value);
    }
    done += value.length;
    progress("download", file.name, done, total);
  }
  if (bytes && done < bytes.length) bytes = bytes.slice(0, done); // shorter than announced: refused below if sized
  if (!bytes) {
    try {
      bytes = new Uint8Array(done);
    } catch (e) {
      throw tooLarge(file.name, done);
    }
    let at = 0;
    for (const c of chunks) { bytes.set(c, at); at += c.length; }
  }
  if (file.size != null && done !== file.size)
    throw new WorkerFail("download", `ember: ${file.url}: got ${done} bytes, expected ${file.size} (incomplete download)`);
  return bytes;
}

function tooLarge(name, bytes) {
  return new WorkerFail("too_large", `ember: ${name} is ${(bytes / 2 ** 30).toFixed(2)} GiB; the browser's ` +
    `WebAssembly memory holds at most about ${(MAX_MODEL_BYTES / 2 ** 30).toFixed(1)} GiB of weights`);
}

async function load(msg, progress) {
  // imported on the first load, not at start: the worker begins booting Pyodide one request sooner
  const { ABSENT, openCache, readCached, sha256Hex, storeModel } = await import("./model-cache.js");
  const packages = ensureToolPackages(msg.tool); // downloads beside the weights
  const known = msg.files.reduce((s, f) => s + (f.size || (f.bytes ? f.bytes.byteLength : 0)), 0);
  if (known > MAX_MODEL_BYTES) throw tooLarge(msg.tool, known);
  const folder = `/models/${msg.tool}/${msg.key.replace(/[^A-Za-z0-9._-]/g, "_")}`;
  pyodide.FS.mkdirTree(folder);
  const cache = await openCache().catch(() => null); // no Cache API off secure origins: downloaded every time
  const fresh = []; // files downloaded now: stored once the model has loaded, so a cancel or a failure keeps none
  const got = new Set();
  const files = [...msg.files];
  let held = 0; // shards are known only once their index is read: the total is checked as they arrive
  downloads = new AbortController();
  const { signal } = downloads;
  try {
    for (let i = 0; i < files.length; i++) {
      const f = files[i];
      if (f.unless && got.has(f.unless)) continue; // an alternative to a file we already have
      let bytes = f.bytes ? new Uint8Array(f.bytes) : cache ? await readCached(cache, f) : null;
      if (signal.aborted) throw cancelled();
      if (bytes === ABSENT) continue;
      if (bytes) progress("download", f.name, bytes.length, bytes.length);
      else if (!f.bytes) {
        bytes = await download(f, progress, signal);
        const sha256 = bytes && (await sha256Hex(bytes)); // stored with it: checked whenever it is read back
        if (bytes && f.sha256 && sha256 !== f.sha256)
          throw new WorkerFail("download", `ember: ${f.url}: sha256 does not match the manifest; refusing the file`);
        if (signal.aborted) throw cancelled();
        fresh.push({ file: f, bytes, sha256 });
      }
      if (!bytes) continue;
      writeOwned(`${folder}/${f.name.replace(/[\/\\]/g, "_")}`, bytes);
      got.add(f.name);
      if ((held += bytes.length) > MAX_MODEL_BYTES) throw tooLarge(msg.tool, held);
      if (f.url && f.name === "model.safetensors.index.json") files.push(...shardFiles(f, bytes));
    }
  } catch (e) {
    clearFolder(folder);
    throw e;
  } finally {
    downloads = null;
  }
  if (packages) await packages;
  progress("load", msg.tool, 0, 1);
  let info;
  try {
    info = await callPy("load", { tool: msg.tool, folder, device });
  } finally {
    clearFolder(folder); // the weights now live in the model; free the file copies
    progress("load", msg.tool, 1, 1);
  }
  if (cache && fresh.length) await storeModel(cache, fresh, { model: msg.key, tool: msg.tool, label: msg.label });
  return info;
}

function clearFolder(folder) {
  for (const name of pyodide.FS.readdir(folder))
    if (name !== "." && name !== "..") pyodide.FS.unlink(`${folder}/${name}`);
}

// Hand `bytes` to Pyodide's in-memory file system without a copy (FS.write's canOwn: MEMFS keeps the array as
// the file's contents; FS.writeFile would copy it, holding a model's weights twice until the load ends).
// The caller never touches `bytes` again; the file is unlinked once Python has read it.
function writeOwned(path, bytes) {
  const stream = pyodide.FS.open(path, "w");
  try {
    pyodide.FS.write(stream, bytes, 0, bytes.length, 0, true);
  } finally {
    pyodide.FS.close(stream);
  }
}

// The shards a fetched model.safetensors.index.json names, beside it (a sharded causal LM). Only plain file
// names: an index cannot point the worker at another folder or host.
function shardFiles(index, bytes) {
  let map;
  try { map = JSON.parse(new TextDecoder().decode(bytes)).weight_map; } catch (e) { map = null; }
  const shards = map && typeof map === "object" ? [...new Set(Object.values(map))] : [];
  if (!shards.length || !shards.every((n) => typeof n === "string" && /^[\w.-]+\.safetensors$/.test(n) && !n.startsWith(".")))
    throw new WorkerFail("bad_model", `ember: ${index.url}: weight_map must name .safetensors shards beside it`);
  return shards.map((name) => ({ name, url: index.url.replace(/[^/]+$/, name) }));
}

// ------------------------------------------------------------------ runs

async function run(msg) {
  const { id, tool } = msg;
  await ensureToolPackages(tool);
  let input = msg.input; // typed arrays, also inside an object (YOLO's {rgba}, ONNX feeds), reach Python as bytes
  if (input instanceof ArrayBuffer || ArrayBuffer.isView(input)) // one copy: JS heap -> Python bytes
    input = new Uint8Array(input.buffer || input, input.byteOffset || 0, input.byteLength);
  const onPartial = (...a) => post({ type: "partial", id, data: a.length === 1 ? a[0] : a });
  // {stage, done, total}: YOLO per stage, Whisper per 30 s window and segment; the page draws a bar from it
  const onProgress = (p) => post({ type: "progress", id, stage: p.stage, file: tool, done: p.done, total: p.total });
  const r = await callPy("run", { tool, input, opts: msg.opts || {}, on_partial: onPartial, on_progress: onProgress });
  // the wasm heap only grows: its size after a run is the peak the runtime has needed so far
  return { ...r, wasm_memory_bytes: pyodide._module.HEAPU8.buffer.byteLength };
}
