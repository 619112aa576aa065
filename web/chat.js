// The text tool as a chat, for a model that carries a chat template (the bundled SmolLM2-135M-Instruct): a message
// list, a system prompt, send / stop / regenerate / copy / clear, over ember.chat.completions.create (ember.js),
// streamed. The worker keeps the conversation's KV cache, so each turn prefills only its own tokens; the stats
// line says how many.
//
//   mountChat(container, { ember: () => state.ember, ensure, run, showError })
//     ensure(): loads the picked model (resolves to its info); run(fn): the page's busy/cancel wrapper.

const $ = (sel, root) => root.querySelector(sel);

const HTML = `
  <label class="label" for="chat-system">System prompt <small class="muted">(optional; the model's default when empty)</small></label>
  <input id="chat-system" type="text" placeholder="You are a helpful assistant." autocomplete="off">
  <ol id="chat-log" class="chat-log" aria-live="polite"></ol>
  <p id="chat-empty" class="muted empty">Ask something: the reply streams in here.</p>
  <label class="label" for="chat-input">Message</label>
  <textarea id="chat-input" rows="2" placeholder="Which city is the capital of France?"></textarea>
  <div class="controls">
    <label>Temperature <input id="chat-temperature" type="number" min="0" max="2" step="0.05" value="0.7"></label>
    <label>Max tokens <input id="chat-max-tokens" type="number" min="1" max="2048" step="1" value="256"></label>
    <label>Seed <input id="chat-seed" type="number" min="0" max="4294967295" step="1" value="0"></label>
  </div>
  <div class="buttons">
    <button type="button" id="chat-send">Send</button>
    <button type="button" id="chat-stop" class="secondary" disabled>■ Stop</button>
    <button type="button" id="chat-regenerate" class="secondary" disabled>↻ Regenerate</button>
    <button type="button" id="chat-copy" class="secondary" disabled>Copy</button>
    <button type="button" id="chat-clear" class="secondary" disabled>Clear</button>
  </div>
  <p id="chat-stats" class="muted"></p>`;

export function mountChat(root, { ember, ensure, run, showError }) {
  root.innerHTML = HTML;
  const log = $("#chat-log", root), stats = $("#chat-stats", root);
  const history = []; // {role, content} of the turns so far (the system prompt is added per request)
  let busy = false;

  const bubble = (role, text) => {
    const li = document.createElement("li");
    li.className = `chat-msg ${role}`;
    li.dataset.role = role;
    li.textContent = text;
    log.append(li);
    $("#chat-empty", root).hidden = true;
    return li;
  };
  const refresh = () => {
    const hasReply = history.some((m) => m.role === "assistant");
    $("#chat-send", root).disabled = busy;
    $("#chat-stop", root).disabled = !busy;
    $("#chat-regenerate", root).disabled = busy || !hasReply;
    $("#chat-copy", root).disabled = busy || !hasReply;
    $("#chat-clear", root).disabled = busy || !history.length;
  };
  const number = (id, fallback) => {
    const v = Number($(id, root).value);
    return Number.isFinite(v) && $(id, root).value !== "" ? v : fallback;
  };

  async function reply() {
    const system = $("#chat-system", root).value.trim();
    const messages = (system ? [{ role: "system", content: system }] : []).concat(history);
    const out = bubble("assistant", "");
    out.classList.add("streaming");
    busy = true;
    refresh();
    stats.textContent = "Thinking…";
    try {
      const r = await run(async () => {
        const stream = await ember().chat.completions.create({
          messages, stream: true, max_tokens: number("#chat-max-tokens", 256),
          temperature: number("#chat-temperature", 0.7), seed: number("#chat-seed", undefined) });
        let last = null;
        for await (const chunk of stream) {
          const piece = chunk.choices[0].delta.content;
          if (piece) out.textContent += piece;
          last = chunk;
        }
        return last;
      });
      const e = r.ember, u = r.usage;
      history.push({ role: "assistant", content: e.text });
      out.textContent = e.text;
      stats.textContent = `${u.completion_tokens} tokens · ${e.tokens_per_s.toFixed(1)} tokens/s · prompt ` +
        `${u.prompt_tokens} tokens, ${e.prefill_tokens} prefilled (${e.cached_tokens} from the cache) · first token ` +
        `after ${Math.round(e.ttft_ms)} ms · ${{ stop: "done", length: "reached Max tokens", abort: "stopped by you" }[r.choices[0].finish_reason] || r.choices[0].finish_reason}`;
      root.dataset.json = JSON.stringify(e);
    } catch (err) {
      out.remove();
      stats.textContent = "";
      showError(err);
    } finally {
      out.classList.remove("streaming");
      busy = false;
      refresh();
    }
  }

  $("#chat-send", root).addEventListener("click", async () => {
    const text = $("#chat-input", root).value.trim();
    if (!text || busy) return;
    try {
      await ensure();
    } catch (err) {
      showError(err);
      return;
    }
    $("#chat-input", root).value = "";
    history.push({ role: "user", content: text });
    bubble("user", text);
    await reply();
  });
  $("#chat-input", root).addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); $("#chat-send", root).click(); }
  });
  $("#chat-stop", root).addEventListener("click", () => ember().cancel());
  $("#chat-regenerate", root).addEventListener("click", async () => {
    if (busy || history[history.length - 1]?.role !== "assistant") return;
    history.pop();
    log.lastElementChild.remove();
    await reply();
  });
  $("#chat-copy", root).addEventListener("click", () => {
    const last = [...history].reverse().find((m) => m.role === "assistant");
    if (last) navigator.clipboard.writeText(last.content);
  });
  $("#chat-clear", root).addEventListener("click", () => {
    history.length = 0;
    log.replaceChildren();
    $("#chat-empty", root).hidden = false;
    stats.textContent = "";
    delete root.dataset.json;
    refresh();
  });
  refresh();
}
