// guard.js: one model job at a time in the page, for every tool. The worker serves requests in order, so a
// second tool's job started during a long one would only wait, silently; every tool's UI runs its loads and
// runs through exclusive() instead, which refuses a job of another tool while one runs and names the one
// that is running. A tool may nest jobs of its own (the search tool loads, then embeds batch after batch).
//
//   import { exclusive, running, onBusyChange } from "./guard.js";
//   await exclusive("search", "Semantic search (all-MiniLM-L6-v2)", () => ember.embed(texts));

import { EmberError } from "./ember.js";

let owner = null; // {tool, label, since}: the job running now
let depth = 0;
const listeners = new Set();

/** The running job ({tool, label, since: performance.now() at its start}), or null. */
export const running = () => owner;

/** Call fn(owner) whenever the page becomes busy or idle. */
export function onBusyChange(fn) { listeners.add(fn); }

/** Run fn as `tool`'s job, labelled for people ("Speech to text (Whisper tiny.en)"); while another tool's job
 *  runs, refuse with EmberError code "busy" naming it. Jobs of the same tool nest. */
export async function exclusive(tool, label, fn) {
  if (owner && owner.tool !== tool)
    throw new EmberError("busy", `ember: ${owner.label} is still running; wait for it to finish or cancel it, then try again`);
  if (!owner) { owner = { tool, label, since: performance.now() }; notify(); }
  else if (label && depth === 1) owner.label = label; // a nested job may name the model it loaded
  depth++;
  try {
    return await fn();
  } finally {
    if (--depth === 0) { owner = null; notify(); }
  }
}

function notify() {
  for (const fn of listeners) {
    try { fn(owner); } catch (e) { console.warn(e); }
  }
}
