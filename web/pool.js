// pool.js: the page's kernel pool. ember's C kernels (core/backends/cpu_kernels, parallel.h) built as one wasm module
// that imports a shared WebAssembly.Memory (cpu_pool_kernels.wasm), instantiated in N - 1 workers and in the thread
// that calls them, so a matmul or a decoded token splits its rows between N threads. Pyodide is built without
// threads, so this is ember's own: Python (core/backends/cpu_pool.py, in the Pyodide worker) copies activations
// into the shared memory, calls the caller's instance (which posts the job, works its share and waits with
// memory.atomic.wait32, bounded) and copies results back; weights are placed there once.
//
//   owner (the page, or Node's main thread)      startPool({threads, module, spawn})      -> pool
//   caller (the Pyodide worker, or Node's main)   attachPool({memory, module, layout, ...}) -> what Python sees
//
// The owner supervises: a worker whose script fails, whose kernel traps or that it terminates is reported lost in
// the shared control words at once, and the caller's wait ends in an error instead of a hang (pool.c). A
// SharedArrayBuffer needs a cross-origin isolated page (COOP + COEP headers): `poolSupport()` says why not.

export const CTL = { GEN: 0, INSIDE: 1, NEXT: 2, DONE: 3, SLEEPING: 4, ACTIVE: 5, READY: 6, LOST: 7, BROKEN: 8,
  STOP: 9, SPIN: 10, TIMEOUT_MS: 11, BUSY: 12, JOBS: 13 }; // pool.c's control words, in its order
export const MAX_THREADS = 64; // parallel.h's PARALLEL_MAX_THREADS
export const DEFAULT_CAP = 8; // the default thread count is the visitor's cores, at most this many
const PAGE = 65536;
const STACK_BYTES = 1 << 20; // a worker instance's stack (the caller keeps the 1 MiB the module links)
const START_MS = 30000; // a worker that has not started by then is left out

/** Whether this context can run the pool: "" if so, else why not (shown in the page's device line). */
export function poolSupport() {
  if (typeof SharedArrayBuffer === "undefined" || (globalThis.crossOriginIsolated === false))
    return "this page is not cross-origin isolated (its server sends no Cross-Origin-Opener-Policy: same-origin " +
      "and Cross-Origin-Embedder-Policy headers), so the browser withholds SharedArrayBuffer";
  try {
    new WebAssembly.Memory({ initial: 1, maximum: 1, shared: true });
  } catch (e) {
    return `this browser has no shared WebAssembly memory (${e.message})`;
  }
  return "";
}

// the smallest module using a relaxed SIMD instruction (cpu_wasm_kernels.py's probe): () -> v128 computing
// f32x4.relaxed_madd(0, 0, 0); the pool loads the relaxed build where it validates, as the runtime's thread does
const RELAXED_PROBE = new Uint8Array([0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, 0x01, 0x05, 0x01, 0x60, 0x00,
  0x01, 0x7b, 0x03, 0x02, 0x01, 0x00, 0x0a, 0x3d, 0x01, 0x3b, 0x00, ...[0, 1, 2].flatMap(() => [0xfd, 0x0c,
  ...new Array(16).fill(0)]), 0xfd, 0x85, 0x02, 0x0b]);

/** Whether this engine validates relaxed SIMD. */
export function relaxedSimd() {
  try { return WebAssembly.validate(RELAXED_PROBE); } catch (e) { return false; }
}

/** The thread count for `requested` (undefined: the cores, capped at DEFAULT_CAP); throws a RangeError/TypeError
 *  naming the value for anything but an integer 1..MAX_THREADS. */
export function threadCount(requested, cores) {
  if (requested === undefined || requested === null)
    return Math.max(1, Math.min(DEFAULT_CAP, Math.floor(Number(cores) || 1)));
  if (typeof requested !== "number" || !Number.isInteger(requested))
    throw new TypeError(`ember: threads must be a whole number from 1 to ${MAX_THREADS}, got ` +
      (typeof requested === "string" ? JSON.stringify(requested) : String(requested)));
  if (requested < 1 || requested > MAX_THREADS)
    throw new RangeError(`ember: threads must be from 1 to ${MAX_THREADS} (1 turns the pool off), got ${requested}`);
  return requested;
}

/** Owner: the shared memory, the module's layout and threads - 1 started workers.
 *  module: a compiled WebAssembly.Module of cpu_pool_kernels(_relaxed).wasm; spawn(): a new worker running
 *  pool_worker.js (a Web Worker or a Node Worker, with postMessage/onmessage or on("message")). */
