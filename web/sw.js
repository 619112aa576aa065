// sw.js: the app's service worker, so a visitor who came once can come back offline. `ember build-web` writes
// the site's copy of this file with the build above this comment:
//
//   self.BUILD = {version, files: {"index.html": sha256, "pyodide/pyodide.asm.wasm": sha256, ...}}
//
// files: the app shell, config.json, the models manifest, Pyodide's boot files, ember's wheel and bytecode: all
// the page needs to become ready. Install fetches each, checks its sha256 and keeps it in the cache
// "ember-app-<version>"; the fetch handler answers those paths from that cache (Pyodide's wasm from the network
// only while it is the same file: CODE_CACHED below), so one page never mixes two builds. A new build is a new sw.js (its version changed): it installs beside the old one and takes over
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
// Pyodide's wasm: answered by the network (the HTTP cache, in practice: Pyodide's files are kept a day) while that is
// the copy this build holds, so the page compiles it with the machine code Chromium kept beside the HTTP cache's
// copy on the first visit. A copy from Cache Storage has no such code until a visit has compiled it: the second
// visit compiled its ~3000 start-up functions again (about 1 s on 2 cores). Offline, or when the network's copy is
// another build's (its size, date or ETag differ from the kept one's), the kept copy answers.
const CODE_CACHED = new Set(["pyodide/pyodide.asm.wasm"]);

async function sha256Hex(buffer) {
  const d = new Uint8Array(await crypto.subtle.digest("SHA-256", buffer));
  return Array.from(d, (b) => b.toString(16).padStart(2, "0")).join("");
}

// path -> its response when its body has that sha256, else null
async function fetchChecked(path, sha256, mode) {
  const resp = await fetch(new Request(path, { cache: mode }));
  if (!resp.ok) throw new Error(`ember: ${path}: HTTP ${resp.status}`);
  const copy = resp.clone();
  return (await sha256Hex(await resp.arrayBuffer())) === sha256 ? copy : null;
}

self.addEventListener("install", (event) => {
  if (!BUILD) return;
  event.waitUntil((async () => {
    const cache = await caches.open(CACHE);
    await Promise.all(Object.entries(BUILD.files).map(async ([path, sha256]) => {
      // revalidated (a 304 costs nothing), but for CODE_CACHED files, read as the HTTP cache holds them: a
      // revalidation would void the compiled code Chromium keeps beside them (a stale copy is fetched again)
      let copy = await fetchChecked(path, sha256, CODE_CACHED.has(path) ? "default" : "no-cache");
      if (!copy && CODE_CACHED.has(path)) copy = await fetchChecked(path, sha256, "no-cache");
      if (!copy) throw new Error(`ember: ${path} is not the file of build ${BUILD.version}`); // the server moved on
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
  if (CODE_CACHED.has(path)) event.respondWith(networkFirst(event.request, path));
  else if (path in BUILD.files) event.respondWith(fromCache(event.request, path));
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

async function networkFirst(request, path) {
  const kept = await (await caches.open(CACHE)).match(path);
  let resp;
  try {
    resp = await fetch(request); // the page's own request: Chromium then treats the answer as the network's
  } catch (e) {
    return isolated(kept || Response.error());
  }
  if (!kept) return isolated(resp); // not cached yet (installing)
  // answered unchanged (a new Response would lose the compiled code), so only where the host isolates the page
  if (resp.ok && sameFile(resp, kept) && resp.headers.get("Cross-Origin-Embedder-Policy")) return resp;
  if (resp.body) resp.body.cancel().catch(() => {});
  return isolated(kept);
}

// Whether two responses carry the same file: their Content-Length, Last-Modified and ETag, at least one present.
function sameFile(a, b) {
  const names = ["Content-Length", "Last-Modified", "ETag"];
  return names.some((h) => a.headers.get(h) !== null) && names.every((h) => a.headers.get(h) === b.headers.get(h));
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
