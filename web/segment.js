// segment.js: the segmentation tool's page code, Segment Anything over ember.js's segment(image, prompt, opts).
// Open an image, click points on the object (shift-click or right-click: background) or drag a box; the mask is
// drawn over the image. The worker embeds each image once (the expensive part) and every click after that runs
// the prompt encoder and mask decoder only; the stats line shows both times and the worker's encoder count.
// "Segment everything" runs the automatic mask generator; the mask and the cut-out export as PNG. No SAM weights
// are bundled: the shared model picker loads them by hub id, URL or dropped files. Mounted by app.js
// (mountSegmentTool); its tab, panel and picker slot are in index.html.

import { EmberError } from "./ember.js";
import { $, dropZone, notEmpty } from "./ui.js";

const KNOWN = [["Zigeng/SlimSAM-uniform-77", "SlimSAM-77, pruned SAM ViT-B: ~38 MB"],
  ["facebook/sam-vit-base", "SAM ViT-B: ~375 MB"]];
const MAX_PIXELS = 50_000_000; // ember's budget.max_pixels, checked before a canvas claims the memory
const TINT = [30, 144, 255];
const PALETTE = [[255, 56, 56], [72, 249, 10], [0, 194, 255], [255, 178, 29], [132, 56, 255], [0, 212, 187],
  [255, 55, 199], [207, 210, 49], [26, 147, 52], [100, 115, 255]];

const PANEL = `
<div class="card about">
  <p><strong>No SAM weights are bundled with this site.</strong> Load a Segment Anything checkpoint (a
  <code>SamModel</code> folder: <code>config.json</code>, <code>model.safetensors</code>, optionally
  <code>preprocessor_config.json</code>) from the Hugging Face hub, a URL or your disk:
  <strong>SlimSAM-77</strong> (<code>Zigeng/SlimSAM-uniform-77</code>, ~38 MB) or <strong>SAM ViT-B</strong>
  (<code>facebook/sam-vit-base</code>, ~375 MB). It is downloaded once and kept in this browser's cache.</p>
  <datalist id="seg-known">${KNOWN.map(([id, what]) => `<option value="${id}">${what}</option>`).join("")}</datalist>
</div>
<div class="card">
  <div class="drop" id="seg-image-drop" tabindex="0">
    <p><strong>Drop an image</strong> or <label class="linklike">choose one<input id="seg-image-file" type="file" accept="image/*" class="visually-hidden"></label></p>
    <p class="muted">Click the object to add a point, shift-click (or right-click) the background to exclude it,
      or drag a box around the object. The image is embedded once; each click then takes the decoder only.</p>
  </div>
  <div class="row center">
    <label>A click marks <select id="seg-mode"><option value="1">the object (+)</option><option value="0">background (−)</option></select></label>
    <label class="check"><input type="checkbox" id="seg-multi" checked> best of 3 masks</label>
    <button type="button" id="seg-everything" class="secondary">Segment everything</button>
    <button type="button" id="seg-clear" class="secondary">Clear prompts</button>
    <button type="button" id="seg-export-mask" class="secondary" disabled>Mask PNG</button>
    <button type="button" id="seg-export-cutout" class="secondary" disabled>Cut-out PNG</button>
    <button type="button" id="seg-cancel" class="secondary cancel" disabled>■ Cancel</button>
  </div>
</div>
<div class="card result">
  <div class="result-head"><h2>Mask</h2><span id="seg-stats" class="muted" aria-live="polite"></span></div>
  <canvas id="seg-canvas" width="640" height="400" role="img" aria-label="The image with the mask drawn over it"></canvas>
  <ol id="seg-masks" class="seg-masks"></ol>
</div>`;

