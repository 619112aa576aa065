"""`ember llama "PROMPT"` (stream generated text, tokens/s at the end: ember.models.text.cli's printing) and
`ember train-llama` (train.py)."""
from __future__ import annotations

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
    from ember.models.text.cli import print_generation

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


def main_train(args):
    from .train import run
    args.device = resolve_device(args.device)
    run(args)
    return 0
