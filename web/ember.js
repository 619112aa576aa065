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
//   await ember.loadModel("segment", "Zigeng/SlimSAM-uniform-77");   // Segment Anything: no weights bundled
//   const { masks, scores, best } = await ember.segment(imageData, { points: [[450, 600, 1]] });  // per click
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
// cancel(): a download stops at once and a run at its next step; a request still going after INTERRUPT_MS is
// interrupted mid-step (cross-origin isolated pages: Python's interrupt buffer), and after RESTART_MS the worker
// is replaced by a fresh one, so no wait outlasts a second.
const INTERRUPT_MS = 250, RESTART_MS = 700;
// Each tool (ember.wasm.tools.<name>) declares the files a model folder holds and what comes beside one weights
// file; the worker's `ready` carries that table (`ember.tools`), so nothing below knows a tool by name.

/** An error from ember: `code` is one of download, too_large, out_of_memory, unsupported_file, bad_model,
 *  not_loaded, bad_request, cancelled, internal, not_ready, pool_lost (a kernel pool worker died mid-run: the
 *  run failed, later ones run on one thread) (and, from the app's guard.js, busy). */
export class EmberError extends Error {
  constructor(code, message) { super(message); this.name = "EmberError"; this.code = code; }
}

/**
 * Start the runtime. options: pyodideURL (folder holding pyodide.mjs; default: the app's config.json, else
 * ./pyodide/), wheelURL, modelsURL (folder with manifest.json), stdlibURL and pycacheURL (the precompiled
 * bytecode `ember build-web` writes; optional), bootURL (numpy, ember and that bytecode in one tar; optional),
 * hubURL (Hugging Face endpoint),
 * device ("auto" | "webgpu" | "cpu"), probe (with "cpu": also ask what "auto" would pick, `deviceAuto`),
 * onProgress({stage, file, done, total}), onRestart(): the runtime was restarted to end a request that did
 * not stop within a second of cancel(); the models are then unloaded (and the kernel pool started afresh),
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
  // the worker's thread starts (and fetches worker.js) while the config arrives: ~0.1 s of a warm page load
  const worker = spawnWorker();
  let config;
  try {
    config = await loadConfig(options.configURL || HERE + "config.json");
  } catch (e) {
    worker.terminate();
    throw e;
  }
  const opts = { ...config, ...options };
  const ember = new Ember(opts, worker);
  try {
    ember._threadsWanted = threads;
    await ember._init();
  } catch (e) {
    ember.terminate();
    throw e;
  }
  return ember;
}

function spawnWorker() {
  return new Worker(new URL("worker.js", import.meta.url));
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
               bootURL: abs(c.bootURL) }; // numpy + ember + their bytecode in one tar
    }
  } catch (e) { /* no config.json: defaults below */ }
  return {};
}

class Ember {
  constructor(opts, worker = null) {
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
    this._threadsWanted = 1; // createEmber's threads: what each start of the runtime (a restart too) asks of the pool
    this.deviceAuto = null; // {device, reason}: what "auto" picks here (null: not asked)
    this.models = {}; // tool -> {source, device, parameters, bytes}
    this.tools = {}; // tool -> {files: [[name, optional?, unless?]], beside: {".ext": [[name, optional?]]}, packages}
    this._next = 1;
    this._pending = new Map();
    this._ready = null; // while the runtime restarts: requests wait for it
    this._spawn(worker);
  }

  _spawn(worker = null) {
    this._worker = worker || spawnWorker();
    this._worker.onmessage = (ev) => this._onMessage(ev.data);
    this._worker.onerror = (ev) => this._failAll(new EmberError("internal", `ember: worker crashed: ${ev.message}`));
  }

  async _init(device = this.options.device || "auto") {
    if (!this.wheelURL) throw new EmberError("bad_request", "ember: no wheelURL (the ember wheel); build the site with `ember build-web`");
    const urls = { pyodideURL: this.pyodideURL, wheelURL: this.wheelURL, stdlibURL: this.options.stdlibURL,
      pycacheURL: this.options.pycacheURL, bootURL: this.options.bootURL };
    this._worker.postMessage({ type: "boot", ...urls }); // Pyodide starts now, while the kernel pool starts here
    const pool = await this._startPool(this._threadsWanted);
    const r = await this._request({ type: "init", ...urls, device, probe: !!this.options.probe, pool,
      poolReason: this.threadsReason });
    this._deviceInfo(r);
    this.startup = r.marks || {}; // {worker, pyodide, numpy, import, device}: epoch ms each boot stage ended
    this.tools = r.tools || {};
    this._interrupt = r.interrupt ? new Int32Array(r.interrupt) : null;
  }