export async function startPool({ threads, module, spawn, timeoutMs = 10000, maxBytes = 2 ** 32 }) {
  let memory = null;
  for (let max = maxBytes; !memory && max >= 2 ** 28; max /= 2) { // engines reserve the maximum as address space
    try { memory = new WebAssembly.Memory({ initial: 64, maximum: max / PAGE, shared: true }); } catch (e) { /* smaller */ }
  }
  if (!memory) throw new Error("ember: cannot reserve a shared WebAssembly memory of 256 MiB");
  // an instance here reads the module's layout (and initialises its data: the first instance does, once)
  const probe = await WebAssembly.instantiate(module, { env: { memory } });
  const heapBase = probe.exports.__heap_base.value;
  const ctlAt = probe.exports.ember_pool_ctl();
  const stacks = align(heapBase, 64);
  const arenaBase = align(stacks + (threads - 1) * STACK_BYTES, 4096);
  growTo(memory, arenaBase + (1 << 20));
  const ctl = new Int32Array(memory.buffer, ctlAt, 16);
  Atomics.store(ctl, CTL.TIMEOUT_MS, timeoutMs);
  Atomics.store(ctl, CTL.ACTIVE, threads);
  const pool = { memory, module, threads: 1, reason: "", ctlAt, arenaBase, workers: [], lost: [],
    layout: { ctlAt, arenaBase } };
  pool.lose = (i, why) => { // worker i (1-based) is gone: the caller's wait ends (pool.c wait_done)
    if (!pool.lost[i]) pool.lost[i] = why;
    Atomics.compareExchange(ctl, CTL.LOST, 0, i);
    Atomics.notify(ctl, CTL.DONE);
    Atomics.notify(ctl, CTL.INSIDE);
  };
  pool.terminate = (i, why = "terminated") => { // (also the tests' way to lose a worker mid-job)
    const w = pool.workers[i];
    if (w) { w.terminate(); pool.lose(i, why); }
  };
  pool.stop = () => {
    Atomics.store(ctl, CTL.STOP, 1);
    Atomics.notify(ctl, CTL.GEN);
    for (const w of pool.workers) if (w) w.terminate();
  };
  const started = [];
  for (let i = 1; i < threads; i++) {
    const w = spawn();
    pool.workers[i] = w;
    started.push(new Promise((resolve) => {
      const timer = setTimeout(() => resolve(`worker ${i} did not start within ${START_MS / 1000} s`), START_MS);
      const onMessage = (msg) => {
        if (msg.type === "ready") { clearTimeout(timer); resolve(""); }
        else if (msg.type === "lost") { clearTimeout(timer); pool.lose(i, msg.error); resolve(msg.error); }
      };
      const onError = (e) => {
        const why = `worker ${i} failed: ${e.message || e}`;
        clearTimeout(timer);
        pool.lose(i, why);
        resolve(why);
      };
      if (w.on) { w.on("message", onMessage); w.on("error", onError); } // Node worker_threads
      else {
        w.onmessage = (ev) => onMessage(ev.data);
        w.onerror = (ev) => { ev.preventDefault(); onError(ev); };
      }
    }));
    w.postMessage({ module, memory, id: i, stackTop: stacks + i * STACK_BYTES, ctlAt });
  }
  const problems = (await Promise.all(started)).filter(Boolean);
  if (problems.length) { // a pool short of a worker would wait on it: none, and the page says why
    pool.stop();
    pool.reason = `the kernel pool did not start (${problems[0]})`;
    return pool;
  }
  pool.threads = threads;
  return pool;
}

/** Caller: an instance of the module over the pool's memory, and what cpu_pool.py calls. heap(): the current
 *  Uint8Array of Pyodide's own memory (it is replaced when that memory grows). */
export async function attachPool({ memory, module, layout, threads, variant, reason = "", heap }) {
  const { instance } = await WebAssembly.instantiate(module, { env: { memory } }).then((i) => ({ instance: i }));
  const ex = instance.exports;
  let u8 = new Uint8Array(memory.buffer);
  const view = () => (u8.byteLength === memory.buffer.byteLength ? u8 : (u8 = new Uint8Array(memory.buffer)));
  const ctl = new Int32Array(memory.buffer, layout.ctlAt, 16);
  return {
    threads, variant, reason, memory, exports: ex, arenaBase: layout.arenaBase,
    bytes: () => memory.buffer.byteLength,
    /** grow the memory to hold `end` bytes; -> its size, or -1 when it cannot grow that far */
    grow(end) {
      try { growTo(memory, end); return memory.buffer.byteLength; } catch (e) { return -1; }
    },
    copyIn(ptr, n, at) { view().set(heap().subarray(ptr, ptr + n), at); },
    copyOut(at, n, ptr) { heap().set(view().subarray(at, at + n), ptr); },
    /** `count` copies out, listed in Pyodide's heap at `list` as int32 (at, n, ptr, layer) rows, each moved at
     *  both ends by n bytes times its layer's slot (the first of the `layers` int32 (slot, length) pairs at
     *  `slots`): a decode step's new KV rows, one call a step and no table rewritten in Python; addresses read
     *  unsigned */
    copyOutRows(list, count, slots, layers) {
      const h = heap(), v = view(), t = new Int32Array(h.buffer, list, 4 * count);
      const s = new Int32Array(h.buffer, slots, 2 * layers);
      for (let i = 0; i < 4 * count; i += 4) {
        const n = t[i + 1], off = n * s[2 * t[i + 3]], at = (t[i] >>> 0) + off;
        h.set(v.subarray(at, at + n), (t[i + 2] >>> 0) + off);
      }
    },
    /** a file's bytes (Pyodide's in-memory FS keeps them as a JS array) straight into the memory: no copy in
     *  Pyodide's heap; false when the file is not one held in memory */
    fileIn(node, offset, n, at) {
      const c = node && node.contents;
      if (!c || !ArrayBuffer.isView(c) || offset + n > (node.usedBytes ?? c.length)) return false;
      view().set(c.subarray(offset, offset + n), at);
      return true;
    },
    state: () => ({ active: Atomics.load(ctl, CTL.ACTIVE), ready: Atomics.load(ctl, CTL.READY),
      lost: Atomics.load(ctl, CTL.LOST), broken: Atomics.load(ctl, CTL.BROKEN), jobs: Atomics.load(ctl, CTL.JOBS),
      timeout_ms: Atomics.load(ctl, CTL.TIMEOUT_MS) }),
    setActive(n) { Atomics.store(ctl, CTL.ACTIVE, Math.max(1, Math.min(threads, n))); },
    setTimeout(ms) { Atomics.store(ctl, CTL.TIMEOUT_MS, ms); },
  };
}

function align(n, a) { return Math.ceil(n / a) * a; }

function growTo(memory, end) {
  const have = memory.buffer.byteLength;
  if (end > have) memory.grow(Math.ceil((end - have) / PAGE));
}
