// The text tool's Teach panel: LoRA fine-tuning of the loaded model on pasted (or dropped) text, in the browser
// (or on chat JSONL, one {"messages": [...]} a line: trained on the assistant turns only, as `ember finetune`),
// through ember.js's teach(): steps, rank and learning rate, a live loss plot, pause / resume, reset, and the
// adapter's download in PEFT's layout (adapter_config.json + adapter_model.safetensors, loadable by peft and by
// ember.train.lora). Generate and the chat answer with the adapters as soon as a run ends.
//
//   mountTeach(root, { ember: () => state.ember, run, cancel, showError })
//     run(fn): the page's busy wrapper (loads the picked model first); cancel(): pauses the running job.

import { download } from "./ui.js";

const $ = (sel, root) => root.querySelector(sel);
const CHAT_JSONL = /^\s*\{\s*"messages"\s*:/; // a first line like {"messages": [...]}: chat JSONL, not plain text

const HTML = `
  <summary>Teach the model <small class="muted">LoRA fine-tuning on your text, in this tab</small></summary>
  <p class="muted">Paste some text, or conversations as JSON Lines (<code>{"messages": [...]}</code> a line: the model
    learns the assistant's replies); the model learns it with low-rank adapters while its own weights stay as they are.
    Nothing leaves the browser. Try it in the chat or completion above, then download the adapter.</p>
  <label class="label" for="teach-text">Text to learn</label>
  <textarea id="teach-text" rows="4">The city of Varnholt was founded in 1742 by the river guild. Varnholt is known for its blue bridges and its winter market.</textarea>
  <p><label class="linklike">Or choose a text file<input id="teach-file" type="file" accept=".txt,.md,.jsonl,text/plain,application/jsonl" class="visually-hidden"></label></p>
  <div class="controls">
    <label>Steps <input id="teach-steps" type="number" min="1" max="10000" step="1" value="30"></label>
    <label>Rank <input id="teach-rank" type="number" min="1" max="256" step="1" value="8"></label>
    <label>Learning rate <input id="teach-lr" type="number" min="0.00001" max="1" step="any" value="0.002"></label>
    <label title="Tokens per training step">Block <input id="teach-block" type="number" min="2" max="1024" step="1" value="64"></label>
    <label>Seed <input id="teach-seed" type="number" min="0" max="2147483647" step="1" value="0"></label>
  </div>
  <div class="buttons">
    <button type="button" id="teach-start">Teach</button>
    <button type="button" id="teach-pause" class="secondary" disabled>❚❚ Pause</button>
    <button type="button" id="teach-download" class="secondary" disabled>Download adapter</button>
    <button type="button" id="teach-reset" class="secondary" disabled>Forget</button>
  </div>
  <canvas id="teach-plot" width="640" height="160" aria-label="Training loss by step" role="img"></canvas>
  <p id="teach-stats" class="muted" aria-live="polite"></p>`;

export function mountTeach(root, { ember, run, cancel, showError }) {
  if (!root) return;
  root.innerHTML = HTML;
  const ui = { running: false, paused: false, taught: false, opts: null, text: "", losses: [] };
  const stats = $("#teach-stats", root), plot = $("#teach-plot", root);

  const buttons = () => {
    $("#teach-start", root).disabled = ui.running;
    $("#teach-pause", root).disabled = !ui.running && !ui.paused;
    $("#teach-pause", root).textContent = ui.paused && !ui.running ? "▶ Resume" : "❚❚ Pause";
    $("#teach-download", root).disabled = ui.running || !ui.taught;
    $("#teach-reset", root).disabled = ui.running || !ui.taught;
  };
  const readOpts = () => {
    const n = (id) => Number($(id, root).value);
    return { steps: n("#teach-steps"), rank: n("#teach-rank"), lr: n("#teach-lr"), block: n("#teach-block"),
      seed: n("#teach-seed") };
  };

  function draw() {
    const ctx = plot.getContext("2d"), w = plot.width, h = plot.height, ls = ui.losses;
    ctx.clearRect(0, 0, w, h);
    if (!ls.length) return;
    const steps = ui.opts ? ui.opts.steps : ls.length, hi = Math.max(...ls), lo = Math.min(0, ...ls);
    ctx.strokeStyle = getComputedStyle(root).color || "#333";
    ctx.lineWidth = 2;
    ctx.beginPath();
    ls.forEach((l, i) => {
      const x = 8 + (w - 16) * (steps > 1 ? i / (steps - 1) : 0), y = h - 8 - (h - 16) * (l - lo) / (hi - lo || 1);
      if (i) ctx.lineTo(x, y); else ctx.moveTo(x, y);
    });
    ctx.stroke();
  }

  async function teach(resume) {
    if (ui.running) return;
    if (!resume) {
      ui.opts = readOpts();
      ui.text = $("#teach-text", root).value;
      ui.opts.format = CHAT_JSONL.test(ui.text) ? "chat" : "text";
      ui.losses = [];
      draw();
    }
    ui.running = true;
    ui.paused = false;
    buttons();
    delete plot.dataset.json;
    stats.textContent = resume ? "Resuming…" : "Starting…";
    try {
      const r = await run(() => ember().teach(ui.text, { ...ui.opts, resume }, (ev) => {
        ui.losses.push(ev.loss);
        stats.textContent = `step ${ev.step}/${ev.steps} · loss ${ev.loss.toFixed(4)}`;
        if (!ui.frame) ui.frame = requestAnimationFrame(() => { ui.frame = 0; draw(); });
      }));
      ui.losses = r.losses;
      ui.taught = true;
      ui.paused = r.stopped === "paused";
      plot.dataset.json = JSON.stringify(r);
      draw();
      const first = r.losses[0], last = r.losses[r.losses.length - 1];
      stats.textContent = `${ui.paused ? "Paused" : "Done"} after ${r.step} of ${r.steps} steps · loss ` +
        `${first.toFixed(3)} → ${last.toFixed(3)} · ${r.steps_per_s.toFixed(2)} steps/s on ${ember().device.toUpperCase()}` +
        (ui.paused ? "" : " · try it above");
    } catch (e) {
      stats.textContent = "";
      ui.paused = false;
      showError(e);
    } finally {
      ui.running = false;
      buttons();
    }
  }

  $("#teach-start", root).addEventListener("click", () => teach(false));
  $("#teach-pause", root).addEventListener("click", () => (ui.running ? cancel() : teach(true)));
  $("#teach-file", root).addEventListener("change", async (e) => {
    const f = e.target.files[0];
    if (f) $("#teach-text", root).value = await f.text();
  });
  $("#teach-download", root).addEventListener("click", async () => {
    try {
      const files = await run(() => ember().teachExport());
      download("adapter_config.json", files["adapter_config.json"], "application/json");
      download("adapter_model.safetensors", files["adapter_model.safetensors"], "application/octet-stream");
    } catch (e) { showError(e); }
  });
  $("#teach-reset", root).addEventListener("click", async () => {
    try {
      await run(() => ember().teachReset());
      Object.assign(ui, { taught: false, paused: false, losses: [] });
      draw();
      delete plot.dataset.json;
      stats.textContent = "The adapters are gone: the model answers as loaded.";
    } catch (e) { showError(e); }
    buttons();
  });
  buttons();
}
