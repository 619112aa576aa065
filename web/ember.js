// ember.js: the public JS API of ember in the browser. The app uses only this; other pages can import it.
//
//   import { createEmber } from "./ember.js";
//   const ember = await createEmber({ device: "webgpu", onProgress: (p) => console.log(p) });
//   await ember.loadModel("whisper", "demo");                 // or "openai/whisper-tiny.en", a URL, File(s)
//   const { text, segments } = await ember.transcribe(float32Audio16k);
//   await ember.loadModel("whisper", "base");                 // a bundled demo by name: multilingual Whisper base
//   const { text, language } = await ember.transcribe(audio, { language: null });  // null: detected ("en", "de" ...)
//   await ember.loadModel("llama", "demo");
//   const { text, tokens } = await ember.generate("Once upon", { temperature: 0, max_new_tokens: 32 }, (t) => ...);
//   await ember.loadModel("yolo", "demo");
//   const detections = await ember.detect(imageBlob);           // [{class, label, score, box: [x1, y1, x2, y2]}]
//   const { inputs, outputs } = await ember.loadModel("onnx", "https://.../model.onnx");  // or a File
//   const results = await ember.run({ input: { type: "float32", data: float32Array, dims: [1, 3, 224, 224] } });
//   results.output.data, results.output.dims                     // typed arrays, as onnxruntime-web's tensors
//   const { history } = await ember.train({ epochs: 4 }, (ev) => plot(ev));   // the digits CNN, in the page
//
// Everything runs in a Web Worker (worker.js): Pyodide, numpy and the ember wheel, on WebGPU when the
// browser has an adapter and on the CPU otherwise. Results carry the same fields as the CLI's `--json`.
// On the CPU the kernels run on `ember.threads` threads (pool.js: createEmber({threads}), default the visitor's
// cores up to 8) where the page is cross-origin isolated; `ember.threadsReason` says why it is 1 otherwise.
import { poolSupport, relaxedSimd, startPool, threadCount } from "./pool.js";

const HERE = new URL(".", import.meta.url).href;
const HUB = "https://huggingface.co";

const SINGLE_FILE = /\.(safetensors|gguf|bin|onnx|pt)$/i; // a URL naming one weights file, not a folder
// Each tool (ember.wasm.tools.<name>) declares the files a model folder holds and what comes beside one weights
// file; the worker's `ready` carries that table (`ember.tools`), so nothing below knows a tool by name.

/** An error from ember: `code` is one of download, too_large, out_of_memory, unsupported_file, bad_model,
 *  not_loaded, bad_request, cancelled, internal, not_ready, pool_lost (a kernel pool worker died mid-run: the
 *  run failed, later ones run on one thread). */
export class EmberError extends Error {
  constructor(code, message) { super(message); this.name = "EmberError"; this.code = code; }
}

/**
 * Start the runtime. options: pyodideURL (folder holding pyodide.mjs; default: the app's config.json, else
 * ./pyodide/), wheelURL, modelsURL (folder with manifest.json), stdlibURL and pycacheURL (the precompiled
 * bytecode `ember build-web` writes; optional), hubURL (Hugging Face endpoint),
 * device ("auto" | "webgpu" | "cpu"), onProgress({stage, file, done, total}),
 * threads (the CPU kernels' threads, 1..64; default navigator.hardwareConcurrency, at most 8; 1: no pool),
 * poolURL / poolRelaxedURL (the kernel pool's module; from config.json), poolTimeoutMs (how long the page waits
 * for a pool worker that stops answering before it gives the job up with an error; default 10 s).
 */
export async function createEmber(options = {}) {
  let threads;
  try {
    threads = threadCount(options.threads, globalThis.navigator && navigator.hardwareConcurrency);
  } catch (e) {
    throw new EmberError("bad_request", e.message);
  }
  const config = await loadConfig(options.configURL || HERE + "config.json");
  const opts = { ...config, ...options };
  const ember = new Ember(opts);
  try {
    await ember._init(threads);
  } catch (e) {
    ember.terminate();
    throw e;
  }
  return ember;
}