  _deviceInfo(r) {
    this._setThreads(r);
    this.device = r.device;
    this.deviceReason = r.reason || "";
    this.deviceAdapter = r.adapter || "";
    this.deviceKernels = r.kernels || ""; // the CPU's matmul path: "wasm-simd128+relaxed", "wasm-simd128 (why not relaxed)" or "einsum (why)"
    if (r.auto !== undefined) this.deviceAuto = r.auto || null;
  }

  /** Switch to "auto", "webgpu" or "cpu"; -> the device in use (cpu, with `deviceReason`, if WebGPU is unusable
   *  or, for "auto", a software renderer).
   *  Loaded models are dropped: load them again on the new device. */
  async setDevice(name, { probe = false } = {}) {
    const r = await this._request({ type: "device", device: name, probe });
    this._deviceInfo(r);
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
      return { key: "demo-" + m.id, label: m.label, files: m.files.map((f) => ({ ...f, url: new URL(f.url, this.modelsURL).href })) };
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
    const { key, files, label } = await this.resolve(tool, source);
    const transfer = files.filter((f) => f.bytes).map((f) => f.bytes);
    const info = await this._request({ type: "load", tool, key, files, label: label || key }, null, transfer);
    this.models[tool] = { ...info, source: typeof source === "string" ? source : key };
    return this.models[tool];
  }

  /** Speech -> {text, language, segments: [{start, end, text, tokens}], ms}. `audio`: Float32Array of 16 kHz
   *  mono samples, or the bytes (ArrayBuffer/Blob) of a WAV file, read and resampled as the CLI does.
   *  opts: language (a code such as "en"; null or missing: detected on the first 30 s by a multilingual model,
   *  "en" for an English-only one; `language` in the result says which), timestamps, beam, fallback,
   *  words (each segment gets words: [{word, start, end, probability}]), vad (Silero VAD: silence skipped, times
   *  in the input's timeline), task ("translate" on a multilingual model), initial_prompt,
   *  condition_on_previous_text, deterministic (default true: the desktop's `--deterministic` tokens).
   *  onSegment(segment) fires as each segment is decoded. */
  async transcribe(audio, opts = {}, onSegment) {
    let input = audio;
    if (typeof Blob !== "undefined" && audio instanceof Blob) input = await audio.arrayBuffer();
    if (input instanceof Float32Array) input = input.slice(); // transferred below: keep the caller's copy
    return this._run("whisper", input, opts, onSegment);
  }

  /** Live captions: `const live = await ember.transcribeLive({language})`, then `await live.push(float32At16k)`
   *  as audio comes -> {committed: [{word, start, end}] (final, never revised), partial (may still change), t,
   *  speech, level}; `await live.stop()` commits the rest. Needs a model loaded with Silero VAD (the demos). */
  async transcribeLive(opts = {}) {
    await this._run("whisper", null, { ...opts, stream: "start" });
    return {
      push: (samples) => this._run("whisper", Float32Array.from(samples), { stream: "push", rate: 16000 }),
      stop: () => this._run("whisper", null, { stream: "stop" }),
    };
  }

  /** Prompt -> {text, tokens, prompt_tokens, tokens_per_s, stopped} like `ember llama --json`.
   *  opts: temperature (0 = greedy), top_p, top_k, max_new_tokens, seed, repetition_penalty.
   *  onToken(piece, nTokens, tokensPerSecond) fires per piece. `cancel()` stops it (stopped: "cancelled"). */
  async generate(prompt, opts = {}, onToken) {
    return this._run("llama", String(prompt), opts, onToken && ((d) => onToken(...d)));
  }

