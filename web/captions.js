// captions.js: Whisper in the page as people use it: words highlighted as the audio plays, and live captions from
// the microphone. Uses ember.js's public API only (transcribe's word timestamps, transcribeLive); mounted by
// speech.js.
//
//   showWords(list, player, result)   a transcript's segments as words; the word being spoken is highlighted,
//                                     a click on a word plays from there
//   mountLiveCaptions(app, {button, slot})   the live-captions control: a live session is the speech tool's job in
//                                     the page's one job guard (guard.js) from its start to its stop

import { exclusive } from "./guard.js";
import { $ } from "./ui.js";

// ------------------------------------------------------------------ words as the audio plays

export function showWords(list, player, result) {
  const spans = [];
  list.querySelectorAll("li").forEach((li, i) => {
    const seg = result.segments[i];
    if (!seg || !seg.words || !seg.words.length) return;
    const text = $(".seg-text", li);
    text.replaceChildren();
    for (const w of seg.words) {
      const s = document.createElement("span");
      s.className = "word";
      s.textContent = w.word;
      s.dataset.start = w.start;
      s.dataset.end = w.end;
      s.title = `${w.start.toFixed(2)}–${w.end.toFixed(2)} s · p ${(w.probability ?? 1).toFixed(2)}`;
      s.addEventListener("click", () => { player.currentTime = w.start; player.play(); });
      text.append(s);
      spans.push(s);
    }
  });
  let current = null;
  const mark = () => {
    const t = player.currentTime;
    let hit = null;
    for (const s of spans) if (t >= +s.dataset.start && t < +s.dataset.end) { hit = s; break; }
    if (hit !== current) {
      if (current) current.classList.remove("current");
      if (hit) hit.classList.add("current");
      current = hit;
    }
    for (const s of spans) s.classList.toggle("spoken", +s.dataset.end <= t);
  };
  let raf = 0;
  const loop = () => { mark(); raf = player.paused ? 0 : requestAnimationFrame(loop); };
  player.onplay = () => { if (!raf) raf = requestAnimationFrame(loop); };
  player.onseeked = player.ontimeupdate = mark;
  return spans.length;
}

// ------------------------------------------------------------------ live captions

// The worklet hands the main thread its 128-frame blocks in batches of 2048 samples (128 ms at 16 kHz).
const WORKLET = `
class EmberTap extends AudioWorkletProcessor {
  constructor() { super(); this.buf = new Float32Array(2048); this.n = 0; }
  process(inputs) {
    const ch = inputs[0] && inputs[0][0];
    if (ch) {
      let i = 0;
      while (i < ch.length) {
        const k = Math.min(ch.length - i, this.buf.length - this.n);
        this.buf.set(ch.subarray(i, i + k), this.n);
        this.n += k; i += k;
        if (this.n === this.buf.length) { this.port.postMessage(this.buf.slice(0)); this.n = 0; }
      }
    }
    return true;
  }
}
registerProcessor("ember-tap", EmberTap);`;

const RATE = 16000;
const MIN_PUSH_S = 0.5;      // audio gathered before a push while the worker is idle
const MAX_QUEUE_S = 120;     // audio held while the worker is busy (7.7 MB); older samples are dropped past it
const MAX_PUSH_S = 25;       // one push at most (the worker refuses more than 30 s)