async function loadConfig(url) {
  try {
    const r = await fetch(url);
    if (r.ok) {
      const c = await r.json();
      const abs = (p) => (p ? new URL(p, url).href : p);
      return { ...c, pyodideURL: abs(c.pyodideURL), wheelURL: abs(c.wheelURL), modelsURL: abs(c.modelsURL),
               stdlibURL: abs(c.stdlibURL), pycacheURL: abs(c.pycacheURL), // precompiled bytecode
               poolURL: abs(c.poolURL), poolRelaxedURL: abs(c.poolRelaxedURL), // the kernel pool's module
               prefetch: (c.prefetch || []).map(abs) }; // files the worker warms the HTTP cache with
    }
  } catch (e) { /* no config.json: defaults below */ }
  return {};
}

class Ember {
  constructor(opts) {
    this.options = opts;
    this.pyodideURL = opts.pyodideURL || HERE + "pyodide/";
    this.wheelURL = opts.wheelURL;
    this.modelsURL = opts.modelsURL || HERE + "models/";
    this.hubURL = (opts.hubURL || HUB).replace(/\/$/, "");
    this.onProgress = opts.onProgress || (() => {});
    this.device = "cpu";
    this.deviceReason = "";
    this.deviceAdapter = ""; // the WebGPU adapter, vendor/architecture and limits, when one was tried
    this.deviceKernels = "";
    this.threads = 1; // threads the CPU kernels run on (the kernel pool's, pool.js)
    this.threadsReason = ""; // why threads is 1, when it is
    this._pool = null; // the pool's owner side (its workers), when there is one
    this.models = {}; // tool -> {source, device, parameters, bytes}
    this.tools = {}; // tool -> {files: [[name, optional?, unless?]], beside: {".ext": [[name, optional?]]}, packages}
    this._next = 1;
    this._pending = new Map();
    this._worker = new Worker(new URL("worker.js", import.meta.url), { type: "module" });
    this._worker.onmessage = (ev) => this._onMessage(ev.data);
    this._worker.onerror = (ev) => this._failAll(new EmberError("internal", `ember: worker crashed: ${ev.message}`));
  }

  async _init(threads) {
    if (!this.wheelURL) throw new EmberError("bad_request", "ember: no wheelURL (the ember wheel); build the site with `ember build-web`");
    const pool = await this._startPool(threads);
    const r = await this._request({ type: "init", pyodideURL: this.pyodideURL, wheelURL: this.wheelURL,
      stdlibURL: this.options.stdlibURL, pycacheURL: this.options.pycacheURL,
      prefetch: this.options.prefetch || [],
      device: this.options.device || "auto", pool, poolReason: this.threadsReason });
    this._setThreads(r);
    this.device = r.device;
    this.deviceReason = r.reason || "";
    this.deviceAdapter = r.adapter || "";
    this.deviceKernels = r.kernels || ""; // the CPU's matmul path: "wasm-simd128+relaxed", "wasm-simd128 (why not relaxed)" or "einsum (why)"
    this.startup = r.marks || {}; // {worker, pyodide, numpy, import, device}: epoch ms each boot stage ended
    this.tools = r.tools || {};
  }

  /** Switch to "auto", "webgpu" or "cpu"; -> the device in use (cpu, with `deviceReason`, if WebGPU is unusable
   *  or, for "auto", a software renderer).
   *  Loaded models are dropped: load them again on the new device. */
  async setDevice(name) {
    const r = await this._request({ type: "device", device: name });
    this.device = r.device;
    this.deviceReason = r.reason || "";
    this.deviceAdapter = r.adapter || "";
    this.deviceKernels = r.kernels || ""; // the CPU's matmul path: "wasm-simd128+relaxed", "wasm-simd128 (why not relaxed)" or "einsum (why)"
    this._setThreads(r);
    this.models = {};
    return this.device;
  }