  /** Chat with the text tool's model when it carries a chat template (loadModel("llama", ...) says `chat: true`;
   *  the bundled demo is SmolLM2-135M-Instruct), shaped like OpenAI's and WebLLM's API:
   *    const r = await ember.chat.completions.create({ messages, max_tokens, temperature, seed, stop });
   *    r.choices[0].message.content; r.usage   // usage.extra: prefill_tokens, cached_tokens, ttft_ms, tokens_per_s
   *    for await (const c of await ember.chat.completions.create({ messages, stream: true })) c.choices[0].delta
   *  messages: [{role, content}] (the whole conversation: the worker keeps the previous one's KV cache and
   *  prefills only what is new); response_format: {type: "json_schema", json_schema: {schema}} or
   *  {type: "json_object"} constrains decoding; top_p, top_k, repetition_penalty as generate(); deterministic
   *  (default true: the desktop's EMBER_DETERMINISTIC=1 tokens). `cancel()` ends a reply early (finish_reason
   *  "abort"). */
  get chat() {
    return { completions: { create: (params) => this._chatCreate(params || {}) } };
  }

  async _chatCreate(p) {
    if (!Array.isArray(p.messages) || !p.messages.length)
      throw new EmberError("bad_request", "ember: chat.completions.create needs a non-empty messages array");
    const info = this.models.llama;
    if (!info) throw new EmberError("not_loaded", "ember: no text model loaded; call loadModel('llama', ...) first");
    if (!info.chat) throw new EmberError("bad_request", "ember: the loaded model has no chat template (a base model)");
    const opts = { chat: true };
    for (const k of ["max_tokens", "temperature", "top_p", "top_k", "seed", "repetition_penalty", "deterministic"])
      if (p[k] !== undefined && p[k] !== null) opts[k] = p[k];
    if (p.stop !== undefined && p.stop !== null) opts.stop = Array.isArray(p.stop) ? p.stop : [p.stop];
    if (p.response_format) opts.response_format = JSON.stringify(p.response_format);
    const input = JSON.stringify(p.messages.map((m) => ({ role: m.role, content: m.content })));
    const id = `chatcmpl-${Date.now().toString(36)}${Math.random().toString(36).slice(2, 8)}`;
    const created = Math.floor(Date.now() / 1000), model = info.source || "llama";
    const usage = (r) => ({ prompt_tokens: r.prompt_tokens.length, completion_tokens: r.tokens.length,
      total_tokens: r.prompt_tokens.length + r.tokens.length,
      extra: { prefill_tokens: r.prefill_tokens, cached_tokens: r.cached_tokens, ttft_ms: r.ttft_ms,
        tokens_per_s: r.tokens_per_s } });
    const finish = (r) => (r.stopped === "cancelled" ? "abort" : r.finish_reason);
    if (!p.stream) {
      const r = await this._run("llama", input, opts);
      return { id, object: "chat.completion", created, model, usage: usage(r), ember: r,
        choices: [{ index: 0, message: { role: "assistant", content: r.text }, finish_reason: finish(r), logprobs: null }] };
    }
    const chunk = (delta, reason = null) => ({ id, object: "chat.completion.chunk", created, model,
      choices: [{ index: 0, delta, finish_reason: reason, logprobs: null }] });
    const queue = [];
    let wake = null, result = null, failure = null;
    const push = (x) => { queue.push(x); if (wake) { wake(); wake = null; } };
    this._run("llama", input, opts, (d) => push(d[0])).then((r) => { result = r; push(null); },
      (e) => { failure = e; push(null); });
    return {
      async *[Symbol.asyncIterator]() {
        yield chunk({ role: "assistant", content: "" });
        for (;;) {
          if (!queue.length) await new Promise((resolve) => { wake = resolve; });
          const piece = queue.shift();
          if (piece === null) break;
          yield chunk({ content: piece });
        }
        if (failure) throw failure;
        yield { ...chunk({}, finish(result)), usage: usage(result), ember: result };
      },
    };
  }

