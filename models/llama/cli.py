"""`ember llama "PROMPT"` (stream generated text, tokens/s at the end) and `ember train-llama` (train.py)."""
from __future__ import annotations

import json
import sys

from ...argtypes import add_sampling_arguments
from ...cli import DEVICE_HELP, resolve_device


def add_parser(sub):
    p = sub.add_parser("llama", help="generate text with a Llama model")
    p.add_argument("prompt")
    p.add_argument("--model", default=None, help="folder, .bin, .gguf, URL or hub id (default: the shipped demo model)")
    p.add_argument("--tokenizer", default=None, help="tokenizer.json / tokenizer.bin when not beside the model")
    add_sampling_arguments(p, max_new_tokens=128, temperature=0.8, top_p=0.9)
    p.add_argument("--chat", action="store_true", help="wrap the prompt in the Llama-2 chat format")
    p.add_argument("--system", default=None, help="system message for --chat")
    p.add_argument("--device", default="cpu", help=DEVICE_HELP)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of streaming text")
    p.set_defaults(func=main)

    from .train import add_arguments
    t = sub.add_parser("train-llama", help="train a small Llama on a text corpus")
    add_arguments(t)
    t.set_defaults(func=main_train)


def main(args):
    from .chat import chat_prompt_ids
    from .load import load_llama
    model, tok = load_llama(args.model, device=resolve_device(args.device), tokenizer=args.tokenizer)
    if tok is None:
        raise ValueError("ember: no tokenizer found beside the model; pass --tokenizer")
    if args.chat:
        msgs = ([{"role": "system", "content": args.system}] if args.system else []) + \
               [{"role": "user", "content": args.prompt}]
        prompt_ids = chat_prompt_ids(tok, msgs)
    else:
        prompt_ids = tok.encode(args.prompt, bos=True)
    return print_generation(model, tok, args.prompt, prompt_ids, args)


def print_generation(model, tok, prompt: str, prompt_ids: list[int], args) -> int:
    """Generate from `prompt_ids` with the sampling flags in `args`, streaming text to stdout (or one JSON
    object with --json); shared by `ember llama` and `ember generate`."""
    from .generate import SamplingParams, TextStream, generate
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


def main_train(args):
    from .train import run
    args.device = resolve_device(args.device)
    run(args)
    return 0
