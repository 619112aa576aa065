// ember.js: the public JS API of ember in the browser. The app uses only this; other pages can import it.
//
//   import { createEmber } from "./ember.js";
//   const ember = await createEmber({ device: "webgpu", onProgress: (p) => console.log(p) });
//   await ember.loadModel("whisper", "demo");                 // or "openai/whisper-tiny.en", a URL, File(s)
//   const { text, segments } = await ember.transcribe(float32Audio16k);
//   await ember.loadModel("llama", "demo");
//   const { text, tokens } = await ember.generate("Once upon", { temperature: 0, max_new_tokens: 32 }, (t) => ...);
//   await ember.loadModel("yolo", "demo");
//   const detections = await ember.detect(imageBlob);           // [{class, label, score, box: [x1, y1, x2, y2]}]
//
// Everything runs in a Web Worker (worker.js): Pyodide, numpy and the ember wheel, on WebGPU when the
// browser has an adapter and on the CPU otherwise. Results carry the same fields as the CLI's `--json`.

const HERE = new URL(".", import.meta.url).href;
const HUB = "https://huggingface.co";

// The files each tool reads from a folder (Hugging Face layout); optional ones may be missing.
export const TOOL_FILES = {
  // [name, optional, fetched only when this other file is missing]: Whisper weights are either file
  whisper: [["config.json"], ["generation_config.json", true], ["model.safetensors", true],
            ["model.gguf", true, "model.safetensors"], ["tokenizer.json"]],
  llama: [["config.json"], ["model.safetensors"], ["tokenizer.json"]],
  yolo: [["model.safetensors"]],
  // --- semantic search (issue 19): a sentence-transformers folder (all-MiniLM-L6-v2) ---
  embed: [["config.json"], ["model.safetensors"], ["tokenizer.json"], ["modules.json", true],
          ["sentence_bert_config.json", true]],
  // --- end semantic search ---
};
const SINGLE_FILE = /\.(safetensors|gguf|bin|onnx|pt)$/i; // a URL naming one weights file, not a folder

/** An error from ember: `code` is one of download, too_large, out_of_memory, unsupported_file, bad_model,
 *  not_loaded, bad_request, cancelled, internal, not_ready. */
export class EmberError extends Error {
  constructor(code, message) { super(message); this.name = "EmberError"; this.code = code; }
}

/**
 * Start the runtime. options: pyodideURL (folder holding pyodide.mjs; default: the app's config.json, else
 * ./pyodide/), wheelURL, modelsURL (folder with manifest.json), hubURL (Hugging Face endpoint),
 * device ("auto" | "webgpu" | "cpu"), onProgress({stage, file, done, total}).
 */
export async function createEmber(options = {}) {
  const config = await loadConfig(options.configURL || HERE + "config.json");
  const opts = { ...config, ...options };
  const ember = new Ember(opts);
  await ember._init();
  return ember;
}