  /** Image (Blob/File/ArrayBuffer of an encoded image, or ImageData) -> detections like `ember yolo --json`:
   *  [{class, label, score, box: [x1, y1, x2, y2]}], with .ms, .width, .height, .input ([H, W] the model
   *  saw) and .stopped ("done" | "cancelled") set on the array. opts as Ultralytics predict's defaults:
   *  conf 0.25, iou 0.7, max_det 300, and square: true for the fixed imgsz x imgsz input (rect=False).
   *  The instance's onProgress sees {stage, file: "yolo", done, total} per stage; `cancel()` stops between stages. */
  async detect(image, opts = {}) {
    const { input, transfer } = await imageMessage(image);
    const r = await this._run("yolo", input, opts, null, transfer);
    return Object.assign(r.detections, { ms: r.ms, width: r.width, height: r.height, input: r.input, stopped: r.stopped });
  }

  /** Segment Anything on `image` (ImageData, or a Blob/ArrayBuffer of an encoded image) with a prompt in the
   *  image's pixels, {points: [[x, y, label]] (1 object, 0 background), box: [x0, y0, x1, y1]} -> {masks:
   *  Uint8Array (count x height x width, 1 inside), count, scores, boxes, areas, best, width, height, ms (the
   *  click: prompt encoder, decoder, upscaling), encode_ms, encoder_runs, decoder_runs, stopped}, as `ember
   *  segment --json`. The worker embeds an image once: later calls with the same image object send only its id.
   *  opts: multimask (default true: the best of 3; false: one mask); everything: true runs the automatic mask
   *  generator (points_per_side, default 16; points_per_batch, pred_iou_thresh, stability_score_thresh,
   *  stability_score_offset, mask_threshold, crops_nms_thresh as transformers' mask-generation pipeline) and gives `labels` (Uint16Array, 0 or mask index + 1 per pixel).
   *  onProgress sees {stage: "encode" | "embed" | "decode", done, total}; `cancel()` stops between steps. */
  async segment(image, prompt = {}, opts = {}) {
    if (!this._images) { this._images = new WeakMap(); this._imageCount = 0; }
    let id = this._images.get(image);
    const fresh = !id;
    if (fresh) this._images.set(image, (id = `image-${++this._imageCount}`));
    const o = { ...opts, points: prompt.points || [], box: prompt.box || null, image_id: id };
    let r = fresh ? null : await this._run("segment", null, o);
    if (!r || r.need_image) {
      const { input, transfer } = await imageMessage(image);
      r = await this._run("segment", input, o, null, transfer);
    }
    const bytes = (b) => (b instanceof Uint8Array ? b : new Uint8Array(b || []));
    if (r.masks !== undefined) r.masks = bytes(r.masks);
    if (r.labels !== undefined) { const b = bytes(r.labels).slice(); r.labels = new Uint16Array(b.buffer, 0, b.byteLength >> 1); }
    return r;
  }

  // ---- the training tool (wasm/tools/train.py; the page's UI is web/train.js)
  /** Teach the text tool's loaded model: LoRA adapters (ember.train.lora) trained on `text`, here, on this
   *  instance's device; generate() and the chat answer with them at once. opts: steps, rank, alpha (default
   *  2 * rank), lr, block (tokens a step), seed, resume (continue a paused run of the same text and options).
   *  onStep({kind: "step", step, steps, loss}) after every step. -> {losses, step, steps, stopped: "done" |
   *  "paused", steps_per_s, seconds, blocks, block}. `cancel()` pauses at the next step. */
  async teach(text, opts = {}, onStep) {
    return this._run("llama", String(text), { ...opts, teach: "train" }, onStep);
  }

  /** The taught adapters in PEFT's layout: {"adapter_config.json": text, "adapter_model.safetensors": bytes}
   *  (peft's PeftModel.from_pretrained and ember.train.lora.load_adapter read the folder of the two). */
  async teachExport() {
    return this._run("llama", null, { teach: "export" });
  }

  /** Remove the taught adapters: the model answers as loaded. -> {reset: whether there were any}. */
  async teachReset() {
    return this._run("llama", null, { teach: "reset" });
  }

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

