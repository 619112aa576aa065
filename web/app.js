// The web app: three tools over the public API in ember.js (and nothing else).
import { createEmber, EmberError } from "./ember.js";

const $ = (sel, root = document) => root.querySelector(sel);
const TOOLS = ["whisper", "llama", "yolo"];
const state = { ember: null, busy: false, loadedFrom: {}, segments: [], lastImage: null };

// ------------------------------------------------------------------ messages and progress

const HUMAN = {
  download: "Couldn't download the model. Check the id or URL and your connection.",
  too_large: "This model is too large for the browser's memory. Pick a smaller model (or a quantized one).",
  out_of_memory: "The browser ran out of memory. Try a smaller model or a shorter input; reloading the page frees memory.",
  unsupported_file: "This file can't be used.",
  bad_model: "These files don't make a model for this tool.",
  not_loaded: "Load a model first.",
  cancelled: "Stopped.",
};

function showMessage(text, kind = "error") {
  const box = $("#message");
  $(".text", box).textContent = text;
  box.className = `message ${kind}`;
  box.hidden = false;
}
$("#message .close").addEventListener("click", () => { $("#message").hidden = true; });

function showError(err, tool) {
  console.warn(err);
  const code = err instanceof EmberError ? err.code : "internal";
  if (code === "cancelled") return;
  const detail = String(err.message || err).replace(/^ember: /, "");
  const head = HUMAN[code] || "Something went wrong.";
  showMessage(`${tool ? tool[0].toUpperCase() + tool.slice(1) + ": " : ""}${head} (${detail})`);
}

function setProgress(p) {
  const wrap = $("#progress-wrap");
  const pct = p.total ? Math.min(100, Math.round((100 * p.done) / p.total)) : 0;
  wrap.hidden = false;
  $("#progress").setAttribute("aria-valuenow", String(pct));
  $("#progress .bar").style.width = `${pct}%`;
  const mb = (b) => (b / 1e6).toFixed(1);
  $("#progress-text").textContent = p.stage === "download"
    ? `Downloading ${p.file}: ${mb(p.done)} / ${p.total ? mb(p.total) : "?"} MB (${pct} %)`
    : p.stage === "runtime" ? `Starting runtime: ${p.file} (${pct} %)`
    : p.stage === "load" ? `Loading ${p.file} (${pct} %)` : runProgressText(p, pct);
  clearTimeout(state.progressTimer); // the bar leaves once a load has finished (its value stays at 100)
  if (pct === 100 && p.stage !== "download") state.progressTimer = setTimeout(() => { wrap.hidden = true; }, 800);
}

// A run's progress (worker_api: Whisper per 30 s window in seconds of audio, YOLO per stage) with the
// time since the run started.
function runProgressText(p, pct) {
  const secs = state.runStart ? ((performance.now() - state.runStart) / 1000).toFixed(1) : "0.0";
  const what = p.stage === "window" ? `Transcribing: ${p.done.toFixed(0)} / ${p.total.toFixed(0)} s of audio`
    : `Detecting: ${p.stage === "done" ? "done" : p.stage}`;
  return `${what} (${pct} %), ${secs} s elapsed`;
}

function setStatus(text, kind) {
  const s = $("#status");
  s.textContent = text;
  s.className = `pill ${kind || ""}`;
}

// ------------------------------------------------------------------ tabs

const tabs = TOOLS.map((t) => $(`#tab-${t}`));
function selectTab(tool) {
  for (const t of TOOLS) {
    const on = t === tool;
    $(`#tab-${t}`).setAttribute("aria-selected", String(on));
    $(`#tab-${t}`).tabIndex = on ? 0 : -1;
    $(`#panel-${t}`).hidden = !on;
  }
  if (location.hash !== `#${tool}`) history.replaceState(null, "", `#${tool}`);
}
tabs.forEach((tab, i) => {
  tab.addEventListener("click", () => selectTab(TOOLS[i]));
  tab.addEventListener("keydown", (e) => {
    const d = e.key === "ArrowRight" ? 1 : e.key === "ArrowLeft" ? -1 : 0;
    if (d) { const j = (i + d + 3) % 3; tabs[j].focus(); selectTab(TOOLS[j]); }
  });
});
selectTab(TOOLS.includes(location.hash.slice(1)) ? location.hash.slice(1) : "whisper");

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
  $(".load", node).addEventListener("click", () => ensureModel(tool, true).catch((e) => showError(e, tool)));
  pickers[tool] = node;
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

