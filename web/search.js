// search.js: the semantic-search tool. Paste or drop a text; it is split into passages, each is
// embedded in the page (all-MiniLM-L6-v2 through ember.js's embed(), in the worker: WebGPU or CPU), and the
// query ranks them by cosine as you type. Uses only the public JS API:
//
//   import { mountSearch } from "./search.js";
//   mountSearch(document.querySelector("#search"), ember);     // ember: a createEmber() instance (or a getter)
//
// In the app (index.html) it is a tab: app.js calls mountSearchTool, which shares the app's runtime and its one
// job guard (guard.js: no search while another tool runs, and none of theirs while it indexes).

import { exclusive } from "./guard.js";

const BATCH = 64;        // passages per embed request: progress between batches, bounded messages
const HUB_ID = "sentence-transformers/all-MiniLM-L6-v2";

/** Rank `vectors` (unit Float32Arrays) against `query` by dot product (= cosine); -> [{index, score}]. */
export function rank(query, vectors, top = 10) {
  const scored = vectors.map((v, index) => {
    let s = 0;
    for (let i = 0; i < v.length; i++) s += v[i] * query[i];
    return { index, score: s };
  });
  return scored.sort((a, b) => b.score - a.score).slice(0, top);
}

/** The tool's UI in `root`. opts.model: the source field's start value ("demo" = the build's bundled MiniLM,
 *  a hub id or a URL); opts.run(label, fn, cancelButton): runs a job of the tool (default: guard.js's exclusive,
 *  the app's run with its progress bar); opts.fail(error). */
