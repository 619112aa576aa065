// search.js: the semantic-search tool (issue 19). Paste or drop a text; it is split into passages, each is
// embedded in the page (all-MiniLM-L6-v2 through ember.js's embed(), in the worker: WebGPU or CPU), and the
// query ranks them by cosine as you type. Uses only the public JS API:
//
//   import { mountSearch } from "./search.js";
//   mountSearch(document.querySelector("#search"), ember);     // ember: a createEmber() instance

const BATCH = 64;        // passages per embed request: progress between batches, bounded messages

/** Rank `vectors` (unit Float32Arrays) against `query` by dot product (= cosine); -> [{index, score}]. */
export function rank(query, vectors, top = 10) {
  const scored = vectors.map((v, index) => {
    let s = 0;
    for (let i = 0; i < v.length; i++) s += v[i] * query[i];
    return { index, score: s };
  });
  return scored.sort((a, b) => b.score - a.score).slice(0, top);
}

export function mountSearch(root, ember, { model = "sentence-transformers/all-MiniLM-L6-v2" } = {}) {
  root.innerHTML = `
    <label>Model <input class="search-model" value="${model}" size="40"> or files
      <input class="search-files" type="file" multiple></label> <button class="search-load">Load</button>
    <span class="search-status muted"></span>
    <textarea class="search-doc" rows="10" placeholder="Paste or drop a text here"></textarea>
    <button class="search-index">Index passages</button> <span class="search-count muted"></span>
    <input class="search-query" type="search" placeholder="Ask something" disabled>
    <ol class="search-results" aria-live="polite"></ol>`;
  const $ = (s) => root.querySelector(s);
  const state = { passages: [], vectors: [], loaded: false, pending: null };
  const status = (t) => { $(".search-status").textContent = t; };

  async function load() {
    const files = $(".search-files").files;
    status("loading the model…");
    const info = await ember.loadModel("embed", files && files.length ? files : $(".search-model").value.trim());
    state.loaded = true;
    status(`${(info.parameters / 1e6).toFixed(1)} M parameters on ${info.device}`);
  }

  async function index() {
    if (!state.loaded) await load();
    const passages = await ember.passages($(".search-doc").value);
    const vectors = [];
    for (let i = 0; i < passages.length; i += BATCH) {
      vectors.push(...(await ember.embed(passages.slice(i, i + BATCH))));
      $(".search-count").textContent = `${vectors.length} / ${passages.length} passages embedded`;
    }
    Object.assign(state, { passages, vectors });
    $(".search-query").disabled = !passages.length;
    if ($(".search-query").value) search();
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
        if (text && state.vectors.length) {
          const [qv] = await ember.embed([text]);
          for (const { index, score } of rank(qv, state.vectors)) {
            const li = document.createElement("li");
            li.textContent = `${score.toFixed(3)}  ${state.passages[index]}`;
            out.append(li);
          }
        }
        text = state.pending.next;
        state.pending.next = null;
      }
    } finally { state.pending = null; }
  }

  const fail = (e) => status(String(e.message || e));
  $(".search-load").addEventListener("click", () => load().catch(fail));
  $(".search-index").addEventListener("click", () => index().catch(fail));
  $(".search-query").addEventListener("input", () => search().catch(fail));
  $(".search-doc").addEventListener("drop", async (e) => {
    e.preventDefault();
    const f = e.dataTransfer.files[0];
    if (f) { $(".search-doc").value = await f.text(); index().catch(fail); }
  });
  return { load, index, search, state };
}
