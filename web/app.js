// The web app's shell over the public API in ember.js: the runtime and its device, the tabs, one model picker
// per tool, the one job guard, messages and progress. Each tool's page code is a module of its own (speech.js,
// generate.js + chat.js, detect.js, search.js, train.js, onnx.js, segment.js), mounted with the `app` context
// below; the model manager is models.js, offline use offline.js (the service worker sw.js).
import { createEmber, EmberError } from "./ember.js";
import { exclusive, onBusyChange, running } from "./guard.js";
import { mountTabs } from "./tabs.js";
import { $, MB, endRun, hideMessage, setProgress, showError, showMessage, startRun } from "./ui.js";

const params = new URLSearchParams(location.search);
const state = { ember: null, loadedFrom: {}, loading: {}, restartHooks: [], names: {} };
// "auto" (the default), "webgpu" or "cpu": ?device= for this visit, else the choice remembered from the Device box
const remembered = localStorage.getItem("ember-device");
const choice = params.get("device") || remembered || "auto";
// where the choice came from: "url" (a link or a test asked for it this once: no note), "memory" or "select"
let choiceFrom = params.get("device") ? "url" : "memory";
// the runtime starts first: the tools' page code loads while Pyodide boots. A remembered CPU also asks what Auto
// would pick (a remembered WebGPU learns it from its own adapter)
const started = createEmber({ device: choice, probe: choiceFrom === "memory" && choice === "cpu",
  hubURL: params.get("hub") || undefined, threads: params.has("threads") ? Number(params.get("threads")) : undefined,
  onProgress: (p) => setProgress(p, p.stage === "download" || p.stage === "load" ? loadingLabel(p) : undefined),
  onRestart: restarted });

// Tools as people know them; the model name follows what is loaded or picked.
const TITLES = { whisper: "Speech to text", llama: "Text generation", yolo: "Object detection", embed: "Semantic search",
  train: "Training", onnx: "ONNX", segment: "Segment anything" };

// ------------------------------------------------------------------ tabs

const tabs = mountTabs($("nav.tabs"), "whisper");

// ------------------------------------------------------------------ model pickers

const pickers = {};
for (const slot of document.querySelectorAll(".picker-slot")) {
  const tool = slot.dataset.tool;
  const node = $("#picker-template").content.firstElementChild.cloneNode(true);
  node.id = `picker-${tool}`;
  slot.replaceWith(node);
  const kind = $(".kind", node);
  kind.addEventListener("change", () => {
    for (const k of ["demo", "hub", "url", "file"]) $(`.where-${k}`, node).hidden = kind.value !== k;
  });
  $(".load", node).addEventListener("click", () => loadFromPicker(tool));
  $(".cancel-load", node).addEventListener("click", () => cancel());
  node.addEventListener("dragover", (e) => e.preventDefault()); // a model's files dropped here load as local files
  node.addEventListener("drop", (e) => {
    e.preventDefault();
    if (!e.dataTransfer.files.length) return;
    $(".files", node).files = e.dataTransfer.files;
    kind.value = "file";
    kind.dispatchEvent(new Event("change"));
    loadFromPicker(tool);
  });
  pickers[tool] = node;
}

function loadFromPicker(tool) {
  exclusive(tool, who(tool), () => ensureModel(tool, true)).catch((e) => showError(e, who(tool)));
}

function pickedSource(tool) {
  const node = pickers[tool];
  const kind = $(".kind", node).value;
  if (kind === "demo") {
    const v = $(".demo", node).value;
    if (!v) throw new EmberError("bad_request", "ember: this build bundles no demo model for this tool; choose a Hugging Face id, a URL or local files");
    return `demo:${v}`;
  }
  if (kind === "hub") return $(".hub", node).value.trim();
  if (kind === "url") return $(".url", node).value.trim();
  const files = $(".files", node).files;
  if (!files.length) throw new EmberError("unsupported_file", "ember: choose the model's files first");
  return files;
}