  // The kernel pool's workers, started here (this thread is never blocked, so it sees a worker die and tells the
  // pool at once); -> what the runtime's worker attaches to, or null with threadsReason set.
  async _startPool(threads) {
    const why = (text) => { this.threadsReason = text; return null; };
    if (threads === 1) return why("threads: 1 was asked for");
    const unsupported = poolSupport();
    if (unsupported) return why(unsupported);
    const relaxed = relaxedSimd();
    const url = relaxed ? this.options.poolRelaxedURL : this.options.poolURL;
    if (!url) return why("this build has no kernel pool module (poolURL; `ember build-web` writes it)");
    let module;
    try {
      const resp = await fetch(url);
      if (!resp.ok) throw new Error(`HTTP ${resp.status}`);
      module = await WebAssembly.compile(await resp.arrayBuffer());
    } catch (e) {
      return why(`the kernel pool's module did not load from ${url} (${e.message})`);
    }
    let pool;
    try {
      pool = await startPool({ threads, module, timeoutMs: this.options.poolTimeoutMs ?? 10000,
        spawn: () => new Worker(new URL("pool_worker.js", import.meta.url), { type: "module" }) });
    } catch (e) {
      return why(`the kernel pool did not start (${e.message})`);
    }
    if (pool.threads < 2) return why(pool.reason);
    this._pool = pool;
    return { memory: pool.memory, module, layout: pool.layout, threads: pool.threads,
             variant: relaxed ? "relaxed" : "plain" };
  }

  _setThreads(r) { // the runtime's word: the pool it uses (its module must match the thread's own kernels)
    if (r.threads === undefined) return;
    this.threads = r.threads;
    this.threadsReason = r.threads > 1 ? "" : r.threads_reason || this.threadsReason;
  }

  /** The bundled demo models: {tool: [{id, label, files: [{name, url, size, sha256}], ...}]}. */
  async manifest() {
    if (!this._manifest) {
      const r = await fetch(this.modelsURL + "manifest.json").catch(() => null);
      this._manifest = r && r.ok ? await r.json() : {};
    }
    return this._manifest;
  }

