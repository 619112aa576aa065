// search.js: the semantic-search tool. Paste or drop a text; it is split into passages, each is
// embedded in the page (all-MiniLM-L6-v2 through ember.js's embed(), in the worker: WebGPU or CPU), and the
// query ranks them by cosine as you type. Uses only the public JS API:
//
//   import { mountSearch } from "./search.js";
//   mountSearch(document.querySelector("#search"), ember);     // ember: a createEmber() instance (or a getter)
//
// In the app (index.html) it is the fourth tab: app.js calls mountSearchTool, which shares the app's runtime.

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
 *  a hub id or a URL); opts.run(fn): wraps each model call (the app's busy state); opts.fail(error). */
export function mountSearch(root, ember, { model, run = (fn) => fn(), fail } = {}) {
  const em = typeof ember === "function" ? ember : () => ember;
  root.innerHTML = `
    <div class="row">
      <label class="grow">Model <input class="search-model" size="40" spellcheck="false" autocomplete="off"
        placeholder="empty: the bundled MiniLM; or owner/name, https://…/resolve/main"></label>
      <label>or files <input class="search-files" type="file" multiple></label>
      <button type="button" class="search-load secondary">Load</button>
    </div>
    <p class="search-status muted" aria-live="polite"></p>
    <textarea class="search-doc" rows="10" placeholder="Paste or drop a text here: each paragraph (long ones cut at sentence ends) becomes a passage"></textarea>
    <div class="row"><button type="button" class="search-index">Index passages</button>
      <span class="search-count muted" aria-live="polite"></span></div>
    <input class="search-query" type="search" placeholder="Ask something: passages are ranked as you type" disabled>
    <ol class="search-results" aria-live="polite"></ol>`;
  const $ = (s) => root.querySelector(s);
  const state = { passages: [], vectors: [], query: null, loaded: false, pending: null };
  const status = (t) => { $(".search-status").textContent = t; };
  const field = $(".search-model");
  field.value = model || "";

  async function source() {  // files, else the field, else the build's bundled MiniLM (or the hub's without one)
    const files = $(".search-files").files;
    if (files && files.length) return files;
    if (!field.value.trim()) field.value = (await em().manifest()).embed ? "demo" : HUB_ID;
    return field.value.trim();
  }

  async function load() {
    status("Loading the model…");
    const src = await source();
    const info = await run(() => em().loadModel("embed", src));
    state.loaded = true;
    status(`Loaded: ${(info.parameters / 1e6).toFixed(1)} M parameters on ${info.device === "webgpu" ? "WebGPU" : "the CPU"}`);
  }

  async function index() {
    if (!state.loaded) await load();
    const passages = await em().passages($(".search-doc").value);
    const vectors = [];
    const t0 = performance.now();
    for (let i = 0; i < passages.length; i += BATCH) {
      vectors.push(...(await run(() => em().embed(passages.slice(i, i + BATCH)))));
      $(".search-count").textContent = `${vectors.length} / ${passages.length} passages embedded`;
    }
    const s = (performance.now() - t0) / 1000;
    Object.assign(state, { passages, vectors });
    $(".search-count").textContent = `${passages.length} passages embedded in ${s.toFixed(1)} s` +
      (passages.length ? ` (${(passages.length / s).toFixed(1)} passages/s)` : "");
    $(".search-query").disabled = !passages.length;
    if ($(".search-query").value) await search();
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
          const [qv] = await run(() => em().embed([text]));
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
  $(".search-index").addEventListener("click", () => index().catch(onError));
  $(".search-query").addEventListener("input", () => search().catch(onError));
  const doc = $(".search-doc");
  doc.addEventListener("dragover", (e) => e.preventDefault());
  doc.addEventListener("drop", async (e) => {
    e.preventDefault();
    const f = e.dataTransfer.files[0];
    if (f) { doc.value = await f.text(); index().catch(onError); }
  });
  return { load, index, search, state };
}

/** The app's fourth tab (index.html's #tab-search / #panel-search). app: {ember: () => instance, withBusy,
 *  showError}. The tab joins app.js's tabs: opening it hides the others' panels, any other tab hides it. */
export function mountSearchTool(app) {
  const tab = document.querySelector("#tab-search"), panel = document.querySelector("#panel-search");
  if (!tab || !panel) return null;
  const nav = tab.closest("nav");
  const show = (on) => {
    tab.setAttribute("aria-selected", String(on));
    tab.tabIndex = on ? 0 : -1;
    panel.hidden = !on;
  };
  tab.addEventListener("click", () => {
    for (const t of nav.querySelectorAll('[role="tab"]')) t.setAttribute("aria-selected", "false");
    for (const p of document.querySelectorAll('[role="tabpanel"]')) p.hidden = true;
    show(true);
    history.replaceState(null, "", "#search");
  });
  nav.addEventListener("click", (e) => { const t = e.target.closest('[role="tab"]'); if (t && t !== tab) show(false); });
  const tool = mountSearch(panel.querySelector(".search-tool"), app.ember, {
    run: app.withBusy, fail: (e) => app.showError(e) });
  if (location.hash === "#search") tab.click();
  window.emberSearch = tool; // the page's tests and the console reach the tool's state here
  return tool;
}
