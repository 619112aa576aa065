// models.js: the model manager, a dialog over model-cache.js: which models this browser keeps, their sizes, the
// storage used and the quota, delete one or all, and persistent storage on request. Mounted by app.js.

import { deleteAll, deleteModel, listModels, persist, storage } from "./model-cache.js";
import { $, MB } from "./ui.js";

const size = (b) => (b >= 2 ** 30 ? `${(b / 2 ** 30).toFixed(2)} GiB` : MB(b));
const TOOL_TITLES = { whisper: "Speech to text", llama: "Text generation", yolo: "Object detection",
  embed: "Semantic search", train: "Training", onnx: "ONNX" };

export function mountModelManager(app) {
  const dialog = $("#models-dialog");
  $("#models-open").addEventListener("click", async () => {
    dialog.showModal();
    await refresh();
  });
  $("#models-close").addEventListener("click", () => dialog.close());
  $("#models-delete-all").addEventListener("click", async () => {
    if (!confirmed($("#models-delete-all"), "Delete every model?")) return;
    await deleteAll();
    await refresh("Every downloaded model was deleted: each downloads again on next use.");
  });
  $("#models-persist").addEventListener("click", async () => {
    const granted = await persist();
    await refresh(granted ? "The browser will keep these models when it runs short of space."
      : "The browser declined to make this site's storage persistent (it decides by how you use the site).");
  });

  // A destructive button asks once: its first press turns it into "sure?", the second acts.
  function confirmed(button, question) {
    if (button.dataset.confirm) return true;
    const was = button.textContent;
    button.dataset.confirm = "1";
    button.textContent = question;
    setTimeout(() => { delete button.dataset.confirm; button.textContent = was; }, 4000);
    return false;
  }

  async function refresh(note = "") {
    const [models, store, app_] = await Promise.all([listModels(), storage(), appCache()]);
    const body = $("#models-list tbody");
    body.replaceChildren();
    for (const m of models) {
      const tr = body.insertRow();
      tr.dataset.model = m.model;
      const when = m.time ? new Date(m.time).toLocaleDateString(undefined, { dateStyle: "medium" }) : "";
      for (const v of [m.label, TOOL_TITLES[m.tool] || m.tool, size(m.bytes), String(m.files.length), when]) tr.insertCell().textContent = v;
      tr.cells[0].title = m.model;
      const del = document.createElement("button");
      Object.assign(del, { type: "button", className: "secondary small", textContent: "Delete" });
      del.setAttribute("aria-label", `Delete ${m.label}`);
      del.addEventListener("click", async () => {
        await deleteModel(m.model);
        await refresh(`Deleted ${m.label}; it downloads again on next use.`);
      });
      tr.insertCell().append(del);
    }
    if (!models.length) {
      const cell = body.insertRow().insertCell();
      cell.colSpan = 6;
      cell.className = "muted";
      cell.textContent = "No model is kept in this browser yet: each tool downloads its model on first use and keeps it here.";
    }
    const kept = models.reduce((s, m) => s + m.bytes, 0);
    $("#models-delete-all").disabled = !models.length;
    $("#storage-used").textContent = store.usage == null ? "The browser does not say how much storage this site uses."
      : `This site uses ${size(store.usage)} of the ${size(store.quota)} the browser allows it` +
        ` (models ${size(kept)}${app_ ? `, the app's offline copy ${size(app_)}` : ""}).`;
    const meter = $("#storage-meter");
    meter.hidden = store.usage == null || !store.quota;
    if (!meter.hidden) { meter.max = store.quota; meter.value = store.usage; }
    $("#models-persist").hidden = store.persisted !== false;
    $("#storage-persisted").textContent = store.persisted ? "Storage is persistent: the browser keeps these models under pressure."
      : store.persisted === false ? "The browser may clear these models when it runs short of space." : "";
    $("#models-note").textContent = note;
    dialog.dataset.json = JSON.stringify({ models, storage: store, app: app_ }); // what the e2e test reads
  }
  return { refresh };
}

// The bytes the service worker keeps for offline use (offline.js): its ember-app-* caches.
async function appCache() {
  if (!self.caches) return 0;
  let total = 0;
  for (const name of await caches.keys()) {
    if (!name.startsWith("ember-app-")) continue;
    for (const r of await (await caches.open(name)).matchAll()) total += Number(r.headers.get("content-length")) || 0;
  }
  return total;
}
