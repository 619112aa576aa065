// onnx.js: the ONNX tool. Drop any .onnx file (and its external-data files): it lists the model's inputs and
// outputs with their shapes and types, fills each input from an image, an audio file, token ids typed as text,
// a .npy array, or random values, runs it in the page (ember.js's loadModel("onnx") + run(), the worker's
// ember.onnx) and shows each output: shape, type, statistics, a table of values, the top entries of a score
// vector, and a heatmap where an output is image-shaped; with the time per run. A decoder exported with its KV
// cache (input_ids + past_key_values.*) also generates through runDecoder, token by token.
// Only the public JS API is used. app.js mounts it with one call (mountOnnxTool) into its tab's panel (index.html).

const $ = (sel, root = document) => root.querySelector(sel);
const INT_TYPES = { int64: BigInt64Array, int32: Int32Array, int8: Int8Array, uint8: Uint8Array, int16: Int16Array,
  uint16: Uint16Array, uint32: Uint32Array, uint64: BigUint64Array, bool: Uint8Array };
const FLOAT_TYPES = { float32: Float32Array, float64: Float64Array };
const NPY = { "<f4": ["float32", Float32Array], "<f8": ["float64", Float64Array], "<i8": ["int64", BigInt64Array],
  "<i4": ["int32", Int32Array], "|u1": ["uint8", Uint8Array], "|i1": ["int8", Int8Array], "|b1": ["bool", Uint8Array],
  "<u4": ["uint32", Uint32Array], "<i2": ["int16", Int16Array], "<u2": ["uint16", Uint16Array] };

/** "tensor(float)" -> "float32" (onnxruntime-web's names). */
export function typeName(t) {
  const inner = String(t).replace(/^tensor\((.*)\)$/, "$1");
  return { float: "float32", double: "float64" }[inner] || inner;
}

/** A declared shape with its symbolic dimensions given values: the first 1 (a batch), the others `fill`. */
export function concreteDims(shape, fill = 16) {
  return (shape || []).map((d, i) => (typeof d === "number" && d > 0 ? d : i === 0 ? 1 : fill));
}

/** Parse a .npy file (version 1-3, little-endian, C order) -> {type, dims, data}. */
export function parseNpy(buffer) {
  const u8 = new Uint8Array(buffer);
  if (u8[0] !== 0x93 || String.fromCharCode(...u8.slice(1, 6)) !== "NUMPY") throw new Error("not a .npy file");
  const major = u8[6];
  const view = new DataView(buffer);
  const hlen = major === 1 ? view.getUint16(8, true) : view.getUint32(8, true);
  const start = major === 1 ? 10 : 12;
  const header = new TextDecoder().decode(u8.slice(start, start + hlen));
  const descr = /'descr':\s*'([^']+)'/.exec(header)?.[1];
  if (/'fortran_order':\s*True/.test(header)) throw new Error(".npy in Fortran order: save it C-ordered");
  const dims = (/'shape':\s*\(([^)]*)\)/.exec(header)?.[1] || "").split(",").map((s) => s.trim()).filter(Boolean).map(Number);
  const kind = NPY[descr];
  if (!kind) throw new Error(`.npy dtype ${descr} is not supported`);
  const [type, Arr] = kind;
  const offset = start + hlen;
  const count = dims.reduce((a, b) => a * b, 1);
  return { type, dims, data: new Arr(buffer.slice(offset, offset + count * Arr.BYTES_PER_ELEMENT)) };
}

function randomTensor(type, dims, name) {
  const n = dims.reduce((a, b) => a * b, 1);
  if (FLOAT_TYPES[type]) {
    const a = new FLOAT_TYPES[type](n);
    for (let i = 0; i < n; i++) a[i] = (Math.random() + Math.random() + Math.random() - 1.5) * 0.8;  // ~N(0, 0.5)
    return a;
  }
  const Arr = INT_TYPES[type] || Float32Array;
  const a = new Arr(n);
  const big = Arr === BigInt64Array || Arr === BigUint64Array;
  const ones = /mask/i.test(name), bool = type === "bool";
  for (let i = 0; i < n; i++) {
    const v = ones || bool ? 1 : /position/i.test(name) ? i % dims[dims.length - 1] : Math.floor(Math.random() * 100);
    a[i] = big ? BigInt(v) : v;
  }
  return a;
}

