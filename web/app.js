// The web app: three tools over the public API in ember.js (and nothing else).
import { createEmber, EmberError } from "./ember.js";

const $ = (sel, root = document) => root.querySelector(sel);
const TOOLS = ["whisper", "llama", "yolo"];
const state = { ember: null, busy: false, loadedFrom: {}, segments: [], lastImage: null, lastRunS: {} };

// ------------------------------------------------------------------ messages and progress

const HUMAN = {
  download: "Couldn't download the model. Check the id or URL and your connection.",
  too_large: "This model is too large for the browser's memory. Pick a smaller model (or a quantized one).",
  out_of_memory: "The browser ran out of memory. Try a smaller model or a shorter input; reloading the page frees memory.",
  unsupported_file: "This file can't be used.",
  bad_model: "These files don't make a model for this tool.",
  not_loaded: "Load a model first.",
  cancelled: "Stopped.",
  pool_lost: "A CPU worker thread stopped; the page now computes on one thread. Run it again.",
};

// The message's heading names the problem: first from what the detail says, else from the error's code.
// Only an error nobody foresaw ("internal") reads "Something went wrong".
const HEADINGS = [
  [/not a WAV file|not a RIFF\/WAVE file|WAV format tag|-bit (PCM|float) WAV|fmt chunk|data chunk/, "Not a WAV file"],
  [/not audio this browser can decode/, "Not an audio file"],
  [/holds no audio samples/, "No audio in the file"],
  [/max_audio_seconds/, "Audio too long"],
  [/not an image|cannot identify image|image file is truncated|broken data stream/i, "Not an image"],
  [/max_pixels/, "Image too large"],
  [/the prompt is [\d,]+ tokens/, "Prompt too long"],
  [/YOLO weights must be|not an Ultralytics \.pt/, "Not a YOLO checkpoint"],
];
const HEADS = {
  download: "Download failed", too_large: "Model too large", out_of_memory: "Out of memory",
  unsupported_file: "File can't be used", bad_model: "Not a model for this tool", not_loaded: "No model loaded",
  bad_request: "Invalid setting", too_long: "Input too long", not_ready: "Runtime not ready",
  pool_lost: "A worker thread stopped",
};
const TOOL_NAMES = { whisper: "Whisper", llama: "Llama", yolo: "YOLO" };

