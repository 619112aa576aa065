// speech.js: the speech-to-text tool's page code (Whisper through ember.js's transcribe()): a file or a recording
// in, segments streamed into the transcript, its words highlighted as the audio plays, copy / .txt / .srt out; live
// captions from the microphone (captions.js). Mounted by app.js (mountSpeechTool).

import { mountLiveCaptions, showWords } from "./captions.js";
import { EmberError } from "./ember.js";
import { $, copyText, download, dropZone, lastProgress, notEmpty } from "./ui.js";

const WHISPER_EMPTY = "The transcript appears here segment by segment.";

const fmt = (t, sep = ".") => {
  const ms = Math.round(t * 1000);
  const h = Math.floor(ms / 3600000), m = Math.floor(ms / 60000) % 60, s = Math.floor(ms / 1000) % 60;
  return `${String(h).padStart(2, "0")}:${String(m).padStart(2, "0")}:${String(s).padStart(2, "0")}${sep}${String(ms % 1000).padStart(3, "0")}`;
};

// Whisper's codes are ISO 639-1 but for Javanese ("jw"); the browser names them in English
const LANGUAGE_NAMES = typeof Intl.DisplayNames === "function" ? new Intl.DisplayNames(["en"], { type: "language" }) : null;
function languageName(code) {
  try { return (LANGUAGE_NAMES && LANGUAGE_NAMES.of(code === "jw" ? "jv" : code)) || code; } catch (e) { return code; }
}
// "English (detected)": the language the transcript is in, and whether the model picked it
const languageLine = (r, asked) => `${languageName(r.language)}${asked ? "" : " (detected)"}`;