export function mountLiveCaptions(app, { button, slot }) {
  const onError = (e) => app.showError(e, "whisper");
  slot.innerHTML = `<div class="live" hidden>
    <div class="live-head"><span class="live-dot" aria-hidden="true"></span>
      <span class="live-timer" aria-label="Recording time">0:00</span>
      <meter class="live-level" min="-60" max="0" low="-45" high="-10" value="-60" aria-label="Microphone level"></meter>
      <span class="live-note muted"></span></div>
    <p class="live-text" aria-live="polite"><span class="committed"></span><span class="partial"></span></p>
  </div>`;
  const box = $(".live", slot);
  const stats = { words: [], latencies: [], pushes: 0, maxQueue: 0, t0: 0, running: false };
  window.__emberLive = stats;  // for the page's own tests and the curious: committed words with their latencies
  let session = null;

  // The session holds the job guard until stop() settles `released` (another tool's job is refused meanwhile).
  let opening = false;
  function start() {
    if (opening) return;
    opening = true;
    let release;
    const released = new Promise((resolve) => { release = resolve; });
    exclusive("whisper", "Live captions", async () => {
      try { await open(release); } finally { opening = false; }
      await released;
    }).catch(onError);
  }

  async function open(release) {
    let stream = null, ctx = null;
    try {
      await app.ensureModel("whisper");
      stream = await navigator.mediaDevices.getUserMedia({
        audio: { channelCount: 1, echoCancellation: false, noiseSuppression: false, autoGainControl: false } });
      ctx = new AudioContext({ sampleRate: RATE }); // the browser resamples the microphone to 16 kHz
      const url = URL.createObjectURL(new Blob([WORKLET], { type: "text/javascript" }));
      await ctx.audioWorklet.addModule(url);
      URL.revokeObjectURL(url);
      const src = ctx.createMediaStreamSource(stream);
      const tap = new AudioWorkletNode(ctx, "ember-tap");
      src.connect(tap);
      const live = await app.ember().transcribeLive({});
      session = { stream, ctx, tap, live, release, queue: [], queued: 0, inflight: null, stopping: false, timer: 0 };
    } catch (e) {
      if (stream) stream.getTracks().forEach((t) => t.stop());
      if (ctx) ctx.close().catch(() => {});
      release();
      throw e;
    }
    Object.assign(stats, { words: [], latencies: [], pushes: 0, maxQueue: 0, t0: performance.now(), running: true });
    $(".committed", box).textContent = "";
    $(".partial", box).textContent = "";
    $(".live-note", box).textContent = ctx.sampleRate === RATE ? "" : `microphone at ${ctx.sampleRate} Hz`;
    box.hidden = false;
    button.textContent = "■ Stop captions";
    session.tap.port.onmessage = (e) => onAudio(e.data);
    session.timer = setInterval(() => {
      const s = Math.floor((performance.now() - stats.t0) / 1000);
      $(".live-timer", box).textContent = `${Math.floor(s / 60)}:${String(s % 60).padStart(2, "0")}`;
    }, 250);
  }

  function onAudio(block) {
    const s = session;
    if (!s || s.stopping) return;
    let sum = 0;
    for (const v of block) sum += v * v;
    $(".live-level", box).value = Math.max(-60, 10 * Math.log10(sum / block.length + 1e-12));
    s.queue.push(block);
    s.queued += block.length;
    while (s.queued > MAX_QUEUE_S * RATE) s.queued -= s.queue.shift().length; // bounded while the worker lags
    stats.maxQueue = Math.max(stats.maxQueue, s.queued / RATE);
    if (!s.inflight && s.queued >= MIN_PUSH_S * RATE) push();
  }

  function take(s) {
    const blocks = [];
    let n = 0;
    while (s.queue.length && n + s.queue[0].length <= MAX_PUSH_S * RATE) { n += s.queue[0].length; blocks.push(s.queue.shift()); }
    s.queued -= n;
    const out = new Float32Array(n);
    let o = 0;
    for (const b of blocks) { out.set(b, o); o += b.length; }
    return out;
  }

  function show(u) {
    const now = performance.now();
    for (const w of u.committed) {
      stats.words.push(w);
      stats.latencies.push((now - stats.t0) / 1000 - w.end); // seconds from the word's end to its commit
    }
    if (u.committed.length) $(".committed", box).textContent += u.committed.map((w) => w.word).join("");
    $(".partial", box).textContent = u.partial || "";
    box.classList.toggle("speaking", !!u.speech);
  }

  function push() {
    const s = session;
    const samples = take(s);
    stats.pushes++;
    s.inflight = s.live.push(samples).then(show).catch((e) => { onError(e); stop(); })
      .finally(() => { s.inflight = null; if (!s.stopping && s.queued >= MIN_PUSH_S * RATE) push(); });
  }

  // workerGone: the runtime restarted, so there is no stream left in the worker to flush
  async function stop(workerGone = false) {
    const s = session;
    session = null;
    button.textContent = "● Live captions";
    if (!s) return;
    s.stopping = true;
    clearInterval(s.timer);
    s.tap.port.onmessage = null;
    s.stream.getTracks().forEach((t) => t.stop());
    await s.ctx.close().catch(() => {});
    if (!workerGone) {
      try {
        if (s.inflight) await s.inflight;
        while (s.queued) show(await s.live.push(take(s)));
        show(await s.live.stop());
      } catch (e) { onError(e); }
    }
    $(".partial", box).textContent = "";
    stats.running = false;
    s.release();
  }

  button.addEventListener("click", () => (session ? stop() : start()));
  // the runtime restarted (another job was stopped at once): the worker's stream is gone with it
  app.onRestart(() => stop(true));
  return { start, stop, stats };
}