export function mountSearch(root, ember, { model, run, fail } = {}) {
  run = run || ((label, fn, cancel) => exclusive("embed", `Semantic search (${modelName()})`, async () => {
    if (cancel) cancel.disabled = false;
    try { return await fn(); } finally { if (cancel) cancel.disabled = true; }
  }));
  const em = typeof ember === "function" ? ember : () => ember;
  root.innerHTML = `
    <div class="row">
      <label class="grow">Model <input class="search-model" size="40" spellcheck="false" autocomplete="off"
        placeholder="empty: the bundled MiniLM; or owner/name, https://…/resolve/main"></label>
      <label>or files <input class="search-files" type="file" multiple></label>
      <button type="button" class="search-load secondary">Load</button>
      <button type="button" class="search-cancel secondary" disabled>■ Cancel</button>
    </div>
    <p class="search-status muted" aria-live="polite"></p>
    <textarea class="search-doc" rows="10" aria-label="The text to search" placeholder="Paste or drop a text here: each paragraph (long ones cut at sentence ends) becomes a passage"></textarea>
    <div class="row"><button type="button" class="search-index">Index passages</button>
      <span class="search-count muted" aria-live="polite"></span></div>
    <input class="search-query" type="search" aria-label="Search the passages" placeholder="Ask something: passages are ranked as you type" disabled>
    <ol class="search-results" aria-live="polite"></ol>`;
  const $ = (s) => root.querySelector(s);
  const state = { passages: [], vectors: [], query: null, loaded: false, pending: null };
  const status = (t) => { $(".search-status").textContent = t; };
  const field = $(".search-model");
  field.value = model || "";
  // the model by the name people know: the bundled one's, a hub id, a URL's last part, the files chosen
  function modelName() {
    const files = $(".search-files").files, v = field.value.trim();
    if (files && files.length) return Array.from(files, (f) => f.name).join(", ");
    return !v || v === "demo" ? "all-MiniLM-L6-v2" : v.replace(/\/+$/, "").split("/").slice(/^https?:/.test(v) ? -1 : 0).join("/");
  }

  async function source() {  // files, else the field, else the build's bundled MiniLM (or the hub's without one)
    const files = $(".search-files").files;
    if (files && files.length) return files;
    if (!field.value.trim()) field.value = (await em().manifest()).embed ? "demo" : HUB_ID;
    return field.value.trim();
  }

  async function load() {
    const src = await source();
    return run("Loading", async () => {
      status(`Loading ${modelName()}…`);
      try {
        const info = await em().loadModel("embed", src);
        state.loaded = true;
        status(`Loaded ${modelName()}: ${(info.parameters / 1e6).toFixed(1)} M parameters on ${info.device === "webgpu" ? "WebGPU" : "the CPU"}`);
      } catch (e) {
        status(e.code === "cancelled" ? `Loading ${modelName()} was cancelled; nothing of it was kept.` : "Not loaded.");
        throw e;
      }
    }, $(".search-cancel"));
  }

  async function index() {
    const doc = $(".search-doc");
    if (!doc.value.trim()) { // nothing to index: say so where the text goes
      $(".search-count").textContent = "Paste or drop a text above first: there is nothing to index yet.";
      doc.focus();
      return;
    }
    await run("Indexing", async () => {
      if (!state.loaded) await load();
      const passages = await em().passages(doc.value);
      const vectors = [];
      const t0 = performance.now();
      for (let i = 0; i < passages.length; i += BATCH) {
        vectors.push(...(await em().embed(passages.slice(i, i + BATCH))));
        $(".search-count").textContent = `${vectors.length} / ${passages.length} passages embedded`;
      }
      finishIndex(passages, vectors, t0);
    }, $(".search-cancel"));
    if ($(".search-query").value) await search();
  }

  function finishIndex(passages, vectors, t0) {
    const s = (performance.now() - t0) / 1000;
    Object.assign(state, { passages, vectors });
    $(".search-count").textContent = `${passages.length} passages embedded in ${s.toFixed(1)} s` +
      (passages.length ? ` (${(passages.length / s).toFixed(1)} passages/s)` : "");
    $(".search-query").disabled = !passages.length;
  }

  async function search() {  // live: a query typed while one runs waits, only the latest one runs
    const q = $(".search-query").value.trim();
    if (state.pending) { state.pending.next = q; return; }
    state.pending = { next: null };
    try {
      let text = q;
      while (text !== null) {
        const out = $(".search-results");
        out.replaceChildren();
        delete out.dataset.json;
        if (text && state.vectors.length) {
          const [qv] = await run("Searching", () => em().embed([text]));
          const ranking = rank(qv, state.vectors);
          for (const { index, score } of ranking) {
            const li = document.createElement("li");
            const b = document.createElement("b");
            b.textContent = score.toFixed(3);
            li.append(b, " ", state.passages[index]);
            out.append(li);
          }
          state.query = qv;
          out.dataset.json = JSON.stringify({ query: text, ranking }); // what the e2e test reads
        }
        text = state.pending.next;
        state.pending.next = null;
      }
    } finally { state.pending = null; }
  }

  const onError = fail || ((e) => status(String(e.message || e)));
  $(".search-load").addEventListener("click", () => load().catch(onError));
  $(".search-cancel").addEventListener("click", () => em().cancel());
  $(".search-index").addEventListener("click", () => index().catch(onError));
  $(".search-query").addEventListener("input", () => search().catch(onError));
  const doc = $(".search-doc");
  doc.addEventListener("dragover", (e) => e.preventDefault());
  doc.addEventListener("drop", async (e) => {
    e.preventDefault();
    const f = e.dataTransfer.files[0];
    if (f) { doc.value = await f.text(); index().catch(onError); }
  });
  const reset = () => { state.loaded = false; status("Not loaded: the runtime restarted; the model loads again on next use."); };
  return { load, index, search, state, reset, modelName };
}

/** The app's tab (index.html's #tab-search / #panel-search). app: app.js's context (its runtime, job runner
 *  with the progress bar and the one guard, messages); tabs.js opens the tab (#search too). */
export function mountSearchTool(app) {
  const panel = document.querySelector("#panel-search");
  if (!panel) return null;
  const tool = mountSearch(panel.querySelector(".search-tool"), app.ember, {
    run: (label, fn, cancel) => app.run("embed", { label, cancel }, fn),
    fail: (e) => app.showError(e, "embed") });
  app.onRestart(tool.reset);
  app.nameModel("embed", tool.modelName);
  window.emberSearch = tool; // the page's tests and the console reach the tool's state here
  return tool;
}
