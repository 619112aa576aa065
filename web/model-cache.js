// model-cache.js: the models a visitor downloaded, kept in the browser's Cache API (it streams large bodies to
// disk and counts them against the origin's quota, which navigator.storage reports). worker.js stores a
// model's files here once the model has loaded, all of them or none (a cancelled or failed download leaves no
// entry), and reads them back with their sha256 checked; the model manager (models.js) lists and deletes them.
//
// One entry per file, under its URL plus size and sha256; its headers say what it is:
//   x-ember-model  the model's key (a demo's "demo-<id>", a hub folder's URL): the entries of one model
//   x-ember-tool, x-ember-label (URI-encoded), x-ember-file, x-ember-sha256, x-ember-time (ISO date)
//   x-ember-absent: 1 for an optional file the host did not have (so an offline load knows it is absent)

export const CACHE_NAME = "ember-models-v2";
const RETIRED = ["ember-weights-v1"]; // entries without the headers above: dropped once, never read
export const ABSENT = Symbol("absent");

/** The models cache, or null where the page has no Cache API (not a secure origin). */
export async function openCache() {
  if (!self.caches) return null;
  if (!openCache.cleaned) {
    openCache.cleaned = true;
    for (const name of RETIRED) self.caches.delete(name).catch(() => {});
  }
  return self.caches.open(CACHE_NAME);
}

export function cacheKey(file) {
  const u = new URL(file.url, self.location.href);
  u.hash = `ember-size=${file.size ?? ""}&sha256=${file.sha256 ?? ""}`;
  return u.href.replace("#", (u.search ? "&" : "?") + "ember-cache&"); // Cache API ignores fragments
}

export async function sha256Hex(bytes) {
  const d = new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
  return Array.from(d, (b) => b.toString(16).padStart(2, "0")).join("");
}

/** A cached file's bytes (its sha256 checked against the one stored with it), ABSENT for a file the host did
 *  not have, or null when it is not cached or fails the check (the entry is then deleted: download it again). */
export async function readCached(cache, file) {
  const key = cacheKey(file);
  const hit = await cache.match(key);
  if (!hit) return null;
  if (hit.headers.get("x-ember-absent")) return ABSENT;
  const bytes = new Uint8Array(await hit.arrayBuffer());
  const want = file.sha256 || hit.headers.get("x-ember-sha256");
  const size = Number(hit.headers.get("content-length"));
  if ((size && bytes.length !== size) || (file.size != null && bytes.length !== file.size) ||
      (want && (await sha256Hex(bytes)) !== want)) {
    console.warn(`ember: the cached copy of ${file.url} is damaged (size or sha256 differs); downloading it again`);
    await cache.delete(key);
    return null;
  }
  return bytes;
}

/** Store a loaded model's files: entries [{file, bytes (null: absent), sha256}]; meta {model, tool, label}.
 *  A full quota leaves the model usable, only not kept (-> false). */
export async function storeModel(cache, entries, meta) {
  const time = new Date().toISOString();
  try {
    for (const { file, bytes, sha256 } of entries) {
      const headers = { "x-ember-model": meta.model, "x-ember-tool": meta.tool, "x-ember-file": file.name,
        "x-ember-label": encodeURIComponent(meta.label || meta.model), "x-ember-time": time };
      if (bytes) Object.assign(headers, { "content-length": String(bytes.length), "x-ember-sha256": sha256 });
      else headers["x-ember-absent"] = "1";
      await cache.put(cacheKey(file), new Response(bytes || "", { headers }));
    }
    return true;
  } catch (e) {
    console.warn(`ember: ${meta.label || meta.model} not kept for next time (${e.message})`);
    await deleteModel(meta.model).catch(() => {}); // never half a model
    return false;
  }
}

/** The cached models, newest first: [{model, tool, label, files: [{name, bytes}], bytes, time}]. */
export async function listModels() {
  const cache = await openCache();
  if (!cache) return [];
  const models = new Map();
  for (const r of await cache.matchAll()) {
    const h = r.headers, model = h.get("x-ember-model");
    if (!model) continue;
    const m = models.get(model) || { model, tool: h.get("x-ember-tool"), label: decodeURIComponent(h.get("x-ember-label") || model),
      files: [], bytes: 0, time: h.get("x-ember-time") || "" };
    if (!h.get("x-ember-absent")) {
      const bytes = Number(h.get("content-length")) || 0;
      m.files.push({ name: h.get("x-ember-file"), bytes });
      m.bytes += bytes;
    }
    models.set(model, m);
  }
  return [...models.values()].sort((a, b) => (a.time < b.time ? 1 : -1));
}

/** Delete one cached model (every entry carrying its key); -> the number of entries deleted. */
export async function deleteModel(model) {
  const cache = await openCache();
  if (!cache) return 0;
  let n = 0;
  for (const req of await cache.keys()) {
    const r = await cache.match(req);
    if (r && r.headers.get("x-ember-model") === model && (await cache.delete(req))) n++;
  }
  return n;
}

/** Delete every cached model. */
export async function deleteAll() {
  return self.caches ? self.caches.delete(CACHE_NAME) : false;
}

/** {usage, quota, persisted} of this origin's storage (navigator.storage), bytes; nulls where unknown. */
export async function storage() {
  const s = self.navigator.storage;
  const est = s && s.estimate ? await s.estimate() : {};
  const persisted = s && s.persisted ? await s.persisted() : null;
  return { usage: est.usage ?? null, quota: est.quota ?? null, persisted };
}

/** Ask the browser to keep this origin's storage under pressure (navigator.storage.persist()); -> granted. */
export async function persist() {
  const s = self.navigator.storage;
  return s && s.persist ? s.persist() : false;
}