function showMessage(text, kind = "error", head = "") {
  const box = $("#message");
  $(".head", box).textContent = head;
  $(".head", box).hidden = !head;
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
  const found = HEADINGS.find(([re]) => re.test(detail));
  const head = found ? found[1] : HEADS[code] || "Something went wrong";
  const who = tool ? `${TOOL_NAMES[tool]}: ` : "";
  showMessage(`${who}${HUMAN[code] ? HUMAN[code] + " " : ""}(${detail})`, "error", head);
  if (code === "pool_lost") showDevice(); // the device line says 1 thread, and why
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

// A run's progress (worker_api: Whisper per 30 s window and per segment in seconds of audio, YOLO per
// stage, Llama per token against Max tokens) with the time since the run started and an estimate of the time left: from
// the fraction done, or for YOLO (whose model stage is nearly all of it) from the previous run's time.
function runProgressText(p, pct) {
  const secs = state.runStart ? (performance.now() - state.runStart) / 1000 : 0;
  const what = p.stage === "window" || p.stage === "segment" ? `Transcribing: ${p.done.toFixed(0)} / ${p.total.toFixed(0)} s of audio`
    : p.stage === "tokens" ? (p.done === p.total ? `Generated ${p.done} tokens` : `Generating: ${p.done} / ${p.total} tokens at most`)
    : `Detecting: ${p.stage === "done" ? "done" : p.stage}`;
  const frac = p.total ? p.done / p.total : 0;
  const last = state.lastRunS[p.file];
  const left = frac >= 1 ? null : p.file === "yolo" && last ? Math.max(0, last - secs)
    : frac > 0.01 ? (secs * (1 - frac)) / frac : null;
  return `${what} (${pct} %) · ${secs.toFixed(1)} s elapsed` + (left == null ? "" : ` · about ${duration(left)} left`);
}

const duration = (s) => (s < 60 ? `${Math.ceil(s)} s` : `${Math.floor(s / 60)} min ${String(Math.round(s % 60)).padStart(2, "0")} s`);

function setStatus(text, kind) {
  const s = $("#status");
  s.textContent = text;
  s.className = `pill ${kind || ""}`;
}

// ------------------------------------------------------------------ tabs

const tabs = TOOLS.map((t) => $(`#tab-${t}`));
function selectTab(tool, keepHash = false) {
  for (const t of TOOLS) {
    const on = t === tool;
    $(`#tab-${t}`).setAttribute("aria-selected", String(on));
    $(`#tab-${t}`).tabIndex = on ? 0 : -1;
    $(`#panel-${t}`).hidden = !on;
  }
  if (!keepHash && location.hash !== `#${tool}`) history.replaceState(null, "", `#${tool}`);
}
tabs.forEach((tab, i) => {
  tab.addEventListener("click", () => selectTab(TOOLS[i]));
  tab.addEventListener("keydown", (e) => {
    const d = e.key === "ArrowRight" ? 1 : e.key === "ArrowLeft" ? -1 : 0;
    if (d) { const j = (i + d + 3) % 3; tabs[j].focus(); selectTab(TOOLS[j]); }
  });
});
// #train belongs to the training tool (web/train.js, loaded last): keep it so that tool can open itself
const startTool = location.hash.slice(1);
selectTab(TOOLS.includes(startTool) ? startTool : "whisper", startTool === "train");

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
  if (tool === "yolo") { // one weights file: an Ultralytics checkpoint, an export or ember's conversion
    $(".hub", node).placeholder = "owner/name or owner/name/best.pt";
    $(".url", node).placeholder = "https://…/yolov8n.pt (.pt, .onnx or .safetensors)";
    $(".files", node).accept = ".pt,.onnx,.safetensors";
    $(".files", node).multiple = false;
  }
  node.addEventListener("dragover", (e) => e.preventDefault()); // a model's files dropped here load as local files
  node.addEventListener("drop", (e) => {
    e.preventDefault();
    if (!e.dataTransfer.files.length) return;
    $(".files", node).files = e.dataTransfer.files;
    kind.value = "file";
    kind.dispatchEvent(new Event("change"));
    ensureModel(tool, true).catch((err) => showError(err, tool));
  });
  if (tool === "llama") $(".hub", node).placeholder = "owner/name: Llama, Gemma, GPT-2, Mistral, Qwen2, Phi, Falcon …";
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
        `${(info.parameters / 1e6).toFixed(1)} M parameters on ${info.device.toUpperCase()}.` + (info.classes ? " " + detects(info) : "") +
        (tool === "llama" ? " " + modelMemory(info) : "") + (info.multilingual ? ` Multilingual: ${info.languages.length} languages.` : "");
      if (tool === "whisper") showLanguages(info);
    } catch (e) {
      delete state.loadedFrom[tool];
      status.textContent = "Not loaded.";
      throw e;
    }
  });
}

const MB = (b) => `${(b / 2 ** 20).toFixed(b < 10 * 2 ** 20 ? 1 : 0)} MiB`;

// "Memory: weights 241 MiB as held, KV cache at 2k tokens 27 MiB." (quantized blocks count their bytes; the
// KV figure is Gemma's, whose sliding layers keep only their window; other models have none)
function modelMemory(info) {
  return `Memory: weights ${MB(info.bytes)} as held` + (info.kv_2k_bytes ? `, KV cache at 2k tokens ${MB(info.kv_2k_bytes)}` : "") + ".";
}

// ------------------------------------------------------------------ Whisper languages

// Whisper's codes are ISO 639-1 but for Javanese ("jw"); the browser names them in English
const LANGUAGE_NAMES = typeof Intl.DisplayNames === "function" ? new Intl.DisplayNames(["en"], { type: "language" }) : null;
function languageName(code) {
  try { return (LANGUAGE_NAMES && LANGUAGE_NAMES.of(code === "jw" ? "jv" : code)) || code; } catch (e) { return code; }
}

// The language picker follows the loaded model: a multilingual one offers "Detect" and its languages (the choice
// is kept where the new model has it); an English-only one offers English alone.
function showLanguages(info) {
  const sel = $("#whisper-language"), keep = sel.value;
  const langs = info.multilingual ? info.languages : ["en"];
  sel.replaceChildren(...(info.multilingual ? [new Option("Detect from the audio", "")] : []),
    ...langs.map((c) => new Option(`${languageName(c)} (${c})`, c)));
  sel.value = langs.includes(keep) ? keep : info.multilingual ? "" : "en";
  sel.disabled = !info.multilingual;
}

// "English (detected)": the language the transcript is in, and whether the model picked it
const languageLine = (r, asked) => `${languageName(r.language)}${asked ? "" : " (detected)"}`;