export function mountSpeechTool(app) {
  const segments = [];
  const picker = app.picker("whisper");

  // The language picker follows the loaded model: a multilingual one offers "Detect" and its languages (the
  // choice is kept where the new model has it); an English-only one offers English alone.
  picker.addEventListener("modelloaded", ({ detail: info }) => {
    if (info.multilingual) $(".model-status", picker).textContent += ` Multilingual: ${info.languages.length} languages.`;
    const sel = $("#whisper-language"), keep = sel.value;
    const langs = info.multilingual ? info.languages : ["en"];
    sel.replaceChildren(...(info.multilingual ? [new Option("Detect from the audio", "")] : []),
      ...langs.map((c) => new Option(`${languageName(c)} (${c})`, c)));
    sel.value = langs.includes(keep) ? keep : info.multilingual ? "" : "en";
    sel.disabled = !info.multilingual;
  });

  function addSegment(seg) {
    segments.push(seg);
    $("#whisper-empty").hidden = true;
    const li = document.createElement("li");
    li.innerHTML = `<span class="ts"></span><span class="seg-text"></span>`;
    $(".ts", li).textContent = `${fmt(seg.start).slice(3, 10)} → ${fmt(seg.end).slice(3, 10)}`;
    $(".seg-text", li).textContent = seg.text.trim();
    $("#transcript").append(li);
  }

  async function audioInput(file) {
    notEmpty(file, "recording");
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

  // Nothing of the previous file survives a new run: transcript, its buttons, the player, the stats.
  function clear() {
    segments.length = 0;
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

  // The result of a run; a run stopped by restarting the runtime has only what was streamed before.
  function show(file, r, language) {
    if (!segments.length) r.segments.forEach(addSegment);
    const player = $("#audio-player"); // only a file ember could read gets a player
    player.src = URL.createObjectURL(file);
    player.hidden = false;
    showWords($("#transcript"), player, r); // the word being spoken is highlighted as it plays
    const n = r.segments.length;
    $("#whisper-stats").textContent = r.stopped === "cancelled"
      ? `Cancelled after ${(r.ms / 1000).toFixed(1)} s: ${n} segment${n === 1 ? "" : "s"}` +
        (r.duration ? ` of ${r.duration.toFixed(1)} s of audio` : "")
      : `${r.duration.toFixed(1)} s of audio in ${(r.ms / 1000).toFixed(1)} s on ${app.ember().device.toUpperCase()}` +
        (r.language ? ` · ${languageLine(r, language)}` : "");
    $("#transcript").dataset.text = r.text;
    $("#transcript").dataset.json = JSON.stringify(r);
    for (const b of ["#copy-text", "#download-txt", "#download-srt"]) $(b).disabled = !n;
    if (!n) $("#whisper-empty").textContent = r.stopped === "cancelled" ? "Cancelled before the first segment." : "No speech found.";
  }

  async function transcribeFile(file) {
    if (app.busy()) return app.showError(new EmberError("busy", `ember: ${app.busy().label} is still running; wait for it to finish or cancel it, then try again`));
    clear();
    const t0 = performance.now();
    let language = null;
    try {
      const r = await app.run("whisper", { label: "Transcribing", cancel: $("#whisper-cancel") }, async () => {
        const input = await audioInput(file);
        await app.ensureModel("whisper");
        $("#whisper-stats").textContent = "Transcribing…";
        language = $("#whisper-language").value || null; // read after the load: the picker follows the model
        return app.ember().transcribe(input, { timestamps: true, words: true, language, name: file.name || "recording" }, addSegment);
      });
      show(file, r, language);
    } catch (e) {
      if (e.code === "cancelled") { // stopped mid-step: what streamed in is the result; the progress knew the length
        const p = lastProgress(), duration = p && (p.stage === "window" || p.stage === "segment") ? p.total : null;
        show(file, { text: segments.map((s) => s.text).join("").trim(), segments: [...segments], stopped: "cancelled",
          ms: performance.now() - t0, duration, language }, language);
        return;
      }
      clear();
      app.showError(e, "whisper");
    }
  }

  const srt = () => segments.map((s, i) => `${i + 1}\n${fmt(s.start, ",")} --> ${fmt(s.end, ",")}\n${s.text.trim()}\n`).join("\n");
  $("#copy-text").addEventListener("click", (e) => copyText(e.currentTarget, $("#transcript").dataset.text || ""));
  $("#download-txt").addEventListener("click", () => download("transcript.txt", ($("#transcript").dataset.text || "") + "\n"));
  $("#download-srt").addEventListener("click", () => download("transcript.srt", srt()));
  $("#whisper-cancel").addEventListener("click", () => app.cancel());
  dropZone($("#audio-drop"), $("#audio-file"), transcribeFile);

  // ---------------------------------------------------------------- recording: a level meter and a clock

  let rec = null; // {recorder, stream, ctx, timer, t0}
  function stopMeter() {
    if (!rec) return;
    clearInterval(rec.timer);
    rec.ctx.close().catch(() => {});
    rec.stream.getTracks().forEach((t) => t.stop());
    $("#record-meter").hidden = true;
    $("#record").textContent = "● Record from microphone";
    rec = null;
  }
  $("#record").addEventListener("click", async () => {
    if (rec) { // the meter and clock stop at once; onstop (after the recorder's last data) transcribes and cleans up
      clearInterval(rec.timer);
      $("#record-meter").hidden = true;
      if (rec.recorder.state !== "inactive") rec.recorder.stop();
      return;
    }
    try {
      const stream = await navigator.mediaDevices.getUserMedia({ audio: true });
      const chunks = [];
      const recorder = new MediaRecorder(stream);
      const ctx = new AudioContext();
      const analyser = ctx.createAnalyser();
      analyser.fftSize = 1024;
      ctx.createMediaStreamSource(stream).connect(analyser);
      const samples = new Float32Array(analyser.fftSize);
      rec = { recorder, stream, ctx, t0: performance.now() };
      rec.timer = setInterval(() => { // the input's level (RMS, in dB) and the time recorded
        analyser.getFloatTimeDomainData(samples);
        const rms = Math.sqrt(samples.reduce((s, v) => s + v * v, 0) / samples.length);
        const db = Math.max(-60, 20 * Math.log10(rms || 1e-6));
        $("#record-level").value = db + 60;
        rec.peak = Math.max(rec.peak || 0, db + 60);
        $("#record-level").dataset.peak = String(rec.peak); // the loudest so far (the e2e test reads it)
        $("#record-level").textContent = `${Math.round(db)} dB`;
        const secs = Math.floor((performance.now() - rec.t0) / 1000);
        $("#record-time").textContent = `${Math.floor(secs / 60)}:${String(secs % 60).padStart(2, "0")}`;
      }, 100);
      recorder.ondataavailable = (e) => chunks.push(e.data);
      recorder.onstop = () => {
        stopMeter();
        transcribeFile(new File(chunks, "recording.webm", { type: chunks[0]?.type || "audio/webm" }));
      };
      recorder.start();
      $("#record-meter").hidden = false;
      $("#record-time").textContent = "0:00";
      $("#record").textContent = "■ Stop recording";
    } catch (e) {
      stopMeter();
      app.showMessage(`Microphone unavailable: ${e.message}. Allow microphone access or choose a file.`);
    }
  });
  const live = mountLiveCaptions(app, { button: $("#live-captions"), slot: $("#live-slot") });
  return { transcribeFile, segments, live };
}