export function mountSegmentTool(app) {
  const body = $("#panel-segment .segment-tool"), picker = app.picker("segment");
  if (!body || !picker) return;
  body.innerHTML = PANEL;
  const ui = { bitmap: null, pixels: null, points: [], box: null, drag: null, result: null, pick: 0 };
  const canvas = $("#seg-canvas");

  // ---------------------------------------------------------------- the model (the shared picker)

  // a SamModel folder: config.json + model.safetensors (+ preprocessor_config.json), by id, URL or its files
  $(".hub", picker).placeholder = "Zigeng/SlimSAM-uniform-77 (~38 MB) or facebook/sam-vit-base (~375 MB)";
  $(".hub", picker).setAttribute("list", "seg-known");
  $(".url", picker).placeholder = "https://…/resolve/main (a SamModel folder)";
  $(".files", picker).accept = ".json,.safetensors";
  $(".model-status", picker).textContent = "No model loaded: no SAM weights are bundled, choose a checkpoint.";
  picker.addEventListener("modelloaded", ({ detail: info }) => { // "… on CPU. 93 MiB · windowed + global attention"
    const status = $(".model-status", picker);
    status.textContent += ` ${(info.bytes / 2 ** 20).toFixed(0)} MiB · ${info.encoder}.`;
    status.dataset.json = JSON.stringify(info);
  });
  // a source to load from: a bundled demo never (none exist), else a non-empty id, URL or file list
  const hasSource = () => {
    const kind = $(".kind", picker).value;
    return kind === "hub" ? !!$(".hub", picker).value.trim() : kind === "url" ? !!$(".url", picker).value.trim()
      : kind === "file" ? $(".files", picker).files.length > 0 : !!$(".demo", picker).value;
  };

  // ---------------------------------------------------------------- the image

  // The browser decodes the image (as the detection tool does) and Python gets its RGBA pixels.
  async function openImage(file) {
    let bitmap;
    try {
      notEmpty(file, "image");
      try {
        bitmap = await createImageBitmap(file, { imageOrientation: "from-image", colorSpaceConversion: "none", premultiplyAlpha: "none" });
      } catch (e) {
        throw new EmberError("unsupported_file", `ember: ${file.name || "image"} is not an image this browser can read`);
      }
      if (bitmap.width * bitmap.height > MAX_PIXELS)
        throw new EmberError("unsupported_file", `ember: ${file.name || "image"} is ${bitmap.width}x${bitmap.height} = ` +
          `${(bitmap.width * bitmap.height).toLocaleString("en")} pixels, over the limit of ${MAX_PIXELS.toLocaleString("en")} (max_pixels)`);
    } catch (e) {
      app.showError(e, "segment");
      return;
    }
    const c = new OffscreenCanvas(bitmap.width, bitmap.height);
    const g = c.getContext("2d", { colorSpace: "srgb", willReadFrequently: true });
    g.drawImage(bitmap, 0, 0);
    Object.assign(ui, { bitmap, pixels: g.getImageData(0, 0, bitmap.width, bitmap.height), points: [], box: null,
      result: null, pick: 0 });
    delete canvas.dataset.json;
    $("#seg-masks").replaceChildren();
    exports(false);
    canvas.width = bitmap.width;
    canvas.height = bitmap.height;
    $("#seg-stats").textContent = hasSource() ? "Click the object." : "Choose a model above, then click the object.";
    draw();
  }
  dropZone($("#seg-image-drop"), $("#seg-image-file"), openImage);

  // ---------------------------------------------------------------- prompts from the mouse

  const toImage = (e) => {
    const r = canvas.getBoundingClientRect();
    return [Math.round(((e.clientX - r.left) * canvas.width) / r.width), Math.round(((e.clientY - r.top) * canvas.height) / r.height)];
  };
  canvas.addEventListener("contextmenu", (e) => e.preventDefault());
  canvas.addEventListener("pointerdown", (e) => {
    if (!ui.pixels) return;
    ui.drag = { start: toImage(e), button: e.button, shift: e.shiftKey };
    canvas.setPointerCapture(e.pointerId);
  });
  canvas.addEventListener("pointermove", (e) => {
    if (!ui.drag) return;
    const [x, y] = toImage(e), [x0, y0] = ui.drag.start;
    if (Math.abs(x - x0) + Math.abs(y - y0) > 6 * canvas.width / canvas.getBoundingClientRect().width) {
      ui.box = clampBox([Math.min(x, x0), Math.min(y, y0), Math.max(x, x0), Math.max(y, y0)]);
      ui.drag.moved = true;
      draw();
    }
  });
  canvas.addEventListener("pointerup", (e) => {
    const d = ui.drag;
    ui.drag = null;
    if (!d) return;
    if (!d.moved) {
      const negative = d.button === 2 || d.shift || $("#seg-mode").value === "0";
      ui.points.push([...clampPoint(d.start), negative ? 0 : 1]);
    }
    segment();
  });
  const clampPoint = ([x, y]) => [Math.min(Math.max(x, 0), canvas.width - 1), Math.min(Math.max(y, 0), canvas.height - 1)];
  const clampBox = ([x0, y0, x1, y1]) => [...clampPoint([x0, y0]), ...clampPoint([x1, y1])];

  $("#seg-clear").addEventListener("click", () => {
    Object.assign(ui, { points: [], box: null, result: null, pick: 0 });
    delete canvas.dataset.json;
    $("#seg-masks").replaceChildren();
    exports(false);
    draw();
  });
  $("#seg-multi").addEventListener("change", () => { if (ui.points.length || ui.box) segment(); });

  // ---------------------------------------------------------------- runs

  // One click's run (or "everything") as the tool's job: the shared guard refuses it while another tool runs, the
  // picker's model loads first if it is not loaded on this device, Cancel is live throughout.
  async function segment(everything = false) {
    const ember = app.ember();
    if (!ember || !ui.pixels || (!everything && !ui.points.length && !ui.box)) return;
    if (!hasSource()) { $("#seg-stats").textContent = "Choose a model above (a hub id, a URL or its files) first."; draw(); return; }
    $("#seg-stats").textContent = everything ? "Segmenting everything…" : "Segmenting…";
    const prompt = everything ? {} : { points: ui.points.map((p) => [...p]), box: ui.box && [...ui.box] };
    try {
      const r = await app.run("segment", { label: everything ? "Segmenting everything" : "Segmenting", cancel: $("#seg-cancel") },
        async () => {
          await app.ensureModel("segment");
          return ember.segment(ui.pixels, prompt, everything ? { everything: true, points_per_side: 16 }
            : { multimask: $("#seg-multi").checked });
        });
      if (r.stopped === "cancelled") { $("#seg-stats").textContent = "Cancelled."; return; }
      ui.result = { ...r, everything };
      ui.pick = everything ? 0 : r.best;
      showResult(prompt);
    } catch (e) {
      $("#seg-stats").textContent = e.code === "cancelled" ? "Cancelled." : "";
      app.showError(e, "segment");
    }
  }
  $("#seg-everything").addEventListener("click", () => {
    Object.assign(ui, { points: [], box: null });
    segment(true);
  });
  $("#seg-cancel").addEventListener("click", () => app.cancel());

  function showResult(prompt) {
    const r = ui.result;
    const enc = r.encode_ms ? `image embedded in ${fmtMs(r.encode_ms)}` : "embedding reused";
    $("#seg-stats").textContent = (r.everything ? `${r.count} masks in ${fmtMs(r.ms)}` : `${fmtMs(r.ms)} per click`) +
      ` · ${enc} · encoder runs ${r.encoder_runs}, decoder runs ${r.decoder_runs} · ${app.ember().device.toUpperCase()}`;
    const list = $("#seg-masks");
    list.replaceChildren();
    r.scores.forEach((s, i) => {
      const li = document.createElement("li");
      const b = document.createElement("button");
      b.type = "button";
      b.className = "secondary small" + (i === ui.pick ? " picked" : "");
      b.textContent = `${r.everything ? "mask" : "mask " + (i + 1)} · IoU ${s.toFixed(3)} · ${r.areas[i].toLocaleString("en")} px`;
      b.addEventListener("click", () => { ui.pick = i; showResult(prompt); });
      li.append(b);
      list.append(li);
    });
    canvas.dataset.json = JSON.stringify({ prompt, scores: r.scores, boxes: r.boxes, areas: r.areas, best: r.best,
      pick: ui.pick, count: r.count, width: r.width, height: r.height, ms: r.ms, encode_ms: r.encode_ms,
      encoder_runs: r.encoder_runs, decoder_runs: r.decoder_runs, everything: r.everything,
      mask: r.everything ? null : rle(maskOf(ui.pick), r.width, r.height) });
    exports(!r.everything || r.count > 0);
    draw();
  }

  const maskOf = (i) => ui.result.masks.subarray(i * ui.result.width * ui.result.height, (i + 1) * ui.result.width * ui.result.height);

  // ---------------------------------------------------------------- drawing

  function draw() {
    if (!ui.bitmap) return;
    const g = canvas.getContext("2d");
    g.drawImage(ui.bitmap, 0, 0);
    const r = ui.result;
    if (r && r.width === canvas.width && r.height === canvas.height) {
      const over = new ImageData(r.width, r.height);
      const px = over.data;
      if (r.everything) {
        for (let p = 0; p < r.labels.length; p++) {
          const k = r.labels[p];
          if (!k) continue;
          const c = PALETTE[(k - 1) % PALETTE.length];
          px[4 * p] = c[0]; px[4 * p + 1] = c[1]; px[4 * p + 2] = c[2]; px[4 * p + 3] = 120;
        }
      } else {
        const m = maskOf(ui.pick);
        for (let p = 0; p < m.length; p++) if (m[p]) { px[4 * p] = TINT[0]; px[4 * p + 1] = TINT[1]; px[4 * p + 2] = TINT[2]; px[4 * p + 3] = 130; }
      }
      const layer = new OffscreenCanvas(r.width, r.height);
      layer.getContext("2d").putImageData(over, 0, 0);
      g.drawImage(layer, 0, 0);
    }
    const s = Math.max(3, Math.round(canvas.width / 160));
    if (ui.box) {
      g.strokeStyle = "#facc15";
      g.lineWidth = Math.max(2, s / 2);
      g.strokeRect(ui.box[0], ui.box[1], ui.box[2] - ui.box[0], ui.box[3] - ui.box[1]);
    }
    for (const [x, y, label] of ui.points) {
      g.fillStyle = label ? "#16a34a" : "#dc2626";
      g.strokeStyle = "#fff";
      g.lineWidth = Math.max(1, s / 3);
      g.beginPath();
      g.arc(x, y, s, 0, 2 * Math.PI);
      g.fill();
      g.stroke();
    }
  }

  // ---------------------------------------------------------------- export

  function exports(on) {
    $("#seg-export-mask").disabled = !on;
    $("#seg-export-cutout").disabled = !on;
  }

  // the picked mask ("everything": all of them) as a boolean per pixel
  function chosen() {
    const r = ui.result;
    if (r.everything) return Uint8Array.from(r.labels, (k) => (k ? 1 : 0));
    return maskOf(ui.pick);
  }

  async function savePNG(name, fill) {
    const r = ui.result;
    const img = new ImageData(r.width, r.height);
    fill(img.data, chosen());
    const c = new OffscreenCanvas(r.width, r.height);
    c.getContext("2d").putImageData(img, 0, 0);
    const blob = await c.convertToBlob({ type: "image/png" });
    const a = Object.assign(document.createElement("a"), { href: URL.createObjectURL(blob), download: name });
    a.click();
    setTimeout(() => URL.revokeObjectURL(a.href), 10_000);
  }
  $("#seg-export-mask").addEventListener("click", () => savePNG("mask.png", (px, m) => {
    for (let p = 0; p < m.length; p++) { const v = m[p] ? 255 : 0; px[4 * p] = px[4 * p + 1] = px[4 * p + 2] = v; px[4 * p + 3] = 255; }
  }));
  $("#seg-export-cutout").addEventListener("click", () => savePNG("cutout.png", (px, m) => {
    const src = ui.pixels.data;
    for (let p = 0; p < m.length; p++) {
      px[4 * p] = src[4 * p]; px[4 * p + 1] = src[4 * p + 1]; px[4 * p + 2] = src[4 * p + 2]; px[4 * p + 3] = m[p] ? 255 : 0;
    }
  }));
}

const fmtMs = (ms) => (ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(1)} s`);

// COCO's uncompressed RLE of a mask (column-major runs, zeros first), as `ember segment` and the tests read it
function rle(mask, w, h) {
  const counts = [];
  let run = 0, cur = 0;
  for (let x = 0; x < w; x++) for (let y = 0; y < h; y++) {
    const v = mask[y * w + x] ? 1 : 0;
    if (v !== cur) { counts.push(run); run = 0; cur = v; }
    run++;
  }
  counts.push(run);
  return { size: [h, w], counts };
}