// "Detects 2 classes: Normal, Fall." (with the keypoints of a pose model)
function detects(info) {
  const n = info.classes.length, names = info.classes.slice(0, 8).join(", ") + (n > 8 ? ", …" : "");
  return `${info.task === "pose" ? "Pose model (keypoints); detects" : "Detects"} ${n} class${n === 1 ? "" : "es"}: ${names}.`;
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

// A model run: its Cancel button is live while it runs (the worker stops at its next step and answers
// with what it has, stopped: "cancelled"); the run's time feeds the next run's estimate.
const CANCEL = { whisper: "#whisper-cancel", llama: "#stop", yolo: "#yolo-cancel" };
async function runTool(tool, fn) {
  const button = $(CANCEL[tool]);
  button.disabled = false;
  try {
    const r = await withBusy(fn);
    if (r.stopped === "cancelled") {
      $("#progress-text").textContent = "Cancelled.";
      clearTimeout(state.progressTimer);
      state.progressTimer = setTimeout(() => { $("#progress-wrap").hidden = true; }, 800);
    } else {
      state.lastRunS[tool] = (performance.now() - state.runStart) / 1000;
    }
    return r;
  } finally {
    button.disabled = true;
  }
}
for (const [tool, sel] of Object.entries(CANCEL)) $(sel).addEventListener("click", () => {
  if (state.ember && state.busy) { state.ember.cancel(); $("#progress-text").textContent = `Cancelling ${TOOL_NAMES[tool]}…`; }
});

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
    const name = file.name || "recording";
    throw new EmberError("unsupported_file", /\.wav$/i.test(name)
      ? `ember: ${name} is not a WAV file (it does not start with "RIFF") and not audio this browser can decode`
      : `ember: ${name} is not audio this browser can decode`);
  }
  const frames = Math.ceil(decoded.duration * 16000);
  const ctx = new OfflineAudioContext(1, frames, 16000); // mixes to mono and resamples to 16 kHz
  const src = ctx.createBufferSource();
  src.buffer = decoded;
  src.connect(ctx.destination);
  src.start();
  return (await ctx.startRendering()).getChannelData(0);
}

const WHISPER_EMPTY = "The transcript appears here segment by segment.";

// Nothing of the previous file survives a new run: transcript, its buttons, the player, the stats.
function clearWhisper() {
  state.segments = [];
  const t = $("#transcript");
  t.replaceChildren();
  delete t.dataset.json;
  delete t.dataset.text;
  $("#whisper-empty").textContent = WHISPER_EMPTY;
  $("#whisper-empty").hidden = false;
  $("#whisper-stats").textContent = "";
  for (const b of ["#copy-text", "#download-txt", "#download-srt"]) $(b).disabled = true;
  const player = $("#audio-player");
  if (player.src) URL.revokeObjectURL(player.src);
  player.removeAttribute("src");
  player.load();
  player.hidden = true;
}