/** Token ids typed as text ("101 7592, 102") -> the input's integer type, shape (1, n). */
export function tokenTensor(text, type) {
  const ids = String(text).split(/[\s,]+/).filter(Boolean).map(Number);
  if (!ids.length || ids.some((v) => !Number.isInteger(v))) throw new Error("token ids must be whole numbers, e.g. 101 7592 102");
  const Arr = INT_TYPES[type] || Float32Array;
  const big = Arr === BigInt64Array || Arr === BigUint64Array;
  return { type, dims: [1, ids.length], data: Arr.from(ids, (v) => (big ? BigInt(v) : v)) };
}

/** An image file -> the input's tensor: NCHW (or NHWC when the shape ends in 3) at its declared size (the image's
 *  own where symbolic), float values in [0, 1] (uint8 inputs: the pixels). */
async function imageTensor(file, type, shape) {
  const bmp = await createImageBitmap(file);
  const dims = (shape || [1, 3, null, null]).slice();
  const nhwc = dims.length === 4 && dims[3] === 3 && dims[1] !== 3;
  const hAt = nhwc ? 1 : 2, wAt = nhwc ? 2 : 3;
  const h = typeof dims[hAt] === "number" && dims[hAt] > 0 ? dims[hAt] : bmp.height;
  const w = typeof dims[wAt] === "number" && dims[wAt] > 0 ? dims[wAt] : bmp.width;
  const c = new OffscreenCanvas(w, h).getContext("2d", { willReadFrequently: true });
  c.drawImage(bmp, 0, 0, w, h);
  const rgba = c.getImageData(0, 0, w, h).data;
  const Arr = FLOAT_TYPES[type] || INT_TYPES[type] || Float32Array;
  const out = new Arr(3 * h * w);
  const scale = FLOAT_TYPES[type] ? 1 / 255 : 1;
  for (let y = 0; y < h; y++) for (let x = 0; x < w; x++) for (let ch = 0; ch < 3; ch++) {
    const v = rgba[4 * (y * w + x) + ch] * scale;
    out[nhwc ? (y * w + x) * 3 + ch : ch * h * w + y * w + x] = v;
  }
  return { type, dims: nhwc ? [1, h, w, 3] : [1, 3, h, w], data: out };
}

/** An audio file -> 16 kHz mono samples, shape (1, n) (or (n) for a 1-D input). */
async function audioTensor(file, type, shape) {
  const bytes = await file.arrayBuffer();
  const decoded = await new AudioContext().decodeAudioData(bytes);
  const frames = Math.ceil(decoded.duration * 16000);
  const off = new OfflineAudioContext(1, frames, 16000);
  const src = off.createBufferSource();
  src.buffer = decoded;
  src.connect(off.destination);
  src.start();
  const data = (await off.startRendering()).getChannelData(0);
  return { type: "float32", dims: (shape || []).length === 1 ? [data.length] : [1, data.length], data };
}

function stats(data) {
  let min = Infinity, max = -Infinity, sum = 0;
  const n = data.length;
  for (let i = 0; i < n; i++) { const v = Number(data[i]); if (v < min) min = v; if (v > max) max = v; sum += v; }
  return { min, max, mean: n ? sum / n : 0 };
}

const fmt = (v) => (typeof v === "bigint" ? v.toString() : Number.isInteger(v) ? String(v) : Number(v).toPrecision(5));

/** The first rows x columns of an output as a table (its last two axes; leading ones at index 0). */
function valuesTable(t) {
  const dims = t.dims.length ? t.dims : [1];
  const cols = dims[dims.length - 1], rows = dims.length > 1 ? dims[dims.length - 2] : 1;
  const R = Math.min(rows, 12), C = Math.min(cols, 10);
  const table = document.createElement("table");
  table.className = "onnx-values";
  const head = table.createTHead().insertRow();
  head.append(Object.assign(document.createElement("th"), { textContent: "" }));
  for (let j = 0; j < C; j++) head.append(Object.assign(document.createElement("th"), { scope: "col", textContent: String(j) }));
  const body = table.createTBody();
  for (let i = 0; i < R; i++) {
    const tr = body.insertRow();
    tr.append(Object.assign(document.createElement("th"), { scope: "row", textContent: String(i) }));
    for (let j = 0; j < C; j++) tr.insertCell().textContent = fmt(t.data[i * cols + j]);
  }
  return table;
}