  /** Resolve a source to the file list the worker downloads: "demo" / "demo:<id>", a hub id "owner/name",
   *  "owner/name/file.pt" (one file of a hub repo), an http(s) URL of a folder or of one weights file, a File,
   *  or an array/FileList of Files. */
  async resolve(tool, source) {
    const spec = this.tools[tool];
    if (!spec) throw new EmberError("bad_request", `ember: unknown tool ${tool}`);
    // a bundled demo: the first ("demo"), by id ("demo:whisper-base"), or by its short name ("base", "tiny.en":
    // the id after "<tool>-"), as the CLI's --model names it
    const short = typeof source === "string" && /^[\w.-]+$/.test(source) && source !== "demo";
    if (source == null || source === "demo" || short || (typeof source === "string" && source.startsWith("demo:"))) {
      const list = (await this.manifest())[tool] || [];
      const want = short ? source : typeof source === "string" && source.startsWith("demo:") ? source.slice(5) : null;
      const m = want ? list.find((x) => x.id === want || x.id === `${tool}-${want}`) : list[0];
      if (!m) throw new EmberError("bad_request", `ember: no bundled ${tool} model${want ? " " + want : ""} in this build` +
        (list.length ? ` (it has ${list.map((x) => x.id.replace(`${tool}-`, "")).join(", ")})` : ""));
      return { key: "demo-" + m.id, files: m.files.map((f) => ({ ...f, url: new URL(f.url, this.modelsURL).href })) };
    }
    if (typeof File !== "undefined" && (source instanceof File || source instanceof Blob)) source = [source];
    if (typeof source === "object" && typeof source.length === "number") {
      // a nameless Blob takes the name of the tool's first file (an ONNX model: model.onnx)
      const files = await Promise.all(Array.from(source, async (f, i) => ({
        name: f.name || (i ? `file${i}` : spec.files[0][0]), bytes: await f.arrayBuffer() })));
      if (!files.length) throw new EmberError("unsupported_file", "ember: no file chosen");
      return { key: "local-" + files.map((f) => f.name + f.bytes.byteLength).join("-"), files };
    }
    const text = String(source).trim();
    let base;
    if (/^https?:\/\//.test(text)) base = text.replace(/\/$/, "");
    else if (/^[A-Za-z0-9][\w.-]*\/[\w.-]+$/.test(text)) base = `${this.hubURL}/${text}/resolve/main`;
    else if (/^[A-Za-z0-9][\w.-]*\/[\w.-]+\/[\w./-]+$/.test(text) && SINGLE_FILE.test(text)) { // owner/name/file.pt
      const [owner, name, ...path] = text.split("/");
      base = `${this.hubURL}/${owner}/${name}/resolve/main/${path.join("/")}`;
    }
    else throw new EmberError("bad_request", `ember: "${text}" is neither a Hugging Face id (owner/name, or owner/name/file) nor an http(s) URL`);
    if (SINGLE_FILE.test(base)) {
      const name = base.split("/").pop().split("?")[0];
      const beside = spec.beside[name.slice(name.lastIndexOf(".")).toLowerCase()] || []; // llama2.c's tokenizer.bin ...
      const files = [{ name, url: base }, ...beside.map(([n, optional]) =>
        ({ name: n, url: base.replace(/[^/]+$/, n), ...(optional ? { optional: true } : {}) }))];
      return { key: base, files };
    }
    return { key: base, files: spec.files.map(([name, optional, unless]) =>
      ({ name, url: `${base}/${name}`, optional: !!optional, ...(unless ? { unless } : {}) })) };
  }

  /** Download (or read from the cache) and load a model for `tool`; -> {tool, device, parameters, bytes}, for
   *  Whisper also {multilingual, languages}, for text generation {context, kv_2k_bytes} (Gemma 3: the KV cache
   *  at 2k tokens, sliding layers keeping their window only), for YOLO {task, classes}, for ONNX {inputs,
   *  outputs: [{name, type, shape}], opsets} (operators ember lacks are reported here, code bad_model, each op
   *  and opset named, not at run time). ONNX: `source` is an http(s) URL of a .onnx file, a File/Blob, or an
   *  array of Files (the .onnx plus its external-data files). */
  async loadModel(tool, source = "demo") {
    const { key, files } = await this.resolve(tool, source);
    const transfer = files.filter((f) => f.bytes).map((f) => f.bytes);
    const info = await this._request({ type: "load", tool, key, files }, null, transfer);
    this.models[tool] = { ...info, source: typeof source === "string" ? source : key };
    return this.models[tool];
  }

  /** Speech -> {text, language, segments: [{start, end, text, tokens}], ms}. `audio`: Float32Array of 16 kHz
   *  mono samples, or the bytes (ArrayBuffer/Blob) of a WAV file, read and resampled as the CLI does.
   *  opts: language (a code such as "en"; null or missing: detected on the first 30 s by a multilingual model,
   *  "en" for an English-only one; `language` in the result says which), timestamps, beam, fallback.
   *  onSegment(segment) fires as each segment is decoded. */
  async transcribe(audio, opts = {}, onSegment) {
    let input = audio;
    if (typeof Blob !== "undefined" && audio instanceof Blob) input = await audio.arrayBuffer();
    if (input instanceof Float32Array) input = input.slice(); // transferred below: keep the caller's copy
    return this._run("whisper", input, opts, onSegment);
  }

  /** Prompt -> {text, tokens, prompt_tokens, tokens_per_s, stopped} like `ember llama --json`.
   *  opts: temperature (0 = greedy), top_p, top_k, max_new_tokens, seed, repetition_penalty.
   *  onToken(piece, nTokens, tokensPerSecond) fires per piece. `cancel()` stops it (stopped: "cancelled"). */
  async generate(prompt, opts = {}, onToken) {
    return this._run("llama", String(prompt), opts, onToken && ((d) => onToken(...d)));
  }

  /** Image (Blob/File/ArrayBuffer of an encoded image, or ImageData) -> detections like `ember yolo --json`:
   *  [{class, label, score, box: [x1, y1, x2, y2]}], with .ms, .width, .height, .input ([H, W] the model
   *  saw) and .stopped ("done" | "cancelled") set on the array. opts as Ultralytics predict's defaults:
   *  conf 0.25, iou 0.7, max_det 300, and square: true for the fixed imgsz x imgsz input (rect=False).
   *  The instance's onProgress sees {stage, file: "yolo", done, total} per stage; `cancel()` stops between stages. */
  async detect(image, opts = {}) {
    let input = image, transfer;
    if (typeof Blob !== "undefined" && image instanceof Blob) input = await image.arrayBuffer();
    else if (typeof ImageData !== "undefined" && image instanceof ImageData) {
      const rgba = new Uint8Array(image.data.slice().buffer); // ours to transfer; Python gets it as bytes
      input = { rgba, width: image.width, height: image.height };
      transfer = [rgba.buffer];
    }
    const r = await this._run("yolo", input, opts, null, transfer);
    return Object.assign(r.detections, { ms: r.ms, width: r.width, height: r.height, input: r.input, stopped: r.stopped });
  }

  // ---- the training tool (wasm/tools/train.py; the page's UI is web/train.js)
  /** Train the digits CNN here, in the browser, on this instance's device. config: {epochs, batch_size, lr,
   *  weight_decay, warmup, seed, resume, data} (defaults: ember.models.digits.TrainConfig; data: the bundled
   *  "demo" digits or a digits.csv.gz File/URL). onStep(event) after every step ({kind: "step", step, epoch,
   *  batch, batches, loss, accuracy, lr}) and epoch ({kind: "epoch", loss, accuracy, val_loss, val_accuracy}).
   *  -> {history, stopped: "done" | "paused", step, epoch, steps_per_s, seconds}. `cancel()` pauses at the next
   *  step; train({...config, resume: true}) then continues exactly where it stopped. */
  async train(config = {}, onStep) {
    const { data, ...opts } = config;
    if (!this.models.train || (data && this.models.train.source !== data)) await this.loadModel("train", data || "demo");
    return this._run("train", null, { ...opts, device: this.device }, onStep);
  }

  /** Classify an 8x8 digit (64 values in [0, 1], row-major) with the model train() made -> {class, probs}. */
  async predictDigit(pixels) {
    return this._run("train", Float32Array.from(pixels), { predict: true });
  }

  /** Texts -> Float32Array[] (unit vectors: dot product = cosine), by the loaded "embed" model. */
  async embed(texts) {
    const list = typeof texts === "string" ? [texts] : Array.from(texts);
    const r = await this._run("embed", list, {});
    const bytes = r.vectors instanceof Uint8Array ? r.vectors : new Uint8Array(r.vectors);
    const all = new Float32Array(bytes.slice().buffer); // an aligned copy of the (count, dim) float32 rows
    return Array.from({ length: r.count }, (_, i) => all.subarray(i * r.dim, (i + 1) * r.dim));
  }

  /** A document split into passages (paragraphs, long ones at sentence ends), as the search tool indexes it. */
  async passages(text) { return (await this._run("embed", text, { split: true })).passages; }

  /** Run the loaded ONNX model: feeds {name: {type?, data, dims} | TypedArray}; outputNames optional.
   *  -> {name: {type, data: TypedArray, dims}} (plus a non-enumerable `ms`). Tensors as onnxruntime-web's; a
   *  bare typed array as a feed takes the model input's declared shape when that is fully known (else 1-D),
   *  and its type from the array's class. */
  async run(feeds, outputNames) {
    const model = this.models.onnx;
    if (!model) throw new EmberError("not_loaded", "ember: no ONNX model loaded; call loadModel('onnx', ...) first");
    const msg = {}, transfer = [];
    for (const [name, value] of Object.entries(feeds)) {
      const t = ArrayBuffer.isView(value) ? { data: value } : value;
      if (!t || !ArrayBuffer.isView(t.data)) throw new EmberError("bad_request", `ember: feed ${name} needs a typed array (data)`);
      const type = t.type || ONNX_TYPE_OF.get(t.data.constructor);
      if (!type) throw new EmberError("bad_request", `ember: feed ${name}: no ONNX type for ${t.data.constructor.name}`);
      const decl = (model.inputs.find((i) => i.name === name) || {}).shape;
      const dims = t.dims || (decl && decl.every((d) => typeof d === "number") ? decl : [t.data.length]);
      const bytes = new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength).slice(); // ours to transfer
      transfer.push(bytes.buffer);
      msg[name] = { type, dims: Array.from(dims, Number), bytes };
    }
    const r = await this._run("onnx", msg, { outputs: outputNames || null }, null, transfer);
    const out = {};
    for (const [name, t] of Object.entries(r.outputs)) {
      const b = t.bytes instanceof Uint8Array ? t.bytes : new Uint8Array(t.bytes);
      const Arr = ONNX_ARRAYS[t.type] || Float32Array;
      const data = new Arr(b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength));
      out[name] = { type: t.type, dims: Array.from(t.dims), data };
    }
    return Object.defineProperty(out, "ms", { value: r.ms, enumerable: false });
  }

  /** Stop the running request at its next step (a token, a segment). */
  cancel() { this._worker.postMessage({ type: "cancel" }); }

  terminate() {
    this._worker.terminate();
    if (this._pool) this._pool.stop();
    this._failAll(new EmberError("cancelled", "ember: terminated"));
  }

  // The one run message: `tool`'s module in ember.wasm.tools gets input and opts; onPartial sees what it streams.
  // `transfer`: the buffers that move to the worker (default: the input's own, when it is one).
  _run(tool, input, opts, onPartial, transfer) {
    transfer = transfer || (input instanceof ArrayBuffer ? [input] : ArrayBuffer.isView(input) ? [input.buffer] : []);
    return this._request({ type: "run", tool, input, opts }, onPartial, transfer);
  }

  _request(msg, onPartial, transfer) {
    const id = this._next++;
    return new Promise((resolve, reject) => {
      this._pending.set(id, { resolve, reject, onPartial });
      this._worker.postMessage({ ...msg, id }, transfer || []);
    });
  }

  _onMessage(m) {
    const p = this._pending.get(m.id);
    if (m.type === "progress") { this.onProgress(m); return; }
    if (!p) return;
    if (m.type === "partial") { if (p.onPartial) p.onPartial(m.data); return; }
    this._pending.delete(m.id);
    if (m.type === "error" && m.code === "pool_lost") { // the runtime goes on, on one thread
      this.threads = 1;
      this.threadsReason = m.message.replace(/^ember: /, "");
    }
    if (m.type === "error") p.reject(new EmberError(m.code, m.message));
    else p.resolve(m.type === "ready" ? m : m.data);
  }

  _failAll(err) {
    for (const p of this._pending.values()) p.reject(err);
    this._pending.clear();
  }
}

// onnxruntime-web's tensor types: {type, data: TypedArray, dims}
const ONNX_ARRAYS = { float32: Float32Array, float64: Float64Array, float16: Uint16Array, int8: Int8Array,
  uint8: Uint8Array, int16: Int16Array, uint16: Uint16Array, int32: Int32Array, uint32: Uint32Array,
  int64: BigInt64Array, uint64: BigUint64Array, bool: Uint8Array };
const ONNX_TYPE_OF = new Map([[Float32Array, "float32"], [Float64Array, "float64"], [Int8Array, "int8"],
  [Uint8Array, "uint8"], [Int16Array, "int16"], [Uint16Array, "uint16"], [Int32Array, "int32"],
  [Uint32Array, "uint32"], [BigInt64Array, "int64"], [BigUint64Array, "uint64"]]);