// The model's name as people read it: a demo's label up to its details, a hub id, a URL's file, a local file.
function sourceName(tool, source) {
  if (typeof source !== "string") return Array.from(source, (f) => f.name).join(", ");
  if (source.startsWith("demo:")) {
    const m = ((state.manifest || {})[tool] || []).find((x) => x.id === source.slice(5));
    return m ? m.label.split(/ \(|: /)[0] : source.slice(5);
  }
  return /^https?:/.test(source) ? source.replace(/\/+$/, "").split("/").pop() || source : source;
}

/** The model `tool` runs (loaded, else picked): "Whisper tiny.en", "Gemma 3 270M", "best.pt" ... */
function modelName(tool) {
  if (state.names[tool]) return state.names[tool]();
  if (state.loading[tool]) return state.loading[tool];
  if (state.loadedFrom[tool]) return state.loadedFrom[tool].name;
  if (!pickers[tool]) return "";
  try { return sourceName(tool, pickedSource(tool)); } catch (e) { return ""; }
}
/** "Text generation (Gemma 3 270M)": the tool and its model, for messages and the busy note. */
const who = (tool) => `${TITLES[tool] || tool}${modelName(tool) ? ` (${modelName(tool)})` : ""}`;
// "Loading Whisper tiny.en", "Downloading Whisper tiny.en (model.safetensors)": a download names its file too
function loadingLabel(p) {
  const tool = p.stage === "load" ? p.file : (running() || {}).tool, name = tool && modelName(tool);
  return p.stage === "load" ? name || p.file : name ? `${name} (${p.file})` : p.file;
}

/** Load `tool`'s model as its picker says, unless that one is loaded on this device already (force: again). */
async function ensureModel(tool, force = false) {
  const ember = await started;
  const source = pickedSource(tool);
  const key = (typeof source === "string" ? source : Array.from(source, (f) => f.name + f.size).join("|")) + "@" + ember.device;
  if (!force && state.loadedFrom[tool] && state.loadedFrom[tool].key === key) return;
  const node = pickers[tool], status = $(".model-status", node), name = sourceName(tool, source);
  status.textContent = `Loading ${name}…`;
  state.loading[tool] = name;
  $(".load", node).hidden = true;
  $(".cancel-load", node).hidden = false;
  try {
    const info = await ember.loadModel(tool, source);
    state.loadedFrom[tool] = { key, name };
    status.textContent = `Loaded ${name}: ${(info.parameters / 1e6).toFixed(1)} M parameters on ${info.device.toUpperCase()}.` +
      (tool === "llama" ? " " + modelMemory(info) : "");
    node.dispatchEvent(new CustomEvent("modelloaded", { detail: info }));
    return info;
  } catch (e) {
    delete state.loadedFrom[tool];
    status.textContent = e.code === "cancelled" ? `Loading ${name} was cancelled; nothing of it was kept.` : "Not loaded.";
    throw e;
  } finally {
    delete state.loading[tool];
    $(".load", node).hidden = false;
    $(".cancel-load", node).hidden = true;
  }
}

// "Memory: weights 241 MiB as held, KV cache at 2k tokens 27 MiB." (quantized blocks count their bytes; the
// KV figure is Gemma's, whose sliding layers keep only their window; other models have none)
function modelMemory(info) {
  return `Memory: weights ${MB(info.bytes)} as held` + (info.kv_2k_bytes ? `, KV cache at 2k tokens ${MB(info.kv_2k_bytes)}` : "") + ".";
}

// ------------------------------------------------------------------ jobs: the guard, cancel, progress

/** Run a tool's job (its model's load included): one at a time across tools (guard.js), its Cancel button live
 *  from the first byte of a download to the last step, the progress clock running. label: "Transcribing". */
async function run(tool, { label, cancel: button }, fn) {
  return exclusive(tool, who(tool), async () => {
    hideMessage();
    if (button) button.disabled = false;
    startRun(tool, label);
    let how = "failed";
    try {
      const r = await fn();
      how = r && r.stopped === "cancelled" ? "cancelled" : "done";
      return r;
    } catch (e) {
      if (e.code === "cancelled") how = "cancelled";
      throw e;
    } finally {
      endRun(how);
      if (button) button.disabled = true;
    }
  });
}

function cancel() {
  const job = running();
  if (!state.ember || !job) return;
  state.ember.cancel();
  $("#progress-text").textContent = `Cancelling ${job.label}…`;
}

onBusyChange((job) => {
  document.body.classList.toggle("busy", !!job);
  $("#device").disabled = !!job || !state.ember;
});

// The runtime was replaced to stop a job at once: every model is unloaded.
function restarted() {
  state.loadedFrom = {};
  for (const node of Object.values(pickers)) $(".model-status", node).textContent = "Not loaded: the runtime restarted to stop a job at once; it loads again on next use.";
  for (const fn of state.restartHooks) fn();
}

// ------------------------------------------------------------------ the runtime and its device

async function start() {
  let ember;
  try {
    ember = state.ember = await started;
  } catch (e) {
    setStatus("Runtime failed", "bad");
    showError(e);
    return;
  }
  showDevice();
  state.manifest = await ember.manifest();
  for (const [tool, node] of Object.entries(pickers)) {
    const sel = $(".demo", node);
    for (const m of state.manifest[tool] || []) {
      const option = new Option(`${m.label} · ${(m.bytes / 1e6).toFixed(0)} MB`, m.id);
      if (m.chat) option.dataset.chat = "true"; // a model with a chat template (the text tool opens its chat)
      sel.append(option);
    }
    if (!sel.options.length) {
      sel.append(new Option("none bundled in this build", ""));
      $(".kind", node).value = "hub";
      $(".kind", node).dispatchEvent(new Event("change"));
    }
    sel.dispatchEvent(new Event("change")); // the tool's page code follows the picked demo
  }
  const docs = ember.options.docsURL;
  for (const a of document.querySelectorAll(".book-link")) { if (docs) a.href = docs; a.hidden = !docs; }
  document.body.dataset.ready = "true";
  // ms after navigation start at which each boot stage ended (bench/bench_web.py reads it): the page is
  // interactive at "ready"; model weights load later, per tool, with their own progress
  window.__emberStartup = { ...Object.fromEntries(Object.entries(ember.startup)
    .map(([k, t]) => [k, Math.round(t - performance.timeOrigin)])), ready: Math.round(performance.now()) };
  import("./offline.js").then((m) => m.registerOffline(app));
}

// What runs each tool, on which adapter, and why: the same line under every tool's model picker.
function deviceLine(e) {
  if (e.device === "webgpu") return `Runs on WebGPU · adapter: ${e.deviceAdapter || "unnamed"}.`;
  const why = e.deviceReason ? `not WebGPU because ${e.deviceReason}` : "as chosen in Device";
  const threads = e.threads > 1 ? `on ${e.threads} threads` : `on 1 thread${e.threadsReason ? ` (${e.threadsReason})` : ""}`;
  return `Runs on the CPU: numpy in WebAssembly${e.deviceKernels ? ` (matmul: ${e.deviceKernels})` : ""} ${threads}, ` +
    `${why}${e.deviceAdapter && e.deviceReason ? ` · adapter: ${e.deviceAdapter}` : ""}.`;
}

const DEVICE_NAMES = { webgpu: "WebGPU", cpu: "the CPU" };

// The Device box shows the choice (Auto, WebGPU or CPU); the note says what Auto chose and why, or that a manual
// choice differs from Auto's, with a button back to Auto.
function showDevice() {
  const e = state.ember, picked = $("#device").value;
  for (const node of Object.values(pickers)) $(".device-line", node).textContent = deviceLine(e);
  $("#device").disabled = !!running();
  setStatus(`Ready · ${e.device === "webgpu" ? "WebGPU" : "CPU"}`, e.device === "webgpu" ? "gpu" : "cpu");
  const note = $("#device-note"), text = $(".text", note), useAuto = $(".use-auto", note);
  let line = "", warn = false;
  if (picked === "auto") {
    line = e.device === "webgpu" ? `Auto chose WebGPU (adapter: ${e.deviceAdapter || "unnamed"}).`
      : `Auto chose the CPU: ${e.deviceReason || "no WebGPU adapter here"}.`;
  } else if (picked === "webgpu" && e.device !== "webgpu") {
    line = `WebGPU isn't available here (${e.deviceReason}). ember runs on the CPU instead: slower, same results.`;
  } else if (choiceFrom !== "url" && e.deviceAuto && e.deviceAuto.device !== e.device) {
    warn = true;
    line = `Runs on ${DEVICE_NAMES[e.device]} as you chose${choiceFrom === "memory" ? " on an earlier visit" : ""}; ` +
      `Auto would run on ${DEVICE_NAMES[e.deviceAuto.device]} here, faster` +
      (e.deviceAuto.reason ? ` (${e.deviceAuto.reason.replace(/, slower than ember's CPU backend.*$/, ", slower than the CPU")})` : "") + ".";
  }
  note.hidden = !line;
  note.classList.toggle("warn", warn);
  text.textContent = line;
  useAuto.hidden = !warn;
  $("#runtime-info").textContent = `Pyodide on ${e.device === "webgpu" ? "WebGPU" : "CPU (numpy)"}`;
}

async function switchDevice(value) {
  localStorage.setItem("ember-device", value);
  choiceFrom = "select";
  $("#device").value = value;
  setStatus("Switching device…");
  try {
    await exclusive("device", "Switching the device", () => state.ember.setDevice(value, { probe: value === "cpu" }));
    state.loadedFrom = {};
    for (const node of Object.values(pickers)) $(".model-status", node).textContent = "Device changed: the model loads again on next run.";
  } catch (e) {
    showError(e);
  }
  showDevice();
}

$("#device").value = ["auto", "webgpu", "cpu"].includes(choice) ? choice : "auto";
$("#device").addEventListener("change", (ev) => switchDevice(ev.target.value));
$("#device-note .use-auto").addEventListener("click", () => switchDevice("auto"));

function setStatus(text, kind) {
  const s = $("#status");
  s.textContent = text;
  s.className = `pill ${kind || ""}`;
}

$("#message .close").addEventListener("click", hideMessage);

// ------------------------------------------------------------------ the tools

/** What a tool's page code gets: the runtime, its picker and model, the job runner, messages. */
const app = {
  ember: () => state.ember,
  started,
  picker: (tool) => pickers[tool],
  ensureModel,
  modelName,
  who,
  run,
  cancel,
  busy: () => running(),
  showError: (e, tool) => {
    showError(e, tool ? who(tool) : "");
    if (e instanceof EmberError && e.code === "pool_lost") showDevice(); // the device line: 1 thread, and why
  },
  showMessage,
  onRestart: (fn) => state.restartHooks.push(fn),
  nameModel: (tool, fn) => { state.names[tool] = fn; }, // a tool without a picker names its model itself
  progress: (p) => setProgress(p),
  tabs,
};
window.emberApp = app; // the console and the page's tests reach the shell here

for (const [module, mount] of [["./speech.js", "mountSpeechTool"], ["./generate.js", "mountGenerateTool"],
  ["./detect.js", "mountDetectTool"], ["./search.js", "mountSearchTool"], ["./train.js", "mountTrainTool"],
  ["./onnx.js", "mountOnnxTool"], ["./segment.js", "mountSegmentTool"], ["./models.js", "mountModelManager"]])
  import(module).then((m) => m[mount](app)).catch((e) => { console.error(e); showError(e); });

start();
