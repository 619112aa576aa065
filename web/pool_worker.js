// pool_worker.js: one worker of the page's kernel pool (pool.js). It instantiates the kernels' module over the shared
// memory, takes its own stack, says "ready" and enters pool.c's loop, which waits for jobs in the shared control
// words and returns only when the pool stops. A failure (the module, a kernel's trap) marks this worker lost in
// those words, so that the caller's wait ends in an error at once, and tells the owner why.
const node = typeof self === "undefined" ? (await import("node:worker_threads")).parentPort : null;
const post = (m) => (node ? node.postMessage(m) : self.postMessage(m));
const LOST = 7, DONE = 3, INSIDE = 1; // pool.js CTL

async function run({ module, memory, id, stackTop, ctlAt }) {
  const ctl = new Int32Array(memory.buffer, ctlAt, 16);
  try {
    const instance = await WebAssembly.instantiate(module, { env: { memory } });
    instance.exports.__stack_pointer.value = stackTop;
    post({ type: "ready" });
    instance.exports.ember_pool_worker(id);
  } catch (e) {
    Atomics.compareExchange(ctl, LOST, 0, id);
    Atomics.notify(ctl, DONE);
    Atomics.notify(ctl, INSIDE);
    post({ type: "lost", error: `worker ${id}: ${e && e.message ? e.message : e}` });
  }
  if (node) node.close();
  else self.close();
}

if (node) node.once("message", run);
else self.onmessage = (ev) => run(ev.data);