async function ensureModel(tool, force = false) {
  const source = pickedSource(tool);
  const key = typeof source === "string" ? source : Array.from(source, (f) => f.name + f.size).join("|");
  if (!force && state.loadedFrom[tool] === key + "@" + state.ember.device) return;
  const status = $(".model-status", pickers[tool]);
  status.textContent = "Loading…";
  return withBusy(async () => {
    try {
      const info = await state.ember.loadModel(tool, source);
      state.loadedFrom[tool] = key + "@" + state.ember.device;
      status.textContent = `Loaded ${typeof source === "string" ? source.replace(/^demo:/, "") : "local files"}: ` +
        `${(info.parameters / 1e6).toFixed(1)} M parameters on ${info.device.toUpperCase()}.`;
    } catch (e) {
      delete state.loadedFrom[tool];
      status.textContent = "Not loaded.";
      throw e;
    }
  });
}

function notBusy() {
  showMessage("Another model is still running; try again when it has finished.", "info");
}

async function withBusy(fn) {
  state.busy = true;
  state.runStart = performance.now();
  document.body.classList.add("busy");
  try { return await fn(); } finally { state.busy = false; document.body.classList.remove("busy"); }
}

function dropZone(zone, input, onFile) {
  input.addEventListener("change", () => { if (input.files[0]) onFile(input.files[0]); input.value = ""; });
  zone.addEventListener("dragover", (e) => { e.preventDefault(); zone.classList.add("over"); });
  zone.addEventListener("dragleave", () => zone.classList.remove("over"));
  zone.addEventListener("drop", (e) => {
    e.preventDefault();
    zone.classList.remove("over");
    if (e.dataTransfer.files[0]) onFile(e.dataTransfer.files[0]);
  });
  zone.addEventListener("keydown", (e) => { if (e.key === "Enter" && e.target === zone) input.click(); });
}

// ------------------------------------------------------------------ Whisper

const fmt = (t, sep = ".") => {
  const ms = Math.round(t * 1000);
  const h = Math.floor(ms / 3600000), m = Math.floor(ms / 60000) % 60, s = Math.floor(ms / 1000) % 60;
  return `${String(h).padStart(2, "0")}:${String(m).padStart(2, "0")}:${String(s).padStart(2, "0")}${sep}${String(ms % 1000).padStart(3, "0")}`;
};

function addSegment(seg) {
  state.segments.push(seg);
  $("#whisper-empty").hidden = true;
  const li = document.createElement("li");
  li.innerHTML = `<span class="ts"></span><span class="seg-text"></span>`;
  $(".ts", li).textContent = `${fmt(seg.start).slice(3, 10)} → ${fmt(seg.end).slice(3, 10)}`;
  $(".seg-text", li).textContent = seg.text.trim();
  $("#transcript").append(li);
}

async function audioInput(file) {
  const bytes = await file.arrayBuffer();
  const head = new Uint8Array(bytes, 0, Math.min(4, bytes.byteLength));
  if (String.fromCharCode(...head) === "RIFF") return bytes; // WAV: decoded by ember exactly as the CLI does
  let decoded;
  try {
    decoded = await new AudioContext().decodeAudioData(bytes.slice(0));
  } catch (e) {
    throw new EmberError("unsupported_file", `ember: ${file.name || "recording"} is not audio this browser can decode`);
  }
  const frames = Math.ceil(decoded.duration * 16000);
  const ctx = new OfflineAudioContext(1, frames, 16000); // mixes to mono and resamples to 16 kHz
  const src = ctx.createBufferSource();
  src.buffer = decoded;
  src.connect(ctx.destination);
  src.start();
  return (await ctx.startRendering()).getChannelData(0);
}

async function transcribeFile(file) {
  if (state.busy) return notBusy();
  $("#message").hidden = true;
  delete $("#transcript").dataset.json; // a stale result must not look like this run's
  try {
    const input = await audioInput(file);
    const player = $("#audio-player");
    player.src = URL.createObjectURL(file);
    player.hidden = false;
    await ensureModel("whisper");
    state.segments = [];
    $("#transcript").replaceChildren();
    $("#whisper-empty").hidden = false;
    $("#whisper-stats").textContent = "Transcribing…";
    const r = await withBusy(() => state.ember.transcribe(input, { timestamps: true }, addSegment));
    if (!state.segments.length) r.segments.forEach(addSegment);
    $("#whisper-stats").textContent = `${r.duration.toFixed(1)} s of audio in ${(r.ms / 1000).toFixed(1)} s on ${state.ember.device.toUpperCase()}`;
    $("#transcript").dataset.text = r.text;
    $("#transcript").dataset.json = JSON.stringify(r);
    for (const b of ["#copy-text", "#download-txt", "#download-srt"]) $(b).disabled = false;
    if (!r.segments.length) $("#whisper-empty").textContent = "No speech found.";
  } catch (e) {
    $("#whisper-stats").textContent = "";
    showError(e, "whisper");
  }
}

