// offline.js: registers the service worker (sw.js) once the page is ready, so its install reads what the page
// just loaded from the HTTP cache instead of competing with the boot; tells the visitor when a new version is
// ready (a Reload button hands over at once) and when the page runs offline.

import { $ } from "./ui.js";

export async function registerOffline() {
  const note = $("#offline-note");
  const online = () => {
    document.body.classList.toggle("offline", !navigator.onLine);
    $("#offline-pill").hidden = navigator.onLine;
  };
  addEventListener("online", online);
  addEventListener("offline", online);
  online();
  if (!("serviceWorker" in navigator) || !isSecureContext) return null;
  let reg;
  try {
    reg = await navigator.serviceWorker.register("sw.js");
  } catch (e) {
    console.warn(`ember: no offline copy (${e.message})`);
    return null;
  }
  const offer = (worker) => { // a new build waits: say so, and hand over when asked
    if (!worker || !navigator.serviceWorker.controller) return;
    note.hidden = false;
    $(".reload", note).onclick = () => worker.postMessage("skip-waiting");
  };
  if (reg.waiting) offer(reg.waiting);
  reg.addEventListener("updatefound", () => {
    const w = reg.installing;
    w.addEventListener("statechange", () => { if (w.state === "installed") offer(w); });
  });
  let reloading = false;
  navigator.serviceWorker.addEventListener("controllerchange", () => {
    if (note.hidden || reloading) return; // the first install claiming this page: nothing changes for it
    reloading = true;
    location.reload();
  });
  return reg;
}
