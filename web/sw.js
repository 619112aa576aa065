// sw.js: the app's service worker, so a visitor who came once can come back offline. `ember build-web` writes
// the site's copy of this file with the build above this comment:
//
//   self.BUILD = {version, files: {"index.html": sha256, "pyodide/pyodide.asm.wasm": sha256, ...}}
//
// files: the app shell, config.json, the models manifest, Pyodide's boot files, ember's wheel and bytecode: all
// the page needs to become ready. Install fetches each, checks its sha256 and keeps it in the cache
// "ember-app-<version>"; the fetch handler answers those paths from that cache only, so one page never mixes
// two builds. A new build is a new sw.js (its version changed): it installs beside the old one and takes over
// when no page of the old one is open, or at once when the page asks (its "Reload" button: offline.js); its
// activation deletes the older caches. Pyodide packages a tool loads later (Pillow) join the cache when first
// fetched. Model weights are not the worker's business here: worker.js keeps them (model-cache.js).
// Responses are kept whole, headers included, so a site served cross-origin isolated (COOP/COEP) stays so
// offline; and the worker adds those headers where the host did not send them (a static host that cannot set
// headers), so from the second visit on such a host the page is isolated too and its CPU kernels use the pool.

const BUILD = self.BUILD || null; // null: web/ served unbuilt; the worker then stays out of the way
const PREFIX = "ember-app-";
const CACHE = BUILD && PREFIX + BUILD.version;
const SCOPE = new URL(self.registration.scope).pathname;

async function sha256Hex(buffer) {
  const d = new Uint8Array(await crypto.subtle.digest("SHA-256", buffer));
  return Array.from(d, (b) => b.toString(16).padStart(2, "0")).join("");
}

self.addEventListener("install", (event) => {
  if (!BUILD) return;
  event.waitUntil((async () => {
    const cache = await caches.open(CACHE);
    await Promise.all(Object.entries(BUILD.files).map(async ([path, sha256]) => {
      const resp = await fetch(new Request(path, { cache: "no-cache" })); // revalidated: a 304 costs nothing
      if (!resp.ok) throw new Error(`ember: ${path}: HTTP ${resp.status}`);
      const copy = resp.clone();
      if ((await sha256Hex(await resp.arrayBuffer())) !== sha256) // the server moved on to another build
        throw new Error(`ember: ${path} is not the file of build ${BUILD.version}`);
      await cache.put(path, copy);
    }));
  })());
});

self.addEventListener("activate", (event) => {
  if (!BUILD) return;
  event.waitUntil((async () => {
    for (const name of await caches.keys()) if (name.startsWith(PREFIX) && name !== CACHE) await caches.delete(name);
    await self.clients.claim();
  })());
});

self.addEventListener("message", (event) => {
  if (event.data === "skip-waiting") self.skipWaiting();
});

self.addEventListener("fetch", (event) => {
  if (!BUILD || event.request.method !== "GET") return;
  const url = new URL(event.request.url);
  if (url.origin !== self.location.origin || !url.pathname.startsWith(SCOPE)) return;
  let path = url.pathname.slice(SCOPE.length);
  if (event.request.mode === "navigate" && (path === "" || path === "index.html")) path = "index.html";
  if (path in BUILD.files) event.respondWith(fromCache(event.request, path));
  else if (path.startsWith("pyodide/")) event.respondWith(keepOnFetch(event.request, path));
  // anything else (model weights, the book, hub files) goes to the network as if no worker were here
});

// What makes a page cross-origin isolated (SharedArrayBuffer: the kernel pool, the interrupt buffer); the same
// as wasm/serve.py's ISOLATION_HEADERS. Every file this worker answers is same-origin, so requiring CORP of the
// page's subresources costs it nothing.
const ISOLATION = { "Cross-Origin-Opener-Policy": "same-origin", "Cross-Origin-Embedder-Policy": "require-corp",
  "Cross-Origin-Resource-Policy": "cross-origin" };

function isolated(resp) {
  if (resp.type === "opaque" || resp.status !== 200 || resp.headers.get("Cross-Origin-Embedder-Policy")) return resp;
  const headers = new Headers(resp.headers);
  for (const [k, v] of Object.entries(ISOLATION)) headers.set(k, v);
  return new Response(resp.body, { status: resp.status, statusText: resp.statusText, headers });
}

async function fromCache(request, path) {
  const cache = await caches.open(CACHE);
  return isolated((await cache.match(path)) || await fetch(request)); // not cached yet (installing): the network
}

// A Pyodide package fetched on first use (Pillow): from the cache when it is there, else fetched and kept.
async function keepOnFetch(request, path) {
  const cache = await caches.open(CACHE);
  const hit = await cache.match(path);
  if (hit) return isolated(hit);
  const resp = await fetch(request);
  if (resp.ok) await cache.put(path, resp.clone()).catch(() => {});
  return isolated(resp);
}