const srt = () => state.segments.map((s, i) => `${i + 1}\n${fmt(s.start, ",")} --> ${fmt(s.end, ",")}\n${s.text.trim()}\n`).join("\n");
function download(name, text) {
  const a = document.createElement("a");
  a.href = URL.createObjectURL(new Blob([text], { type: "text/plain" }));
  a.download = name;
  a.click();
}
$("#copy-text").addEventListener("click", () => navigator.clipboard.writeText($("#transcript").dataset.text || ""));
$("#download-txt").addEventListener("click", () => download("transcript.txt", ($("#transcript").dataset.text || "") + "\n"));
$("#download-srt").addEventListener("click", () => download("transcript.srt", srt()));
dropZone($("#audio-drop"), $("#audio-file"), transcribeFile);

let recorder = null;
$("#record").addEventListener("click", async () => {
  if (recorder) { recorder.stop(); return; }
  try {
    const stream = await navigator.mediaDevices.getUserMedia({ audio: true });
    const chunks = [];
    recorder = new MediaRecorder(stream);
    recorder.ondataavailable = (e) => chunks.push(e.data);
    recorder.onstop = () => {
      stream.getTracks().forEach((t) => t.stop());
      recorder = null;
      $("#record").textContent = "● Record from microphone";
      transcribeFile(new File(chunks, "recording.webm", { type: chunks[0]?.type || "audio/webm" }));
    };
    recorder.start();
    $("#record").textContent = "■ Stop recording";
  } catch (e) {
    showMessage(`Microphone unavailable: ${e.message}. Allow microphone access or choose a file.`);
  }
});

// ------------------------------------------------------------------ Llama

for (const id of ["temperature", "top-p"]) $(`#${id}`).addEventListener("input", (e) => { $(`#${id}-out`).value = e.target.value; });

$("#generate").addEventListener("click", async () => {
  if (state.busy) return notBusy();
  $("#message").hidden = true;
  const out = $("#llama-output");
  delete out.dataset.json;
  const opts = {
    temperature: Number($("#temperature").value), top_p: Number($("#top-p").value),
    max_new_tokens: Number($("#max-tokens").value),
    seed: $("#seed").value === "" ? null : Number($("#seed").value),
  };
  try {
    await ensureModel("llama");
    out.replaceChildren(Object.assign(document.createElement("span"), { className: "prompt-echo", textContent: $("#prompt").value }));
    const gen = document.createElement("span");
    gen.className = "gen";
    out.append(gen);
    $("#generate").disabled = true;
    $("#stop").disabled = false;
    $("#llama-stats").textContent = "Generating…";
    const r = await withBusy(() => state.ember.generate($("#prompt").value, opts, (piece, n, tps) => {
      gen.textContent += piece;
      $("#llama-stats").textContent = `${n} tokens · ${tps.toFixed(1)} tokens/s`;
    }));
    gen.textContent = r.text;
    out.dataset.text = r.text;
    out.dataset.json = JSON.stringify(r);
    $("#llama-stats").textContent = `${r.tokens.length} tokens · ${r.tokens_per_s.toFixed(1)} tokens/s on ` +
      `${state.ember.device.toUpperCase()}${r.stopped === "cancelled" ? " · stopped" : ""}`;
  } catch (e) {
    $("#llama-stats").textContent = "";
    showError(e, "llama");
  } finally {
    $("#generate").disabled = false;
    $("#stop").disabled = true;
  }
});
$("#stop").addEventListener("click", () => state.ember && state.ember.cancel());
$("#prompt").addEventListener("keydown", (e) => { if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) $("#generate").click(); });

// ------------------------------------------------------------------ YOLO

$("#conf").addEventListener("input", (e) => { $("#conf-out").value = e.target.value; });
const COLORS = ["#22c55e", "#ef4444", "#3b82f6", "#f59e0b", "#a855f7", "#14b8a6"];

async function detectImage(file) {
  if (state.busy) return notBusy();
  $("#message").hidden = true;
  delete $("#detections").dataset.json;
  try {
    let bitmap;
    try {
      bitmap = await createImageBitmap(file);
    } catch (e) {
      throw new EmberError("unsupported_file", `ember: ${file.name || "image"} is not an image this browser can read`);
    }
    await ensureModel("yolo");
    $("#yolo-stats").textContent = "Detecting…";
    const dets = await withBusy(() => state.ember.detect(file, { conf: Number($("#conf").value) }));
    drawDetections(bitmap, dets);
    $("#yolo-stats").textContent = `${dets.length} detection${dets.length === 1 ? "" : "s"} · ${Math.round(dets.ms).toLocaleString("en")} ms per image on ${state.ember.device.toUpperCase()}`;
    $("#detections").dataset.json = JSON.stringify(dets);
  } catch (e) {
    $("#yolo-stats").textContent = "";
    showError(e, "yolo");
  }
}

