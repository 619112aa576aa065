// The training tool: trains the digits CNN in the browser through ember.js's train(config, onStep), plots
// loss and accuracy live on a canvas, pauses / resumes / stops, and classifies a digit drawn with the mouse.
// app.js mounts it with one call (mountTrainTool); its tab and panel are in index.html.

const $ = (sel, root = document) => root.querySelector(sel);

export function mountTrainTool(app) {
  const panel = $("#panel-train");
  if (!panel) return;
  const ui = { running: false, paused: false, trained: false, config: null, steps: [], epochs: [], total: 0 };
  app.onRestart(() => { // the runtime was replaced: the model trained so far is gone
    Object.assign(ui, { paused: false, trained: false });
    buttons();
    $("#train-stats").textContent = "Stopped: the runtime restarted, so training starts again from step 0.";
  });

  // ---------------------------------------------------------------- training

  function readConfig() {
    const num = (id) => Number($(id).value);
    return { epochs: num("#train-epochs"), batch_size: num("#train-batch"), lr: num("#train-lr"),
      seed: num("#train-seed") };
  }

  async function run(resume) {
    const ember = app.ember();
    if (!ember) return;
    if (ui.running) return;
    if (!resume) {
      ui.config = readConfig();
      ui.steps = [];
      ui.epochs = [];
      ui.total = 0;
      draw();
    }
    ui.running = true;
    ui.paused = false;
    buttons();
    $("#train-stats").textContent = resume ? "Resuming…" : "Loading the digits…";
    delete $("#train-plot").dataset.json;
    let done = false;
    try {
      const r = await app.run("train", { label: "Training" }, () => ember.train({ ...ui.config, resume }, onStep));
      ui.trained = done = true;
      ui.paused = r.stopped === "paused" && !ui.stopRequested;
      ui.last = r;
      $("#train-plot").dataset.json = JSON.stringify({ ...r, losses: ui.steps.map((ev) => ev.loss) }); // the plotted curve
      status(r.stopped === "paused" ? (ui.paused ? "Paused" : "Stopped") : "Done");
    } catch (e) {
      $("#train-stats").textContent = "";
      if (e.code !== "busy") ui.paused = false;
      app.showError(e, "train");
    } finally {
      ui.running = false;
      ui.stopRequested = false;
      buttons();
    }
    if (done) predictDrawn(); // a digit drawn while it trained is classified now
  }

  // "Paused after 12 steps · 40.1 steps/s on CPU · test accuracy 91.2 %"
  function status(how) {
    const r = ui.last, last = r.history[r.history.length - 1];
    $("#train-stats").textContent = `${how} after ${r.step} steps · ${r.steps_per_s.toFixed(1)} steps/s on ` +
      `${app.ember().device.toUpperCase()}` + (last ? ` · test accuracy ${(100 * last.val_accuracy).toFixed(1)} %` : "");
  }

  function onStep(ev) {
    if (ev.kind === "step") {
      ui.total = ui.config.epochs * ev.batches;
      ui.steps.push(ev);
      $("#train-stats").textContent = `epoch ${ev.epoch + 1}/${ui.config.epochs} · step ${ev.step}/${ui.total} · ` +
        `loss ${ev.loss.toFixed(4)}${ev.accuracy != null ? ` · batch accuracy ${(100 * ev.accuracy).toFixed(0)} %` : ""}`;
    } else {
      ui.epochs.push(ev);
      addEpochRow(ev);
    }
    if (!ui.frame) ui.frame = requestAnimationFrame(() => { ui.frame = 0; draw(); });
  }

  function buttons() {
    $("#train-start").disabled = ui.running;
    $("#train-pause").disabled = !ui.running && !ui.paused;
    $("#train-pause").textContent = ui.paused ? "▶ Resume" : "❚❚ Pause";
    $("#train-stop").disabled = !ui.running && !ui.paused;
  }

  $("#train-start").addEventListener("click", () => {
    $("#train-epochs-table tbody").replaceChildren();
    run(false);
  });
  $("#train-pause").addEventListener("click", () => {
    if (ui.running) app.ember().cancel({ hard: false }); // the run ends "paused" between steps, its state kept
    else if (ui.paused) run(true);
  });
  $("#train-stop").addEventListener("click", () => {
    if (ui.running) { ui.stopRequested = true; app.ember().cancel(); }
    else if (ui.paused) status("Stopped"); // nothing runs: the paused run just ends here
    ui.paused = false;
    buttons();
  });

  function addEpochRow(ev) {
    const tr = $("#train-epochs-table tbody").insertRow();
    const pct = (v) => (v == null ? "" : `${(100 * v).toFixed(1)} %`);
    for (const v of [ev.epoch + 1, ev.loss.toFixed(4), pct(ev.accuracy), ev.val_loss.toFixed(4), pct(ev.val_accuracy)])
      tr.insertCell().textContent = v;
  }

  // ---------------------------------------------------------------- the plot (no libraries: one canvas)

  // Drawn at the size it is shown (a phone's 330 px too, at the screen's pixel density); the legend sits above
  // the plot area, in as many rows as the width needs, never over the curves.
  const LEGEND = [["#ef4444", "loss (left)"], ["#3b82f6", "batch accuracy"], ["#22c55e", "test accuracy"]];
  function draw() {
    const c = $("#train-plot");
    const g = c.getContext("2d");
    const dpr = window.devicePixelRatio || 1, W = c.clientWidth || 720, H = Math.round(W < 520 ? W * 0.62 : W * 0.36);
    if (c.width !== Math.round(W * dpr) || c.height !== Math.round(H * dpr)) {
      c.width = Math.round(W * dpr);
      c.height = Math.round(H * dpr);
    }
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, W, H);
    g.font = "11px system-ui, sans-serif";
    const L = 44, R = 44, B = 26;
    let lx = L, ly = 12;
    const spots = LEGEND.map(([color, text]) => {
      const w = 18 + g.measureText(text).width;
      if (lx + w > W - R && lx > L) { lx = L; ly += 15; }
      const at = [lx, ly];
      lx += w + 16;
      return [color, text, at];
    });
    const T = ly + 10;
    g.strokeStyle = "#8884";
    g.fillStyle = "#888";
    g.strokeRect(L, T, W - L - R, H - T - B);
    const n = Math.max(ui.total, ui.steps.length, 1);
    const maxLoss = Math.max(0.5, ...ui.steps.slice(0, 5).map((s) => s.loss));
    const x = (step) => L + ((W - L - R) * step) / n;
    const yLoss = (v) => T + (H - T - B) * (1 - Math.min(v, maxLoss) / maxLoss);
    const yAcc = (v) => T + (H - T - B) * (1 - v);
    for (let i = 0; i <= 4; i++) {
      const f = i / 4;
      g.fillText((maxLoss * (1 - f)).toFixed(2), 4, T + (H - T - B) * f + 4);
      g.fillText(`${100 - 25 * i} %`, W - R + 6, T + (H - T - B) * f + 4);
    }
    g.fillText("step", W / 2 - 10, H - 6);
    g.fillText(`${n}`, W - R - 16, H - 12);
    const line = (pts, color, width) => {
      if (!pts.length) return;
      g.strokeStyle = color;
      g.lineWidth = width;
      g.beginPath();
      pts.forEach(([px, py], i) => (i ? g.lineTo(px, py) : g.moveTo(px, py)));
      g.stroke();
    };
    line(ui.steps.map((s) => [x(s.step), yLoss(s.loss)]), "#ef4444", 1.5);
    line(ui.steps.filter((s) => s.accuracy != null).map((s) => [x(s.step), yAcc(s.accuracy)]), "#3b82f666", 1);
    line(ui.epochs.map((e) => [x(e.step), yAcc(e.val_accuracy)]), "#22c55e", 2);
    for (const e of ui.epochs) { g.fillStyle = "#22c55e"; g.fillRect(x(e.step) - 3, yAcc(e.val_accuracy) - 3, 6, 6); }
    for (const [color, text, [px, py]] of spots) {
      g.fillStyle = color;
      g.fillRect(px, py - 4, 12, 3);
      g.fillStyle = "#888";
      g.fillText(text, px + 16, py);
    }
    c.dataset.plotTop = String(T); // where the curves start: below the legend (the e2e test reads it)
  }
  draw();
  new ResizeObserver(() => { if (!ui.frame) ui.frame = requestAnimationFrame(() => { ui.frame = 0; draw(); }); }).observe($("#train-plot"));

  // ---------------------------------------------------------------- draw a digit

  const pad = $("#train-draw");
  const pg = pad.getContext("2d", { willReadFrequently: true });
  let drawing = false;
  const pos = (e) => { const r = pad.getBoundingClientRect(); return [(e.clientX - r.left) * pad.width / r.width, (e.clientY - r.top) * pad.height / r.height]; };
  pad.addEventListener("pointerdown", (e) => {
    drawing = true;
    pad.setPointerCapture(e.pointerId);
    pg.lineWidth = pad.width / 11;
    pg.lineCap = pg.lineJoin = "round";
    pg.strokeStyle = "#000";
    pg.beginPath();
    pg.moveTo(...pos(e));
    pg.lineTo(...pos(e));
    pg.stroke();
  });
  pad.addEventListener("pointermove", (e) => { if (drawing) { pg.lineTo(...pos(e)); pg.stroke(); } });
  const end = () => { if (drawing) { drawing = false; predictDrawn(); } };
  pad.addEventListener("pointerup", end);
  pad.addEventListener("pointercancel", end);
  $("#train-clear").addEventListener("click", () => {
    pg.clearRect(0, 0, pad.width, pad.height);
    $("#train-input").getContext("2d").clearRect(0, 0, 64, 64);
    $("#train-probs").replaceChildren();
    delete $("#train-probs").dataset.json;
  });

  async function predictDrawn() {
    const pixels = digitPixels(pad);
    if (!pixels) return;
    showInput(pixels);
    if (!ui.trained || ui.running) {
      $("#train-probs").replaceChildren(Object.assign(document.createElement("li"), { className: "muted", textContent: ui.running ? "Predicts when the run pauses or ends." : "Train the model first." }));
      return;
    }
    try {
      const r = await app.run("train", { label: "Classifying the drawing" }, () => app.ember().predictDigit(pixels));
      $("#train-probs").dataset.json = JSON.stringify(r);
      $("#train-probs").replaceChildren(...r.probs.map((p, d) => {
        const li = document.createElement("li");
        li.className = d === r.class ? "best" : "";
        li.innerHTML = `<span class="digit"></span><span class="bar"><span></span></span><span class="pct"></span>`;
        $(".digit", li).textContent = d;
        $(".bar span", li).style.width = `${(100 * p).toFixed(1)}%`;
        $(".pct", li).textContent = `${(100 * p).toFixed(1)} %`;
        return li;
      }));
    } catch (e) {
      app.showError(e, "train");
    }
  }

  function showInput(pixels) {
    const g = $("#train-input").getContext("2d");
    for (let i = 0; i < 64; i++) {
      const v = Math.round(255 * (1 - pixels[i]));
      g.fillStyle = `rgb(${v},${v},${v})`;
      g.fillRect((i % 8) * 8, Math.floor(i / 8) * 8, 8, 8);
    }
  }
  return { run, predictDrawn };
}