async function transcribeFile(file) {
  if (state.busy) return notBusy();
  $("#message").hidden = true;
  clearWhisper();
  try {
    const input = await audioInput(file);
    await ensureModel("whisper");
    $("#whisper-stats").textContent = "Transcribing…";
    const language = $("#whisper-language").value || null; // read after the load: the picker follows the model
    const r = await runTool("whisper", () => state.ember.transcribe(input, { timestamps: true, language }, addSegment));
    if (!state.segments.length) r.segments.forEach(addSegment);
    const player = $("#audio-player"); // only a file ember could read gets a player
    player.src = URL.createObjectURL(file);
    player.hidden = false;
    $("#whisper-stats").textContent = r.stopped === "cancelled"
      ? `Cancelled after ${(r.ms / 1000).toFixed(1)} s: ${r.segments.length} segment${r.segments.length === 1 ? "" : "s"} of ${r.duration.toFixed(1)} s of audio`
      : `${r.duration.toFixed(1)} s of audio in ${(r.ms / 1000).toFixed(1)} s on ${state.ember.device.toUpperCase()}` +
        (r.language ? ` · ${languageLine(r, language)}` : "");
    $("#transcript").dataset.text = r.text;
    $("#transcript").dataset.json = JSON.stringify(r);
    for (const b of ["#copy-text", "#download-txt", "#download-srt"]) $(b).disabled = !r.segments.length;
    if (!r.segments.length) $("#whisper-empty").textContent = r.stopped === "cancelled" ? "Cancelled before the first segment." : "No speech found.";
  } catch (e) {
    clearWhisper();
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

// A number field checked in the page before a run: a whole number in [min, max] (empty allowed where
// `optional`); anything else is refused with the field named, and the field is marked and focused.
function numberField(sel, label, { min, max, optional = false }) {
  const el = $(sel), raw = el.value.trim();
  el.removeAttribute("aria-invalid");
  if (optional && raw === "") return null;
  const v = Number(raw);
  if (raw === "" || !Number.isInteger(v) || v < min || v > max || el.validity.badInput) {
    el.setAttribute("aria-invalid", "true");
    el.focus();
    throw new EmberError("bad_request", `ember: ${label} must be a whole number from ${min} to ${max.toLocaleString("en")}` +
      `${optional ? " (or empty)" : ""}; got ${raw === "" ? (el.validity.badInput ? "something that is not a number" : "nothing") : `"${raw}"`}`);
  }
  return v;
}

// A huge prompt is echoed by its start and end only: the output box is for the generated text.
const ECHO_HEAD = 300, ECHO_TAIL = 100;
function promptEcho(prompt) {
  if (prompt.length <= ECHO_HEAD + ECHO_TAIL + 100) return prompt;
  const hidden = prompt.length - ECHO_HEAD - ECHO_TAIL;
  return `${prompt.slice(0, ECHO_HEAD)} … [${hidden.toLocaleString("en")} characters of the prompt not shown] … ${prompt.slice(-ECHO_TAIL)}`;
}

// Why the generation ended, for the status line.
function stopReason(r, maxTokens) {
  return { cancelled: "stopped by you", length: `reached Max tokens (${maxTokens})`, eos: "the model ended the text",
    context: `stopped at the context length (${r.context} tokens, prompt included)` }[r.stopped] || r.stopped;
}

function clearLlama(text = "Generated text streams in here.") {
  const out = $("#llama-output");
  delete out.dataset.json;
  delete out.dataset.text;
  out.replaceChildren(Object.assign(document.createElement("span"), { className: "muted empty", textContent: text }));
  $("#llama-stats").textContent = "";
}

$("#generate").addEventListener("click", async () => {
  if (state.busy) return notBusy();
  $("#message").hidden = true;
  const out = $("#llama-output");
  delete out.dataset.json;
  try {
    const opts = {
      temperature: Number($("#temperature").value), top_p: Number($("#top-p").value),
      top_k: numberField("#top-k", "Top-k", { min: 0, max: 1000 }),
      max_new_tokens: numberField("#max-tokens", "Max tokens", { min: 1, max: 4096 }),
      seed: numberField("#seed", "Seed", { min: 0, max: 2 ** 32 - 1, optional: true }),
    };
    const prompt = $("#prompt").value;
    await ensureModel("llama");
    out.replaceChildren(Object.assign(document.createElement("span"), { className: "prompt-echo", textContent: promptEcho(prompt) }));
    const gen = document.createElement("span");
    gen.className = "gen";
    out.append(gen);
    $("#generate").disabled = true;
    $("#llama-stats").textContent = "Generating…";
    const r = await runTool("llama", () => state.ember.generate(prompt, opts, (piece, n, tps) => {
      gen.textContent += piece;
      $("#llama-stats").textContent = `${n} tokens · ${tps.toFixed(1)} tokens/s`;
      setProgress({ stage: "tokens", file: "llama", done: n, total: opts.max_new_tokens });
    }));
    gen.textContent = r.text;
    out.dataset.text = r.text;
    out.dataset.json = JSON.stringify(r);
    if (r.stopped !== "cancelled") setProgress({ stage: "tokens", file: "llama", done: r.tokens.length, total: r.tokens.length });
    $("#llama-stats").textContent = `${r.tokens.length} tokens · ${r.tokens_per_s.toFixed(1)} tokens/s on ` +
      `${state.ember.device.toUpperCase()} · ${stopReason(r, opts.max_new_tokens)}` +
      ` · KV cache ${MB(r.kv_cache_bytes || 0)}, wasm heap ${MB(r.wasm_memory_bytes)}`;
  } catch (e) {
    clearLlama();
    showError(e, "llama");
  } finally {
    $("#generate").disabled = false;
  }
});
$("#prompt").addEventListener("keydown", (e) => { if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) $("#generate").click(); });

// ------------------------------------------------------------------ YOLO

$("#conf").addEventListener("input", (e) => { $("#conf-out").value = e.target.value; });
const COLORS = ["#22c55e", "#ef4444", "#3b82f6", "#f59e0b", "#a855f7", "#14b8a6"];

// The browser decodes the image and Python gets its RGBA pixels: Chromium's JPEG decoder gives the same
// pixels as native Pillow's libjpeg-turbo (bus.jpg, zidane.jpg: max difference 0), which Pyodide's
// Pillow 10.2 does not (bus.jpg differs by up to 46 levels and scores 0.6602 against the CLI's 0.6615).
// EXIF orientation is applied as Pillow's exif_transpose does; no colour-profile conversion, no
// premultiplied alpha (transparent pixels keep no colour in a canvas: such PNGs can differ from the CLI).
const MAX_PIXELS = 50_000_000;
async function decodeImage(file) {
  let bitmap;
  try {
    bitmap = await createImageBitmap(file, { imageOrientation: "from-image", colorSpaceConversion: "none", premultiplyAlpha: "none" });
  } catch (e) {
    throw new EmberError("unsupported_file", `ember: ${file.name || "image"} is not an image this browser can read`);
  }
  if (bitmap.width * bitmap.height > MAX_PIXELS) // ember's budget.max_pixels, before a canvas claims the memory
    throw new EmberError("unsupported_file", `ember: ${file.name || "image"} is ${bitmap.width}x${bitmap.height} = ` +
      `${(bitmap.width * bitmap.height).toLocaleString("en")} pixels, over the limit of ${MAX_PIXELS.toLocaleString("en")} (max_pixels)`);
  const canvas = new OffscreenCanvas(bitmap.width, bitmap.height);
  const g = canvas.getContext("2d", { colorSpace: "srgb", willReadFrequently: true });
  g.drawImage(bitmap, 0, 0);
  return { bitmap, pixels: g.getImageData(0, 0, bitmap.width, bitmap.height) };
}

function clearYolo() {
  delete $("#detections").dataset.json;
  delete $("#detections").dataset.stopped;
  $("#detections tbody").replaceChildren();
  const c = $("#yolo-canvas");
  c.getContext("2d").clearRect(0, 0, c.width, c.height);
  $("#yolo-stats").textContent = "";
}

async function detectImage(file) {
  if (state.busy) return notBusy();
  $("#message").hidden = true;
  clearYolo();
  try {
    const { bitmap, pixels } = await decodeImage(file);
    await ensureModel("yolo");
    $("#yolo-stats").textContent = "Detecting…";
    const dets = await runTool("yolo", () => state.ember.detect(pixels, { conf: Number($("#conf").value) }));
    $("#detections").dataset.json = JSON.stringify(dets); // the array; how it ended is beside it
    $("#detections").dataset.stopped = dets.stopped;
    if (dets.stopped === "cancelled") {
      $("#yolo-stats").textContent = "Cancelled.";
      return;
    }
    drawDetections(bitmap, dets);
    $("#yolo-stats").textContent = `${dets.length} detection${dets.length === 1 ? "" : "s"} · ${Math.round(dets.ms).toLocaleString("en")} ms per image on ${state.ember.device.toUpperCase()}` +
      ` · input ${dets.input[1]}×${dets.input[0]}`;
  } catch (e) {
    clearYolo();
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
    for (const [kx, ky, v] of d.keypoints || []) { // a pose model's keypoints: those it sees (visibility > 0.5)
      if (v !== undefined && v < 0.5) continue;
      g.fillStyle = c;
      g.beginPath();
      g.arc(kx, ky, lw * 1.5, 0, 2 * Math.PI);
      g.fill();
    }
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
    state.ember = await createEmber({ device: want, onProgress: setProgress, hubURL: params.get("hub") || undefined,
      threads: params.has("threads") ? Number(params.get("threads")) : undefined });
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
  // ms after navigation start at which each boot stage ended (bench/bench_web.py reads it): the page is
  // interactive at "ready"; model weights load later, per tool, with their own progress
  window.__emberStartup = { ...Object.fromEntries(Object.entries(state.ember.startup)
    .map(([k, t]) => [k, Math.round(t - performance.timeOrigin)])), ready: Math.round(performance.now()) };
}

// What runs each tool, on which adapter, and why: the same line under every tool's model picker.
function deviceLine(e) {
  if (e.device === "webgpu") return `Runs on WebGPU · adapter: ${e.deviceAdapter || "unnamed"}.`;
  const why = e.deviceReason ? `not WebGPU because ${e.deviceReason}` : "as chosen in Device";
  const threads = e.threads > 1 ? `on ${e.threads} threads` : `on 1 thread${e.threadsReason ? ` (${e.threadsReason})` : ""}`;
  return `Runs on the CPU: numpy in WebAssembly${e.deviceKernels ? ` (matmul: ${e.deviceKernels})` : ""} ${threads}, ` +
    `${why}${e.deviceAdapter && e.deviceReason ? ` · adapter: ${e.deviceAdapter}` : ""}.`;
}

function showDevice() {
  const e = state.ember;
  for (const t of TOOLS) $(".device-line", pickers[t]).textContent = deviceLine(e);
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

// ------------------------------------------------------------------ semantic search (web/search.js)
import("./search.js").then((m) => m.mountSearchTool({ ember: () => state.ember, withBusy, showError }));

start();
