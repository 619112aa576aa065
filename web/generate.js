// generate.js: the text tool's page code. A model with a chat template (the bundled SmolLM2) gets the chat
// (chat.js, over ember.chat.completions); any other causal LM (Gemma 3, Llama ...) completes a prompt through
// ember.js's generate(): settings checked in the page, tokens streamed, Stop live from the model's first byte,
// copy and .txt / .json of the result. Mounted by app.js (mountGenerateTool).

import { mountChat } from "./chat.js";
import { mountTeach } from "./teach.js";
import { EmberError } from "./ember.js";
import { $, MB, copyText, download } from "./ui.js";

// A number field checked in the page before a run: a whole number in [min, max] (empty allowed where
// `optional`); anything else is refused with the field named, and the field is marked and focused.
function numberField(sel, label, { min, max, optional = false }) {
  const el = $(sel), raw = el.value.trim();
  el.removeAttribute("aria-invalid");
  if (optional && raw === "") return null;
  const v = Number(raw);
  if (raw === "" || !Number.isInteger(v) || v < min || v > max || el.validity.badInput) {
    el.setAttribute("aria-invalid", "true");
    el.focus();
    throw new EmberError("bad_request", `ember: ${label} must be a whole number from ${min} to ${max.toLocaleString("en")}` +
      `${optional ? " (or empty)" : ""}; got ${raw === "" ? (el.validity.badInput ? "something that is not a number" : "nothing") : `"${raw}"`}`);
  }
  return v;
}

// A huge prompt is echoed by its start and end only: the output box is for the generated text.
const ECHO_HEAD = 300, ECHO_TAIL = 100;
function promptEcho(prompt) {
  if (prompt.length <= ECHO_HEAD + ECHO_TAIL + 100) return prompt;
  const hidden = prompt.length - ECHO_HEAD - ECHO_TAIL;
  return `${prompt.slice(0, ECHO_HEAD)} … [${hidden.toLocaleString("en")} characters of the prompt not shown] … ${prompt.slice(-ECHO_TAIL)}`;
}

// Why the generation ended, for the status line.
function stopReason(r, maxTokens) {
  return { cancelled: "stopped by you", length: `reached Max tokens (${maxTokens})`, eos: "the model ended the text",
    context: `stopped at the context length (${r.context} tokens, prompt included)` }[r.stopped] || r.stopped;
}

export function mountGenerateTool(app) {
  const picker = app.picker("llama");
  $(".hub", picker).placeholder = "owner/name: Llama, Gemma, GPT-2, Mistral, Qwen2, Phi, Falcon …";
  // A chat for a model with a chat template, a completion otherwise: the picked demo says which before it loads
  // (the manifest's "chat"), the loaded model after.
  const showTextMode = (chat) => { $("#chat").hidden = !chat; $("#completion").hidden = chat; };
  const pickedChat = () => showTextMode($(".kind", picker).value === "demo" && !!$(".demo", picker).selectedOptions[0]?.dataset.chat);
  $(".demo", picker).addEventListener("change", pickedChat);
  $(".kind", picker).addEventListener("change", pickedChat);
  picker.addEventListener("modelloaded", ({ detail: info }) => showTextMode(!!info.chat));
  pickedChat();
  mountChat($("#chat"), { ember: app.ember, showError: (e) => app.showError(e, "llama"),
    ensure: () => app.run("llama", { label: "Loading" }, () => app.ensureModel("llama")),
    run: (fn) => app.run("llama", { label: "Writing" }, fn) });
  mountTeach($("#teach"), { ember: app.ember, showError: (e) => app.showError(e, "llama"), cancel: () => app.cancel(),
    run: (fn) => app.run("llama", { label: "Teaching" }, async () => { await app.ensureModel("llama"); return fn(); }) });
  for (const id of ["temperature", "top-p"]) $(`#${id}`).addEventListener("input", (e) => { $(`#${id}-out`).value = e.target.value; });
  const results = ["#llama-copy", "#llama-txt", "#llama-json"];

  function clear(text = "Generated text streams in here.") {
    const out = $("#llama-output");
    delete out.dataset.json;
    delete out.dataset.text;
    out.replaceChildren(Object.assign(document.createElement("span"), { className: "muted empty", textContent: text }));
    $("#llama-stats").textContent = "";
    for (const b of results) $(b).disabled = true;
  }

  function finish(out, r, maxTokens) {
    out.dataset.text = r.text;
    out.dataset.json = JSON.stringify(r);
    for (const b of results) $(b).disabled = !r.text;
    $("#llama-stats").textContent = `${r.tokens.length} tokens` + (r.tokens_per_s != null ? ` · ${r.tokens_per_s.toFixed(1)} tokens/s` : "") +
      ` on ${app.ember().device.toUpperCase()} · ${stopReason(r, maxTokens)}` +
      (r.wasm_memory_bytes ? ` · KV cache ${MB(r.kv_cache_bytes || 0)}, wasm heap ${MB(r.wasm_memory_bytes)}` : "");
  }

  $("#generate").addEventListener("click", async () => {
    if (app.busy()) return app.showError(new EmberError("busy", `ember: ${app.busy().label} is still running; wait for it to finish or cancel it, then try again`));
    const out = $("#llama-output");
    delete out.dataset.json;
    let opts, gen, tokens = [];
    try {
      opts = {
        temperature: Number($("#temperature").value), top_p: Number($("#top-p").value),
        top_k: numberField("#top-k", "Top-k", { min: 0, max: 1000 }),
        max_new_tokens: numberField("#max-tokens", "Max tokens", { min: 1, max: 4096 }),
        seed: numberField("#seed", "Seed", { min: 0, max: 2 ** 32 - 1, optional: true }),
      };
      const prompt = $("#prompt").value;
      $("#generate").disabled = true;
      const r = await app.run("llama", { label: "Generating", cancel: $("#stop") }, async () => {
        await app.ensureModel("llama");
        out.replaceChildren(Object.assign(document.createElement("span"), { className: "prompt-echo", textContent: promptEcho(prompt) }));
        gen = document.createElement("span");
        gen.className = "gen";
        out.append(gen);
        $("#llama-stats").textContent = "Generating…";
        return app.ember().generate(prompt, opts, (piece, n, tps) => {
          gen.textContent += piece;
          tokens.length = n;
          $("#llama-stats").textContent = `${n} tokens · ${tps.toFixed(1)} tokens/s`;
          app.progress({ stage: "tokens", file: "llama", done: n, total: opts.max_new_tokens });
        });
      });
      gen.textContent = r.text;
      if (r.stopped !== "cancelled") app.progress({ stage: "tokens", file: "llama", done: r.tokens.length, total: r.tokens.length });
      finish(out, r, opts.max_new_tokens);
    } catch (e) {
      if (e.code === "cancelled" && gen) { // stopped by restarting the runtime: what streamed is the result
        finish(out, { text: gen.textContent, tokens, stopped: "cancelled" }, opts.max_new_tokens);
        return;
      }
      clear();
      app.showError(e, "llama");
    } finally {
      $("#generate").disabled = false;
    }
  });
  $("#prompt").addEventListener("keydown", (e) => { if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) $("#generate").click(); });
  $("#stop").addEventListener("click", () => app.cancel());
  $("#llama-copy").addEventListener("click", (e) => copyText(e.currentTarget, $("#llama-output").dataset.text || ""));
  $("#llama-txt").addEventListener("click", () => download("generated.txt", ($("#llama-output").dataset.text || "") + "\n"));
  $("#llama-json").addEventListener("click", () => download("generated.json", $("#llama-output").dataset.json || "{}", "application/json"));
}