async function loadConfig(url) {
  try {
    const r = await fetch(url);
    if (r.ok) {
      const c = await r.json();
      const abs = (p) => (p ? new URL(p, url).href : p);
      return { ...c, pyodideURL: abs(c.pyodideURL), wheelURL: abs(c.wheelURL), modelsURL: abs(c.modelsURL) };
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
    this.models = {}; // tool -> {source, device, parameters, bytes}
    this._next = 1;
    this._pending = new Map();
    this._worker = new Worker(new URL("worker.js", import.meta.url), { type: "module" });
    this._worker.onmessage = (ev) => this._onMessage(ev.data);
    this._worker.onerror = (ev) => this._failAll(new EmberError("internal", `ember: worker crashed: ${ev.message}`));
  }

  async _init() {
    if (!this.wheelURL) throw new EmberError("bad_request", "ember: no wheelURL (the ember wheel); build the site with `ember build-web`");
    const r = await this._request({ type: "init", pyodideURL: this.pyodideURL, wheelURL: this.wheelURL,
      device: this.options.device || "auto" });
    this.device = r.device;
    this.deviceReason = r.reason || "";
    this.deviceAdapter = r.adapter || "";
  }

  /** Switch to "auto", "webgpu" or "cpu"; -> the device in use (cpu, with `deviceReason`, if WebGPU is unusable
   *  or, for "auto", a software renderer).
   *  Loaded models are dropped: load them again on the new device. */
  async setDevice(name) {
    const r = await this._request({ type: "device", device: name });
    this.device = r.device;
    this.deviceReason = r.reason || "";
    this.deviceAdapter = r.adapter || "";
    this.models = {};
    return this.device;
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
   *  an http(s) URL of a folder or of one weights file, a File, or an array/FileList of Files. */
  async resolve(tool, source) {
    if (!TOOL_FILES[tool]) throw new EmberError("bad_request", `ember: unknown tool ${tool}`);
    if (source == null || source === "demo" || (typeof source === "string" && source.startsWith("demo:"))) {
      const list = (await this.manifest())[tool] || [];
      const want = typeof source === "string" && source.startsWith("demo:") ? source.slice(5) : null;
      const m = want ? list.find((x) => x.id === want) : list[0];
      if (!m) throw new EmberError("bad_request", `ember: no bundled ${tool} model${want ? " " + want : ""} in this build`);
      return { key: "demo-" + m.id, files: m.files.map((f) => ({ ...f, url: new URL(f.url, this.modelsURL).href })) };
    }
    if (typeof File !== "undefined" && (source instanceof File || source instanceof Blob)) source = [source];
    if (typeof source === "object" && typeof source.length === "number") {
      const files = await Promise.all(Array.from(source, async (f) => ({ name: f.name, bytes: await f.arrayBuffer() })));
      if (!files.length) throw new EmberError("unsupported_file", "ember: no file chosen");
      if (tool === "yolo" && files.length === 1) files[0].name = fixName(files[0].name);
      return { key: "local-" + files.map((f) => f.name + f.bytes.byteLength).join("-"), files };
    }
    const text = String(source).trim();
    let base;
    if (/^https?:\/\//.test(text)) base = text.replace(/\/$/, "");
    else if (/^[A-Za-z0-9][\w.-]*\/[\w.-]+$/.test(text)) base = `${this.hubURL}/${text}/resolve/main`;
    else throw new EmberError("bad_request", `ember: "${text}" is neither a Hugging Face id (owner/name) nor an http(s) URL`);
    if (SINGLE_FILE.test(base)) {
      const name = base.split("/").pop().split("?")[0];
      const files = [{ name, url: base }];
      if (tool === "llama" && /\.bin$/i.test(name)) files.push({ name: "tokenizer.bin", url: base.replace(/[^/]+$/, "tokenizer.bin"), optional: true });
      if (tool === "llama" && /\.safetensors$/i.test(name)) files.push(...["config.json", "tokenizer.json"].map((n) => ({ name: n, url: base.replace(/[^/]+$/, n) })));
      return { key: base, files };
    }
    return { key: base, files: TOOL_FILES[tool].map(([name, optional, unless]) =>
      ({ name, url: `${base}/${name}`, optional: !!optional, ...(unless ? { unless } : {}) })) };
  }

  /** Download (or read from the cache) and load a model for `tool`; -> {tool, device, parameters, bytes}. */
  async loadModel(tool, source = "demo") {
    const { key, files } = await this.resolve(tool, source);
    const transfer = files.filter((f) => f.bytes).map((f) => f.bytes);
    const info = await this._request({ type: "load", tool, key, files }, null, transfer);
    this.models[tool] = { ...info, source: typeof source === "string" ? source : key };
    return this.models[tool];
  }

  /** Speech -> {text, language, segments: [{start, end, text, tokens}], ms}. `audio`: Float32Array of 16 kHz
   *  mono samples, or the bytes (ArrayBuffer/Blob) of a WAV file, read and resampled as the CLI does.
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
    let input = image;
    if (typeof Blob !== "undefined" && image instanceof Blob) input = await image.arrayBuffer();
    else if (typeof ImageData !== "undefined" && image instanceof ImageData)
      input = { rgba: image.data.slice().buffer, width: image.width, height: image.height };
    const r = await this._run("yolo", input, opts);
    return Object.assign(r.detections, { ms: r.ms, width: r.width, height: r.height, input: r.input, stopped: r.stopped });
  }

  // --- semantic search (issue 19): embed(texts) -> Float32Array[] (unit vectors: dot product = cosine) ---
  async embed(texts) {
    const list = typeof texts === "string" ? [texts] : Array.from(texts);
    const r = await this._run("embed", list, {});
    const bytes = r.vectors instanceof Uint8Array ? r.vectors : new Uint8Array(r.vectors);
    const all = new Float32Array(bytes.slice().buffer); // an aligned copy of the (count, dim) float32 rows
    return Array.from({ length: r.count }, (_, i) => all.subarray(i * r.dim, (i + 1) * r.dim));
  }

  /** A document split into passages (paragraphs, long ones at sentence ends), as the search tool indexes it. */
  async passages(text) { return (await this._run("embed", text, { split: true })).passages; }
  // --- end semantic search ---

  /** Stop the running request at its next step (a token, a segment). */
  cancel() { this._worker.postMessage({ type: "cancel" }); }

  terminate() { this._worker.terminate(); this._failAll(new EmberError("cancelled", "ember: terminated")); }

  _run(tool, input, opts, onPartial) {
    const transfer = input instanceof ArrayBuffer ? [input] : ArrayBuffer.isView(input) ? [input.buffer]
      : input && input.rgba ? [input.rgba] : [];
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
    if (m.type === "error") p.reject(new EmberError(m.code, m.message));
    else p.resolve(m.type === "ready" ? m : m.data);
  }

  _failAll(err) {
    for (const p of this._pending.values()) p.reject(err);
    this._pending.clear();
  }
}

// A YOLO weights file keeps its extension (the loader picks the format by it); anything else is refused early.
function fixName(name) {
  if (!/\.(safetensors|onnx|pt)$/i.test(name))
    throw new EmberError("unsupported_file", `ember: ${name}: YOLO weights must be .safetensors (ember convert yolo), .onnx or .pt`);
  return name;
}
