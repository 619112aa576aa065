// detect.js: the object-detection tool's page code (YOLO through ember.js's detect()): an image, a file or a
// webcam frame in, boxes drawn with labels that never cover one another (a segmentation model's masks under
// them), a table, .json / .csv out; the confidence slider applies to the image shown. Mounted by app.js (mountDetectTool).

import { EmberError } from "./ember.js";
import { $, download, dropZone, notEmpty } from "./ui.js";

const COLORS = ["#15803d", "#dc2626", "#2563eb", "#b45309", "#9333ea", "#0f766e"]; // white text reads on each
const MAX_PIXELS = 50_000_000;

// The browser decodes the image and Python gets its RGBA pixels: Chromium's JPEG decoder gives the same
// pixels as native Pillow's libjpeg-turbo (bus.jpg, zidane.jpg: max difference 0), which Pyodide's
// Pillow 10.2 does not (bus.jpg differs by up to 46 levels and scores 0.6602 against the CLI's 0.6615).
// EXIF orientation is applied as Pillow's exif_transpose does; no colour-profile conversion, no
// premultiplied alpha (transparent pixels keep no colour in a canvas: such PNGs can differ from the CLI).
async function decodeImage(file) {
  notEmpty(file, "image");
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

// Label boxes placed one by one: above the box, else inside its top, else moved down until it overlaps none.
function placeLabels(dets, measure, W, H) {
  const placed = [];
  const hits = (r) => placed.some((q) => r.x < q.x + q.w && q.x < r.x + r.w && r.y < q.y + q.h && q.y < r.y + r.h);
  return dets.map((d) => {
    const { w, h } = measure(d), [x1, y1, , y2] = d.box;
    const x = Math.max(0, Math.min(x1, W - w));
    let r = null;
    for (const y of [y1 - h, y1]) {
      const c = { x, y: Math.max(0, Math.min(y, H - h)), w, h };
      if (!hits(c)) { r = c; break; }
    }
    for (let y = y1; !r && y <= Math.max(y1, y2); y += h) { // down the box's side
      const c = { x, y: Math.min(y, H - h), w, h };
      if (!hits(c)) r = c;
    }
    r = r || { x, y: Math.max(0, Math.min(y1 - h, H - h)), w, h }; // crowded: overlap rather than drop it
    placed.push(r);
    return r;
  });
}

// A segmentation model's masks (COCO's uncompressed RLE: column-major runs, zeros first, as `ember yolo --json`),
// each tinted in its box's colour on one layer under the boxes and labels.
function paintMasks(g, dets, W, H) {
  if (!dets.some((d) => d.mask)) return;
  const over = new ImageData(W, H), px = over.data;
  for (const d of dets) {
    if (!d.mask || d.mask.size[0] !== H || d.mask.size[1] !== W) continue;
    const hex = COLORS[d.class % COLORS.length], c = [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16));
    let p = 0;
    d.mask.counts.forEach((n, k) => {
      if (k % 2) for (let j = p; j < p + n; j++) {
        const o = 4 * ((j % H) * W + Math.floor(j / H));
        px[o] = c[0]; px[o + 1] = c[1]; px[o + 2] = c[2]; px[o + 3] = 110;
      }
      p += n;
    });
  }
  const layer = new OffscreenCanvas(W, H);
  layer.getContext("2d").putImageData(over, 0, 0);
  g.drawImage(layer, 0, 0);
}

const CSV_HEAD = "index,class,label,score,x1,y1,x2,y2";
const csv = (dets) => [CSV_HEAD, ...dets.map((d, i) => [i + 1, d.class, JSON.stringify(d.label), d.score, ...d.box].join(","))].join("\n") + "\n";