// The UCI digits were made by normalising each drawing into a 32x32 bitmap and counting the set pixels in
// 4x4 blocks (values 0..16): do the same to the ink's bounding box, so a drawing looks like the data.
export function digitPixels(canvas) {
  const { width: w, height: h } = canvas;
  const ink = canvas.getContext("2d").getImageData(0, 0, w, h).data;
  let x0 = w, y0 = h, x1 = -1, y1 = -1;
  for (let y = 0; y < h; y++) for (let x = 0; x < w; x++) {
    if (ink[4 * (y * w + x) + 3] > 32) { x0 = Math.min(x0, x); x1 = Math.max(x1, x); y0 = Math.min(y0, y); y1 = Math.max(y1, y); }
  }
  if (x1 < 0) return null;
  const side = Math.max(x1 - x0, y1 - y0) + 1;
  const cx = (x0 + x1) / 2, cy = (y0 + y1) / 2;
  const small = new OffscreenCanvas(32, 32);
  const g = small.getContext("2d", { willReadFrequently: true });
  g.drawImage(canvas, cx - side / 2, cy - side / 2, side, side, 0, 0, 32, 32);
  const bits = g.getImageData(0, 0, 32, 32).data;
  const out = new Float32Array(64);
  for (let y = 0; y < 32; y++) for (let x = 0; x < 32; x++)
    if (bits[4 * (y * 32 + x) + 3] > 127) out[(y >> 2) * 8 + (x >> 2)] += 1 / 16;
  return out;
}