  /** Greedy generation through the loaded ONNX model when it is a decoder exported with its KV cache as inputs and
   *  outputs (input_ids, past_key_values.<i>.key/.value -> logits, present.<i>.key/.value; loadModel says
   *  `decoder: true`): the prompt's ids in one step, then one token a step. opts: max_new_tokens (24),
   *  eos_token_id (a number or an array), feeds (the decoder's other inputs, e.g. encoder_hidden_states, as in
   *  run()). onToken(id, nTokens, tokensPerSecond) per token. -> {tokens, ms, tokens_per_s, stopped: "length" |
   *  "eos" | "cancelled"}; `cancel()` stops it after the current token. */
  async runDecoder(ids, opts = {}, onToken) {
    if (!this.models.onnx) throw new EmberError("not_loaded", "ember: no ONNX model loaded; call loadModel('onnx', ...) first");
    const { feeds = {}, ...gen } = opts;
    const msg = {}, transfer = [];
    for (const [name, value] of Object.entries(feeds)) {
      const t = ArrayBuffer.isView(value) ? { data: value } : value;
      const type = t.type || ONNX_TYPE_OF.get(t.data.constructor);
      const bytes = new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength).slice();
      transfer.push(bytes.buffer);
      msg[name] = { type, dims: Array.from(t.dims || [t.data.length], Number), bytes };
    }
    return this._run("onnx", msg, { generate: { ...gen, ids: Array.from(ids, Number) } },
      onToken && ((d) => onToken(...d)), transfer);
  }

  /** Stop the running request: a download at once, a run at its next step (a token, a segment), with what it has
   *  and stopped: "cancelled". With hard (the default), a request still going after a second ends anyway: it is
   *  interrupted mid-step where the page is cross-origin isolated, else the runtime is restarted (its promise
   *  rejects with code "cancelled", the loaded models are dropped and onRestart() is called). hard: false only
   *  asks (the training tool's pause, which must end between steps). */
  cancel({ hard = true } = {}) {
    this._worker.postMessage({ type: "cancel" });
    const ids = [...this._pending.keys()];
    if (!hard || !ids.length) return;
    const going = () => ids.some((id) => this._pending.has(id));
    setTimeout(() => { if (going() && this._interrupt) Atomics.store(this._interrupt, 0, 2); }, INTERRUPT_MS); // SIGINT
    setTimeout(() => { if (going()) this._restart(); }, RESTART_MS);
  }

  /** A fresh worker on the same device, its models unloaded; pending requests reject with code "cancelled". */
  _restart() {
    this._worker.terminate();
    if (this._pool) this._pool.stop(); // its memory held the old runtime's weights; _init starts a fresh one
    this._pool = null;
    this._failAll(new EmberError("cancelled", "ember: cancelled (the runtime was restarted to stop it at once)"));
    this.models = {};
    this._spawn();
    const device = this.device;
    this._ready = this._init(device).catch((e) => { console.warn(e); }).finally(() => { this._ready = null; });
    if (this.options.onRestart) this.options.onRestart();
    return this._ready;
  }

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

  async _request(msg, onPartial, transfer) {
    if (this._ready && msg.type !== "init") await this._ready;
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

// An image for the worker: an ImageData's RGBA pixels (transferred, Python gets bytes) or an encoded image's bytes.
async function imageMessage(image) {
  if (typeof Blob !== "undefined" && image instanceof Blob) { const b = await image.arrayBuffer(); return { input: b, transfer: [b] }; }
  if (typeof ImageData !== "undefined" && image instanceof ImageData) {
    const rgba = new Uint8Array(image.data.slice().buffer); // ours to transfer; Python gets it as bytes
    return { input: { rgba, width: image.width, height: image.height }, transfer: [rgba.buffer] };
  }
  if (image instanceof ArrayBuffer) { const b = image.slice(0); return { input: b, transfer: [b] }; }
  return { input: image, transfer: [] };
}

// onnxruntime-web's tensor types: {type, data: TypedArray, dims}
const ONNX_ARRAYS = { float32: Float32Array, float64: Float64Array, float16: Uint16Array, int8: Int8Array,
  uint8: Uint8Array, int16: Int16Array, uint16: Uint16Array, int32: Int32Array, uint32: Uint32Array,
  int64: BigInt64Array, uint64: BigUint64Array, bool: Uint8Array };
const ONNX_TYPE_OF = new Map([[Float32Array, "float32"], [Float64Array, "float64"], [Int8Array, "int8"],
  [Uint8Array, "uint8"], [Int16Array, "int16"], [Uint16Array, "uint16"], [Int32Array, "int32"],
  [Uint32Array, "uint32"], [BigInt64Array, "int64"], [BigUint64Array, "uint64"]]);