function drawDetections(bitmap, dets) {
  const canvas = $("#yolo-canvas");
  canvas.width = bitmap.width;
  canvas.height = bitmap.height;
  const g = canvas.getContext("2d");
  g.drawImage(bitmap, 0, 0);
  const lw = Math.max(2, Math.round(bitmap.width / 320));
  g.font = `600 ${lw * 7}px system-ui, sans-serif`;
  const body = $("#detections tbody");
  body.replaceChildren();
  dets.forEach((d, i) => {
    const [x1, y1, x2, y2] = d.box;
    const c = COLORS[d.class % COLORS.length];
    g.strokeStyle = c;
    g.lineWidth = lw;
    g.strokeRect(x1, y1, x2 - x1, y2 - y1);
    const label = `${d.label} ${(d.score * 100).toFixed(0)}%`;
    const w = g.measureText(label).width + lw * 4, h = lw * 10;
    g.fillStyle = c;
    const lx = Math.max(0, Math.min(x1 - lw / 2, bitmap.width - w)), ly = Math.max(0, y1 - h); // kept inside the image
    g.fillRect(lx, ly, w, h);
    g.fillStyle = "#fff";
    g.fillText(label, lx + lw * 2, ly + h - lw * 2.5);
    const tr = body.insertRow();
    for (const v of [i + 1, d.label, d.score.toFixed(3), d.box.map((b) => b.toFixed(1)).join(", ")]) tr.insertCell().textContent = v;
    tr.cells[1].style.setProperty("--c", c);
    tr.cells[1].className = "swatch";
  });
  if (!dets.length) body.insertRow().insertCell().textContent = "No detections above the confidence threshold.";
}
dropZone($("#image-drop"), $("#image-file"), detectImage);

$("#webcam").addEventListener("click", async () => {
  const video = $("#video");
  try {
    if (!video.srcObject) {
      video.srcObject = await navigator.mediaDevices.getUserMedia({ video: true });
      video.hidden = false;
      await video.play();
      $("#webcam").textContent = "Capture frame";
      return;
    }
    const c = new OffscreenCanvas(video.videoWidth, video.videoHeight);
    c.getContext("2d").drawImage(video, 0, 0);
    detectImage(await c.convertToBlob({ type: "image/png" }));
  } catch (e) {
    showMessage(`Camera unavailable: ${e.message}. Allow camera access or choose an image.`);
  }
});

// ------------------------------------------------------------------ runtime start and device switch

async function start() {
  const params = new URLSearchParams(location.search);
  const want = params.get("device") || localStorage.getItem("ember-device") || "auto";
  try {
    state.ember = await createEmber({ device: want, onProgress: setProgress, hubURL: params.get("hub") || undefined });
  } catch (e) {
    setStatus("Runtime failed", "bad");
    showError(e);
    return;
  }
  showDevice();
  const manifest = await state.ember.manifest();
  for (const tool of TOOLS) {
    const sel = $(".demo", pickers[tool]);
    for (const m of manifest[tool] || [])
      sel.append(new Option(`${m.label} · ${(m.bytes / 1e6).toFixed(0)} MB`, m.id));
    if (!sel.options.length) {
      sel.append(new Option("none bundled in this build", ""));
      $(".kind", pickers[tool]).value = "hub";
      $(".kind", pickers[tool]).dispatchEvent(new Event("change"));
    }
  }
  document.body.dataset.ready = "true";
}

function showDevice() {
  const e = state.ember;
  const dev = $("#device");
  dev.value = e.device;
  dev.disabled = false;
  setStatus(`Ready · ${e.device === "webgpu" ? "WebGPU" : "CPU"}`, e.device === "webgpu" ? "gpu" : "cpu");
  const note = $("#device-note");
  note.hidden = !e.deviceReason;
  note.textContent = e.deviceReason
    ? `WebGPU isn't available here (${e.deviceReason}). ember runs on the CPU instead: slower, same results.` : "";
  $("#runtime-info").textContent = `Pyodide on ${e.device === "webgpu" ? "WebGPU" : "CPU (numpy)"}`;
}

$("#device").addEventListener("change", async (ev) => {
  if (state.busy) { ev.target.value = state.ember.device; return; }
  localStorage.setItem("ember-device", ev.target.value);
  setStatus("Switching device…");
  try {
    await withBusy(() => state.ember.setDevice(ev.target.value));
    state.loadedFrom = {};
    for (const t of TOOLS) $(".model-status", pickers[t]).textContent = "Device changed: the model loads again on next run.";
  } catch (e) {
    showError(e);
  }
  showDevice();
});

// ------------------------------------------------------------------ training tool (web/train.js; one block so merges stay easy)

import("./train.js").then((m) => m.mountTrainTool({ ember: () => state.ember, busy: () => state.busy, withBusy,
  showError, showMessage }));

start();
