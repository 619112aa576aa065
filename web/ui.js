// ui.js: what every tool's page code shares: the message box (a heading that names the problem, the tool and
// model it came from), the progress bar with its live timer, file drop zones, copy and download.

import { EmberError } from "./ember.js";

export const $ = (sel, root = document) => root.querySelector(sel);
export const MB = (b) => `${(b / 2 ** 20).toFixed(b < 10 * 2 ** 20 ? 1 : 0)} MiB`;
export const duration = (s) => (s < 60 ? `${Math.ceil(s)} s` : `${Math.floor(s / 60)} min ${String(Math.round(s % 60)).padStart(2, "0")} s`);

// ------------------------------------------------------------------ messages

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
  [/ is empty \(0 bytes\)/, "Empty file"],
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
  bad_request: "Invalid setting", too_long: "Input too long", not_ready: "Runtime not ready", busy: "Another tool is running",
  pool_lost: "A worker thread stopped",
};

export function showMessage(text, kind = "error", head = "") {
  const box = $("#message");
  $(".head", box).textContent = head;
  $(".head", box).hidden = !head;
  $(".text", box).textContent = text;
  box.className = `message ${kind}`;
  box.hidden = false;
}
export const hideMessage = () => { $("#message").hidden = true; };

/** Show an error: `who` names the tool and model it came from ("Text generation (Gemma 3 270M)"). A "busy"
 *  refusal is a note, not an error; a cancel shows nothing. */
export function showError(err, who = "") {
  console.warn(err);
  const code = err instanceof EmberError ? err.code : "internal";
  if (code === "cancelled") return;
  const detail = String(err.message || err).replace(/^ember: /, "");
  if (code === "busy") { showMessage(detail.replace(/^./, (c) => c.toUpperCase()), "info", HEADS.busy); return; }
  const found = HEADINGS.find(([re]) => re.test(detail));
  const head = found ? found[1] : HEADS[code] || "Something went wrong";
  showMessage(`${who ? who + ": " : ""}${HUMAN[code] ? HUMAN[code] + " " : ""}(${detail})`, "error", head);
}

// ------------------------------------------------------------------ progress

// One bar for the page. Downloads and loads show bytes and the model's name; a run shows its own progress with
// the time since it started, ticking every quarter second even when the run reports nothing for a while.
const bar = { last: null, timer: 0, hide: 0, runStart: 0, runLabel: "", lastRunS: {} };

/** The run of a tool has started (label: "Transcribing"); the bar's clock starts. */
export function startRun(tool, label) {
  Object.assign(bar, { runStart: performance.now(), runTool: tool, runLabel: label, last: null });
  clearInterval(bar.timer);
  bar.timer = setInterval(() => render(bar.last), 250);
  render(null);
}
/** The run has ended: how (done/cancelled); a finished run's time feeds the next estimate. */
export function endRun(how) {
  clearInterval(bar.timer);
  bar.timer = 0;
  const secs = (performance.now() - bar.runStart) / 1000;
  if (how === "done") bar.lastRunS[bar.runTool] = secs;
  else if (how === "cancelled") $("#progress-text").textContent = `Cancelled after ${secs.toFixed(1)} s.`;
  bar.runStart = 0;
  hideSoon(); // its last state stays a moment, then the bar leaves
}

/** The last progress event of the run going on (or just ended): {stage, file, done, total}, or null. */
export const lastProgress = () => bar.last;

/** A progress event {stage, file, done, total} from ember (label: the model's name for download/load). */
export function setProgress(p, label) {
  if (p.stage === "download" || p.stage === "load" || p.stage === "runtime") render({ ...p, label });
  else render(p);
}

function render(p) {
  if (p) bar.last = p;
  const wrap = $("#progress-wrap");
  wrap.hidden = false;
  const pct = p && p.total ? Math.min(100, Math.round((100 * p.done) / p.total)) : 0;
  $("#progress").setAttribute("aria-valuenow", String(pct));
  $("#progress .bar").style.width = `${pct}%`;
  const mb = (b) => (b / 1e6).toFixed(1);
  const name = p && (p.label || p.file);
  $("#progress-text").textContent = !p ? runText(null, 0)
    : p.stage === "download" ? `Downloading ${name}: ${mb(p.done)} / ${p.total ? mb(p.total) : "?"} MB (${pct} %)`
    : p.stage === "runtime" ? `Starting runtime: ${p.file} (${pct} %)`
    : p.stage === "load" ? `Loading ${name} (${pct} %)` : runText(p, pct);
  clearTimeout(bar.hide); // the bar leaves once a load or run has finished (its value stays at 100)
  if (pct === 100 && p.stage !== "download" && !bar.timer) hideSoon();
}

function hideSoon() {
  clearTimeout(bar.hide);
  bar.hide = setTimeout(() => { $("#progress-wrap").hidden = true; }, 800);
}

// A run's progress (Whisper per 30 s window and per segment in seconds of audio, YOLO per stage, text per token
// against Max tokens) with the time since the run started and an estimate of the time left: from the fraction
// done, or for YOLO (whose model stage is nearly all of it) from the previous run's time.
function runText(p, pct) {
  const secs = bar.runStart ? (performance.now() - bar.runStart) / 1000 : 0;
  const clock = `${secs.toFixed(1)} s elapsed`;
  if (!p || !["window", "segment", "tokens", "preprocess", "model", "nms", "done", "encode", "embed", "decode"].includes(p.stage))
    return `${bar.runLabel || "Working"}… · ${clock}`;
  const what = p.stage === "window" || p.stage === "segment" ? `Transcribing: ${p.done.toFixed(0)} / ${p.total.toFixed(0)} s of audio`
    : p.stage === "tokens" ? (p.done === p.total ? `Generated ${p.done} tokens` : `Generating: ${p.done} / ${p.total} tokens at most`)
    : p.stage === "encode" ? `Embedding the image: block ${p.done} / ${p.total}` // Segment Anything (segment.js)
    : p.stage === "embed" || p.stage === "decode" ? `Segmenting everything: ${p.stage === "embed" ? "embedding" : "batch"} ${p.done} / ${p.total}`
    : `Detecting: ${p.stage === "done" ? "done" : p.stage}`;
  const frac = p.total ? p.done / p.total : 0;
  const last = bar.lastRunS[p.file];
  const left = frac >= 1 ? null : p.file === "yolo" && last ? Math.max(0, last - secs)
    : frac > 0.01 ? (secs * (1 - frac)) / frac : null;
  return `${what} (${pct} %) · ${clock}` + (left == null ? "" : ` · about ${duration(left)} left`);
}

// ------------------------------------------------------------------ files, copy, download

/** A drop zone over a file input: drop, choose, or Enter on the zone; onFile(file). */
export function dropZone(zone, input, onFile) {
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

/** Refuse an empty file before anything reads it. */
export function notEmpty(file, what = "file") {
  if (file.size === 0)
    throw new EmberError("unsupported_file", `ember: ${file.name || `the ${what}`} is empty (0 bytes)`);
}

export function download(name, text, type = "text/plain") {
  const a = document.createElement("a");
  a.href = URL.createObjectURL(new Blob([text], { type }));
  a.download = name;
  a.click();
  setTimeout(() => URL.revokeObjectURL(a.href), 10_000);
}

/** Copy text; the button says "Copied" for a moment (or why it could not). */
export async function copyText(button, text) {
  const was = button.textContent;
  try {
    await navigator.clipboard.writeText(text);
    button.textContent = "Copied";
  } catch (e) {
    button.textContent = "Copy blocked";
  }
  setTimeout(() => { button.textContent = was; }, 1500);
}