export function mountDetectTool(app) {
  const picker = app.picker("yolo");
  // one weights file: an Ultralytics checkpoint, an export or ember's conversion
  $(".hub", picker).placeholder = "owner/name or owner/name/best.pt";
  $(".url", picker).placeholder = "https://…/yolov8n.pt (.pt, .onnx or .safetensors)";
  $(".files", picker).accept = ".pt,.onnx,.safetensors";
  $(".files", picker).multiple = false;
  picker.addEventListener("modelloaded", ({ detail: info }) => { // "Detects 2 classes: Normal, Fall." (a pose model: keypoints)
    const n = info.classes.length, names = info.classes.slice(0, 8).join(", ") + (n > 8 ? ", …" : "");
    $(".model-status", picker).textContent += ` ${info.task === "pose" ? "Pose model (keypoints); detects" : "Detects"} ${n} class${n === 1 ? "" : "es"}: ${names}.`;
  });
  $("#conf").addEventListener("input", (e) => { $("#conf-out").value = e.target.value; });
  const shown = { file: null, bitmap: null, dets: null, conf: null }; // the image on the canvas and its run

  function clear() {
    delete $("#detections").dataset.json;
    delete $("#detections").dataset.stopped;
    $("#detections tbody").replaceChildren();
    $("#yolo-canvas").hidden = true; // no empty canvas where an image failed
    $("#yolo-stats").textContent = "";
    for (const b of ["#yolo-json", "#yolo-csv"]) $(b).disabled = true;
  }

  function show(dets, conf) {
    const list = dets.filter((d) => d.score >= conf);
    $("#detections").dataset.json = JSON.stringify(list); // the array; how it ended is beside it
    $("#detections").dataset.stopped = dets.stopped;
    draw(shown.bitmap, list);
    for (const b of ["#yolo-json", "#yolo-csv"]) $(b).disabled = false;
    $("#yolo-stats").textContent = `${list.length} detection${list.length === 1 ? "" : "s"} at confidence ${conf} · ` +
      `${Math.round(dets.ms).toLocaleString("en")} ms per image on ${app.ember().device.toUpperCase()} · input ${dets.input[1]}×${dets.input[0]}`;
  }

  async function detectImage(file, conf = Number($("#conf").value)) {
    if (app.busy()) return app.showError(new EmberError("busy", `ember: ${app.busy().label} is still running; wait for it to finish or cancel it, then try again`));
    clear();
    try {
      const dets = await app.run("yolo", { label: "Detecting", cancel: $("#yolo-cancel") }, async () => {
        const { bitmap, pixels } = await decodeImage(file);
        await app.ensureModel("yolo");
        $("#yolo-stats").textContent = "Detecting…";
        const r = await app.ember().detect(pixels, { conf });
        Object.assign(shown, { file, bitmap, dets: r, conf });
        return r;
      });
      if (dets.stopped === "cancelled") return cancelled();
      show(dets, conf);
    } catch (e) {
      if (e.code === "cancelled") return cancelled();
      clear();
      app.showError(e, "yolo");
    }
  }

  function cancelled() {
    $("#detections").dataset.json = "[]";
    $("#detections").dataset.stopped = "cancelled";
    $("#yolo-stats").textContent = "Cancelled.";
  }

  // The slider applies to the image shown: a higher threshold keeps the boxes scoring above it (greedy NMS keeps
  // exactly those: every box that could suppress one scores higher still), a lower one runs the model again.
  $("#conf").addEventListener("change", () => {
    const conf = Number($("#conf").value);
    if (!shown.dets || shown.dets.stopped !== "done") return;
    if (conf >= shown.conf) show(shown.dets, conf);
    else detectImage(shown.file, conf);
  });

  function draw(bitmap, dets) {
    const canvas = $("#yolo-canvas");
    canvas.hidden = false;
    canvas.width = bitmap.width;
    canvas.height = bitmap.height;
    const g = canvas.getContext("2d");
    g.drawImage(bitmap, 0, 0);
    paintMasks(g, dets, bitmap.width, bitmap.height);
    const lw = Math.max(2, Math.round(bitmap.width / 320));
    g.font = `600 ${lw * 7}px system-ui, sans-serif`;
    const text = (d) => `${d.label} ${(d.score * 100).toFixed(0)}%`;
    const labels = placeLabels(dets, (d) => ({ w: g.measureText(text(d)).width + lw * 4, h: lw * 10 }), bitmap.width, bitmap.height);
    canvas.dataset.labels = JSON.stringify(labels); // where each label went (the e2e test checks none overlap)
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
    });
    dets.forEach((d, i) => { // labels last: no box line crosses one
      const r = labels[i], c = COLORS[d.class % COLORS.length];
      g.fillStyle = c;
      g.fillRect(r.x, r.y, r.w, r.h);
      g.fillStyle = "#fff";
      g.fillText(text(d), r.x + lw * 2, r.y + r.h - lw * 2.5);
      const tr = body.insertRow();
      for (const v of [i + 1, d.label, d.score.toFixed(3), d.box.map((b) => b.toFixed(1)).join(", ")]) tr.insertCell().textContent = v;
      tr.cells[1].style.setProperty("--c", c);
      tr.cells[1].className = "swatch";
    });
    if (!dets.length) {
      const cell = body.insertRow().insertCell();
      cell.colSpan = 4;
      cell.className = "muted";
      cell.textContent = "No detections above the confidence threshold.";
    }
  }
  dropZone($("#image-drop"), $("#image-file"), (f) => detectImage(f));
  $("#yolo-cancel").addEventListener("click", () => app.cancel());
  $("#yolo-json").addEventListener("click", () => download("detections.json", $("#detections").dataset.json + "\n", "application/json"));
  $("#yolo-csv").addEventListener("click", () => download("detections.csv", csv(JSON.parse($("#detections").dataset.json)), "text/csv"));

  // ---------------------------------------------------------------- the webcam: on, capture, off

  const video = $("#video");
  function webcamOff() {
    if (video.srcObject) video.srcObject.getTracks().forEach((t) => t.stop());
    video.srcObject = null;
    video.hidden = true;
    $("#webcam").textContent = "Webcam";
    $("#webcam-off").hidden = true;
  }
  $("#webcam").addEventListener("click", async () => {
    try {
      if (!video.srcObject) {
        video.srcObject = await navigator.mediaDevices.getUserMedia({ video: true });
        video.hidden = false;
        await video.play();
        $("#webcam").textContent = "Capture frame";
        $("#webcam-off").hidden = false;
        return;
      }
      const c = new OffscreenCanvas(video.videoWidth, video.videoHeight);
      c.getContext("2d").drawImage(video, 0, 0);
      detectImage(new File([await c.convertToBlob({ type: "image/png" })], "webcam frame.png", { type: "image/png" }));
    } catch (e) {
      webcamOff();
      app.showMessage(`Camera unavailable: ${e.message}. Allow camera access or choose an image.`);
    }
  });
  $("#webcam-off").addEventListener("click", webcamOff);
  app.tabs && document.querySelector("nav.tabs").addEventListener("tabchange", (e) => { if (e.detail.name !== "yolo") webcamOff(); });
}