/** The k largest entries of the last axis of row 0: a classifier's scores, a language model's next tokens. */
function topK(t, k = 5) {
  const n = t.dims[t.dims.length - 1] || t.data.length;
  const rows = t.data.length / n;
  const base = (rows - 1) * n;  // the last row (a decoder's last position)
  const idx = Array.from({ length: n }, (_, i) => i).sort((a, b) => Number(t.data[base + b]) - Number(t.data[base + a]));
  return idx.slice(0, k).map((i) => ({ index: i, value: Number(t.data[base + i]) }));
}

/** Whether an output reads as an image: its last two axes at least 4 x 4 (a mask, a depth map, a feature map). */
export function imageShaped(dims) {
  return dims.length >= 2 && dims[dims.length - 1] >= 4 && dims[dims.length - 2] >= 4 &&
    dims.slice(0, -2).reduce((a, b) => a * b, 1) <= 4096;
}

/** Draw plane `plane` of an image-shaped output as a heatmap (min..max -> dark blue..yellow). */
function heatmap(canvas, t, plane) {
  const h = t.dims[t.dims.length - 2], w = t.dims[t.dims.length - 1];
  const start = plane * h * w;
  let min = Infinity, max = -Infinity;
  for (let i = 0; i < h * w; i++) { const v = Number(t.data[start + i]); if (v < min) min = v; if (v > max) max = v; }
  canvas.width = w;
  canvas.height = h;
  const g = canvas.getContext("2d");
  const img = g.createImageData(w, h);
  const span = max > min ? max - min : 1;
  for (let i = 0; i < h * w; i++) {
    const u = (Number(t.data[start + i]) - min) / span;  // viridis-like: blue -> green -> yellow
    img.data[4 * i] = Math.round(255 * Math.min(1, Math.max(0, 1.6 * u - 0.4)));
    img.data[4 * i + 1] = Math.round(255 * Math.min(1, 0.15 + 0.85 * u));
    img.data[4 * i + 2] = Math.round(255 * Math.max(0, 0.55 - 0.55 * u));
    img.data[4 * i + 3] = 255;
  }
  g.putImageData(img, 0, 0);
  canvas.style.width = `${Math.max(160, Math.min(480, w * Math.max(1, Math.floor(256 / w))))}px`;
}

/** The tool's UI in `root`. ember: a createEmber() instance or a getter; run(fn, label): runs one job of the tool
 *  (the app's job runner: guard, progress, Cancel); fail(error): shows an error; cancel(): stops the running job
 *  (default: the runtime's cancel); onLoad(name): the model file loaded. -> {load, run, generate, unloaded, state}
 *  (the page's tests reach it as window.emberOnnx). */
export function mountOnnx(root, ember, { run = (fn) => fn(), fail = (e) => { throw e; }, cancel, onLoad = () => {} } = {}) {
  const em = typeof ember === "function" ? ember : () => ember;
  root.innerHTML = `
    <div class="card">
      <div class="drop onnx-drop" tabindex="0">
        <p><strong>Drop an .onnx file</strong> (with its external-data files) or <label class="linklike">choose
          files<input class="onnx-files visually-hidden" type="file" accept=".onnx,.data,.bin,.onnx_data,*" multiple></label></p>
        <div class="row center"><label class="grow">or a URL <input class="onnx-url" type="url" spellcheck="false"
          placeholder="https://…/model.onnx"></label><button type="button" class="onnx-load secondary">Load</button></div>
      </div>
      <p class="onnx-status muted" aria-live="polite">Nothing leaves your browser: the model runs here, with numpy in
        WebAssembly or on WebGPU.</p>
    </div>
    <div class="card onnx-model" hidden>
      <h2>Inputs</h2>
      <table class="onnx-inputs"><thead><tr><th scope="col">Name</th><th scope="col">Type</th><th scope="col">Shape</th>
        <th scope="col">Fill from</th><th scope="col">Dims</th><th scope="col">Value</th></tr></thead><tbody></tbody></table>
      <h2>Outputs</h2>
      <table class="onnx-outputs"><thead><tr><th scope="col">Name</th><th scope="col">Type</th><th scope="col">Shape</th></tr></thead><tbody></tbody></table>
      <div class="buttons row">
        <button type="button" class="onnx-run">Run</button>
        <label>Runs <input class="onnx-repeat" type="number" min="1" max="100" value="1"></label>
        <span class="onnx-time muted" aria-live="polite"></span>
      </div>
      <div class="onnx-generate" hidden>
        <h2>Generate <small class="muted">(a decoder with its KV cache: one token a step)</small></h2>
        <div class="row">
          <label class="grow">Prompt token ids <input class="onnx-prompt" type="text" value="1 2 3" spellcheck="false"></label>
          <label>New tokens <input class="onnx-max" type="number" min="1" max="4096" value="24"></label>
          <label>End token <input class="onnx-eos" type="number" min="0" placeholder="none"></label>
          <button type="button" class="onnx-gen">Generate</button>
          <button type="button" class="onnx-stop secondary" disabled>■ Stop</button>
        </div>
        <p class="onnx-tokens generated" aria-live="polite"></p>
      </div>
    </div>
    <div class="onnx-results"></div>`;
  const state = { info: null, fills: {}, last: null, feeds: null, times: [] };
  const status = (t) => { $(".onnx-status", root).textContent = t; };

  async function load(source) {
    status("Loading the model…");
    const name = typeof source === "string" ? source.replace(/\/+$/, "").split("/").pop() || source
      : (source.find((f) => /\.onnx$/i.test(f.name)) || source[0] || {}).name || "";
    state.info = await run(() => em().loadModel("onnx", source), "Loading");
    onLoad(name);
    showModel();
    const dev = em().device === "webgpu" ? "WebGPU" : "the CPU";
    status(`Loaded in ${(state.info.load_ms / 1000).toFixed(2)} s on ${dev}` +
      (state.info.producer ? ` · made by ${state.info.producer}` : "") +
      ` · opsets ${Object.entries(state.info.opsets).map(([d, v]) => `${d || "ai.onnx"} ${v}`).join(", ")}`);
    return state.info;
  }

  function showModel() {
    const info = state.info;
    $(".onnx-model", root).hidden = false;
    $(".onnx-results", root).replaceChildren();
    const body = $(".onnx-inputs tbody", root);
    body.replaceChildren();
    state.fills = {};
    for (const inp of info.inputs) {
      const type = typeName(inp.type);
      const tr = body.insertRow();
      tr.insertCell().textContent = inp.name;
      tr.insertCell().textContent = type;
      tr.insertCell().textContent = `[${(inp.shape || []).map((d) => d ?? "?").join(", ")}]`;
      const kind = document.createElement("select");
      kind.className = "onnx-kind";
      kind.setAttribute("aria-label", `How to fill ${inp.name}`);
      const options = ["random", "zeros", "tokens", "npy"].concat(FLOAT_TYPES[type] || type === "uint8" ? ["image", "audio"] : []);
      for (const o of options) kind.add(new Option({ random: "Random", zeros: "Zeros", tokens: "Token ids (text)",
        npy: ".npy file", image: "Image", audio: "Audio (16 kHz)" }[o], o));
      if (/ids$/i.test(inp.name) && INT_TYPES[type]) kind.value = "tokens";
      tr.insertCell().append(kind);
      const dims = Object.assign(document.createElement("input"), { className: "onnx-dims", size: 14,
        value: concreteDims(inp.shape).join(", ") });
      dims.setAttribute("aria-label", `Dimensions of ${inp.name}`);
      tr.insertCell().append(dims);
      const value = document.createElement("span");
      const text = Object.assign(document.createElement("input"), { className: "onnx-text", size: 20,
        placeholder: "101 7592 102", value: "1 2 3" });
      text.setAttribute("aria-label", `Token ids for ${inp.name}`);
      const file = Object.assign(document.createElement("input"), { className: "onnx-file", type: "file" });
      file.setAttribute("aria-label", `File for ${inp.name}`);
      value.append(text, file);
      tr.insertCell().append(value);
      const sync = () => {
        text.hidden = kind.value !== "tokens";
        file.hidden = !["npy", "image", "audio"].includes(kind.value);
        file.accept = { npy: ".npy", image: "image/*", audio: "audio/*" }[kind.value] || "";
        dims.disabled = kind.value !== "random" && kind.value !== "zeros";
      };
      kind.addEventListener("change", sync);
      sync();
      state.fills[inp.name] = { inp, type, kind, dims, text, file };
    }
    const outs = $(".onnx-outputs tbody", root);
    outs.replaceChildren();
    for (const o of info.outputs) {
      const tr = outs.insertRow();
      tr.insertCell().textContent = o.name;
      tr.insertCell().textContent = typeName(o.type);
      tr.insertCell().textContent = `[${(o.shape || []).map((d) => d ?? "?").join(", ")}]`;
    }
    $(".onnx-generate", root).hidden = !info.decoder;
  }

  async function feedFor(f) {
    const { inp, type, kind } = f;
    if (kind.value === "tokens") return tokenTensor(f.text.value, type);
    if (["npy", "image", "audio"].includes(kind.value)) {
      const file = f.file.files[0];
      if (!file) throw new Error(`choose a file for input ${inp.name}`);
      if (kind.value === "npy") return parseNpy(await file.arrayBuffer());
      return kind.value === "image" ? imageTensor(file, type, inp.shape) : audioTensor(file, type, inp.shape);
    }
    const dims = f.dims.value.split(/[\s,]+/).filter(Boolean).map(Number);
    const data = randomTensor(type, dims, inp.name);
    if (kind.value === "zeros") data.fill(data instanceof BigInt64Array || data instanceof BigUint64Array ? 0n : 0);
    return { type, dims, data };
  }

  async function runModel(feeds) {
    if (!feeds) {
      feeds = {};
      for (const f of Object.values(state.fills)) feeds[f.inp.name] = await feedFor(f);
    }
    const repeat = Math.max(1, Math.min(100, Number($(".onnx-repeat", root).value) || 1));
    const times = [];
    let out;
    await run(async () => {
      for (let i = 0; i < repeat; i++) {
        const t0 = performance.now();
        out = await em().run(feeds);
        times.push({ page: performance.now() - t0, worker: out.ms });
      }
    }, "Running");
    state.last = out;
    state.feeds = feeds;  // what was run (the page's tests compare it with a native run of the same feeds)
    state.times = times;
    const best = Math.min(...times.map((t) => t.worker)), page = Math.min(...times.map((t) => t.page));
    $(".onnx-time", root).textContent = `${best.toFixed(1)} ms a run in the worker (${page.toFixed(1)} ms with the ` +
      `page's round trip)${repeat > 1 ? `, best of ${repeat}` : ""}`;
    showOutputs(out);
    return out;
  }

  function showOutputs(out) {
    const box = $(".onnx-results", root);
    box.replaceChildren();
    for (const [name, t] of Object.entries(out)) {
      const card = document.createElement("div");
      card.className = "card onnx-output";
      card.dataset.name = name;
      const s = stats(t.data);
      const h = document.createElement("h3");
      h.textContent = `${name} · ${t.type} [${t.dims.join(", ")}]`;
      const p = document.createElement("p");
      p.className = "muted";
      p.textContent = `min ${fmt(s.min)} · max ${fmt(s.max)} · mean ${fmt(s.mean)} · ${t.data.length} values`;
      card.append(h, p);
      const last = t.dims[t.dims.length - 1] || 0;
      if (FLOAT_TYPES[t.type] && last >= 8) {
        const top = document.createElement("p");
        top.className = "onnx-top";
        top.textContent = "Largest (last row): " + topK(t).map((e) => `#${e.index} ${fmt(e.value)}`).join(" · ");
        card.append(top);
      }
      if (imageShaped(t.dims) && FLOAT_TYPES[t.type]) {
        const planes = t.data.length / (t.dims[t.dims.length - 1] * t.dims[t.dims.length - 2]);
        const canvas = Object.assign(document.createElement("canvas"), { className: "onnx-heatmap" });
        canvas.setAttribute("role", "img");
        canvas.setAttribute("aria-label", `Heatmap of ${name}`);
        const pick = Object.assign(document.createElement("input"), { type: "number", min: 0, max: planes - 1, value: 0 });
        pick.setAttribute("aria-label", `Plane of ${name} to show`);
        pick.addEventListener("input", () => heatmap(canvas, t, Math.min(planes - 1, Math.max(0, Number(pick.value) || 0))));
        const lab = document.createElement("label");
        lab.append(`Plane (of ${planes}) `, pick);
        card.append(lab, canvas);
        heatmap(canvas, t, 0);
      }
      card.append(valuesTable(t));
      box.append(card);
    }
  }

  async function generate() {
    const ids = $(".onnx-prompt", root).value.split(/[\s,]+/).filter(Boolean).map(Number);
    const eos = $(".onnx-eos", root).value;
    const shown = $(".onnx-tokens", root);
    shown.textContent = "";
    $(".onnx-stop", root).disabled = false;
    try {
      const r = await run(() => em().runDecoder(ids, { max_new_tokens: Number($(".onnx-max", root).value) || 24,
        eos_token_id: eos === "" ? null : Number(eos) }, (tok, n, rate) => {
        shown.textContent += (shown.textContent ? " " : "") + tok;
        $(".onnx-time", root).textContent = `${n} tokens · ${rate.toFixed(1)} tokens/s`;
      }), "Generating");
      $(".onnx-time", root).textContent = `${r.tokens.length} tokens · ${r.tokens_per_s.toFixed(1)} tokens/s (${r.stopped})`;
      return r;
    } finally {
      $(".onnx-stop", root).disabled = true;
    }
  }

  const guard = (fn) => (...a) => fn(...a).catch((e) => { status(""); fail(e); });
  const files = $(".onnx-files", root);
  files.addEventListener("change", guard(() => load(Array.from(files.files))));
  $(".onnx-load", root).addEventListener("click", guard(() => load($(".onnx-url", root).value.trim())));
  $(".onnx-run", root).addEventListener("click", guard(() => runModel()));
  $(".onnx-gen", root).addEventListener("click", guard(generate));
  $(".onnx-stop", root).addEventListener("click", () => (cancel ? cancel() : em().cancel()));
  const drop = $(".onnx-drop", root);
  drop.addEventListener("dragover", (e) => { e.preventDefault(); drop.classList.add("over"); });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", guard(async (e) => {
    e.preventDefault();
    drop.classList.remove("over");
    if (e.dataTransfer.files.length) await load(Array.from(e.dataTransfer.files));
  }));
  // the runtime was restarted (a hard cancel): the model is gone until loaded again
  function unloaded() {
    state.info = null;
    $(".onnx-model", root).hidden = true;
    status("Not loaded: the runtime restarted to stop a job at once; load the model again.");
  }
  return { load, run: runModel, generate, unloaded, state };
}

/** The app's ONNX tab (its button and panel are in index.html, tabs.js runs them): loads and runs go through the
 *  app's job runner (guard.js: one job at a time across tools, the progress clock, Cancel). */
export function mountOnnxTool(app) {
  const panel = $("#panel-onnx");
  if (!panel) return null;
  let loaded = "";
  app.nameModel("onnx", () => loaded); // no picker: the tool names the file it loaded
  const tool = mountOnnx(panel, app.ember, {
    run: (fn, label) => app.run("onnx", { label }, fn),
    fail: (e) => app.showError(e, "onnx"),
    cancel: () => app.cancel(),
    onLoad: (name) => { loaded = name; },
  });
  app.onRestart(() => tool.unloaded()); // the runtime was replaced: the model is gone
  window.emberOnnx = tool;
  return tool;
}
