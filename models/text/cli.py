"""`ember generate "PROMPT"`: text completion with any causal LM load_text_model takes (default: Gemma 3 270M,
the Q4_K_M GGUF fetched from PyPI once) — a GGUF's `general.architecture` (a folder's config.json `model_type`)
picks the family; and print_generation, the streaming / `--json` output `ember generate` and `ember llama` share.
`ember chat` and `ember api` (a model with a chat template) and `ember finetune` (LoRA adapters trained on a text
file, finetune.py) are registered here too."""
from __future__ import annotations

import json
import os
import sys

from ...argtypes import add_sampling_arguments, existing_file, non_negative_int, positive_float, positive_int
from ...cli import DEVICE_HELP, resolve_device


ADAPTER_HELP = ("a LoRA adapter: a folder in PEFT's layout (adapter_config.json + adapter_model.safetensors) or "
                "llama.cpp's adapter .gguf over a .gguf model (`ember finetune` writes both)")
ACTIVATIONS_HELP = ("how quantized weights multiply: q8 (llama.cpp's 8-bit activations: its numbers, its speed) or "
                    "float32 (transformers' arithmetic on the dequantized weights); default: the model's (q8 for GGUF)")


def add_parser(sub):
    """`ember generate`, `ember chat`, `ember api` and `ember finetune`."""
    add_chat_parsers(sub)
    add_finetune_parser(sub)
    p = sub.add_parser("generate", help="complete text with a language model (default: Gemma 3 270M)")
    p.add_argument("prompt")
    p.add_argument("--model", default=None,
                   help="a .gguf file, folder, URL or hub id (default: gemma-3-270m-q4_k_m.gguf, fetched from PyPI)")
    add_sampling_arguments(p, max_new_tokens=64, temperature=0.0, top_p=1.0)
    p.add_argument("--device", default="cpu", help=DEVICE_HELP)
    p.add_argument("--activations", choices=("q8", "float32"), default=None, help=ACTIVATIONS_HELP)
    p.add_argument("--adapter", default=None, help=ADAPTER_HELP)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of streaming text")
    p.set_defaults(func=main)


def main(args):
    from .load import load_text_model
    src = args.model
    if src is None:
        from ember.models.gemma3.fetch import fetch_gemma3_270m
        src = os.fspath(fetch_gemma3_270m(progress=True))
    model, tok = load_text_model(src, device=resolve_device(args.device), activations=args.activations)
    if tok is None:
        raise ValueError("ember: the model carries no tokenizer")
    _with_adapter(model, args.adapter, src)
    prompt_ids = tok.encode(args.prompt)  # BOS as the tokenizer adds it (a GGUF's add_bos_token)
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


# ============================================================================ ember chat / ember api

CHAT_HELP = "a .gguf file, folder, URL or hub id with a chat template (default: SmolLM2-135M-Instruct, from PyPI)"


def add_chat_parsers(sub):
    p = sub.add_parser("chat", help="chat with an instruct model (default: SmolLM2-135M-Instruct)")
    p.add_argument("--model", default=None, help=CHAT_HELP)
    p.add_argument("--system", default=None, help="a system message")
    p.add_argument("--messages", type=existing_file, default=None,
                   help="a JSON file of messages [{role, content}, ...] (or an OpenAI request body): answer it once")
    p.add_argument("--json", action="store_true", help="with --messages: print one JSON object")
    p.add_argument("--stop", action="append", default=[], help="a stop string (repeatable)")
    p.add_argument("--context", type=positive_int, default=None, help="cap the context (positions) below the model's")
    p.add_argument("--json-schema", type=existing_file, default=None, help="constrain replies to this JSON schema")
    p.add_argument("--choices", nargs="+", default=None, help="constrain a reply to one of these strings")
    p.add_argument("--regex", default=None, help="constrain replies to this regular expression")
    add_sampling_arguments(p, max_new_tokens=256, temperature=0.0, top_p=1.0)
    p.add_argument("--device", default="cpu", help=DEVICE_HELP)
    p.add_argument("--activations", choices=("q8", "float32"), default=None, help=ACTIVATIONS_HELP)
    p.add_argument("--adapter", default=None, help=ADAPTER_HELP)
    p.set_defaults(func=main_chat)

    a = sub.add_parser("api", help="an OpenAI-compatible server on 127.0.0.1 (chat, completions, embeddings)")
    a.add_argument("--model", default=None, help=CHAT_HELP)
    a.add_argument("--embed-model", default=None,
                   help="the /v1/embeddings model: a folder, hub id or 'none' (default: all-MiniLM-L6-v2 from PyPI)")
    a.add_argument("--host", default="127.0.0.1", help="the address to bind (default loopback only; 0.0.0.0 exposes "
                                                      "the server to the network)")
    a.add_argument("--port", type=positive_int, default=8080)
    a.add_argument("--context", type=positive_int, default=None, help="cap the context (positions) below the model's")
    a.add_argument("--api-key", default=None, help="require this bearer token (default: none)")
    a.add_argument("--device", default="cpu", help=DEVICE_HELP)
    a.add_argument("--activations", choices=("q8", "float32"), default=None, help=ACTIVATIONS_HELP)
    a.set_defaults(func=main_api)


def _chat_model(args):
    from .load import load_text_model
    src = args.model
    if src is None:
        from .smollm2 import fetch_smollm2
        src = os.fspath(fetch_smollm2(progress=True))
    model, tok = load_text_model(src, device=resolve_device(args.device), activations=args.activations)
    _with_adapter(model, getattr(args, "adapter", None), src)
    return model, tok


def _gguf_arch(src):
    """The GGUFArchitecture of a local .gguf model file, else None."""
    if not (isinstance(src, str) and src.endswith(".gguf") and os.path.isfile(src)):
        return None
    from ember.io import gguf

    from .load import gguf_architecture
    return gguf_architecture(gguf.metadata(src).get("general.architecture"), src)


def _with_adapter(model, adapter, src=None):
    """Load a LoRA adapter (a PEFT folder, or a llama.cpp .gguf adapter over a GGUF model) into the model, in eval
    mode (no dropout), where one is given."""
    if not adapter:
        return
    from ember.train import lora
    if str(adapter).endswith(".gguf"):
        arch = _gguf_arch(src)
        if arch is None:
            raise ValueError(f"ember: {adapter}: a GGUF adapter applies to a local .gguf model, not {src!r}")
        from ..common.lora_gguf import load_gguf_adapter
        load_gguf_adapter(model, adapter, arch)
    else:
        lora.load_adapter(model, adapter)
    model.eval()


def _constraint(args, tok):
    import ember.grammar as G
    if args.json_schema:
        with open(args.json_schema, encoding="utf-8") as f:
            return G.compile_json_schema(json.load(f)).constraint(tok)
    if args.choices:
        return G.compile_choices(args.choices).constraint(tok)
    if args.regex:
        return G.compile_regex(args.regex).constraint(tok)
    return None


def main_chat(args):
    from ..common.chat import ChatEngine, ChatSession
    from ..common.chat_template import parse_messages
    from ..common.generate import SamplingParams
    model, tok = _chat_model(args)
    engine = ChatEngine(model, tok, context=args.context)
    params = SamplingParams(args.temperature, args.top_k, args.top_p, args.repetition_penalty, args.seed)
    gen = dict(max_tokens=args.max_new_tokens, params=params, stop=args.stop)
    if args.messages:
        with open(args.messages, encoding="utf-8") as f:
            messages = parse_messages(f.read(), args.messages)
        if args.system and messages[0]["role"] != "system":
            messages = [{"role": "system", "content": args.system}] + messages
        reply = engine.reply(messages, constraint=_constraint(args, tok), **gen)
        text = "".join(p if args.json else print(p, end="", flush=True) or p for p in reply)
        r = reply.result
        if args.json:
            print(json.dumps({"prompt_tokens": reply.prompt_ids, "tokens": r.tokens, "text": text,
                              "stopped": r.stopped, "finish_reason": r.finish_reason,
                              "prefill_tokens": r.prefill_tokens, "ttft_ms": round(r.ttft_s * 1000, 1),
                              "tokens_per_s": round(r.tokens_per_s, 2)}, ensure_ascii=False))
        else:
            print()
        return 0
    chat = ChatSession(engine, system=args.system)
    print("ember chat: /clear starts over, /regenerate answers again, /quit (or Ctrl-D) ends", file=sys.stderr)
    while True:
        try:
            line = input("> ")
        except EOFError:
            print(file=sys.stderr)
            return 0
        cmd = line.strip()
        if cmd in ("/quit", "/exit"):
            return 0
        if cmd == "/clear":
            chat.clear()
            continue
        if not cmd:
            continue
        reply = chat.regenerate(constraint=_constraint(args, tok), **gen) if cmd == "/regenerate" else \
            chat.send(line, constraint=_constraint(args, tok), **gen)
        try:
            for piece in reply:
                print(piece, end="", flush=True)
        except KeyboardInterrupt:
            reply.abort()
        r = reply.result
        print(f"\n[{len(r.tokens)} tokens, {r.tokens_per_s:.1f} tokens/s; prompt {r.prompt_tokens} tokens, "
              f"{r.prefill_tokens} prefilled, first token after {r.ttft_s * 1000:.0f} ms; {r.finish_reason}]",
              file=sys.stderr)


def main_api(args):
    from .openai_server import serve
    model, tok = _chat_model(args)
    embedder = None
    if args.embed_model != "none":
        from ember.models.bert.fetch import fetch_minilm
        from ember.models.bert.sentence import SentenceEncoder
        embedder = SentenceEncoder(args.embed_model or fetch_minilm(progress=True))
    return serve(model, tok, host=args.host, port=args.port, context=args.context, embedder=embedder,
                 api_key=args.api_key, model_path=args.model)


def add_finetune_parser(sub):
    p = sub.add_parser("finetune", help="train LoRA adapters on a text file (PEFT's layout, and llama.cpp's "
                                        "adapter.gguf for a .gguf model)")
    p.add_argument("--model", required=True, help="a .gguf file, folder, URL or hub id (quantized weights stay so)")
    p.add_argument("--data", required=True, type=existing_file,
                   help="a UTF-8 text file to learn, or a .jsonl file of chat conversations ({\"messages\": [...]} "
                        "a line; the loss is on the assistant turns, rendered by the model's chat template)")
    p.add_argument("--out", required=True, help="the adapter folder to write (adapter_config.json, "
                                                "adapter_model.safetensors)")
    p.add_argument("--rank", type=positive_int, default=8, help="LoRA rank r (default 8)")
    p.add_argument("--alpha", type=positive_float, default=None, help="LoRA alpha (default 2 * rank)")
    p.add_argument("--steps", type=positive_int, default=100, help="optimizer steps, one block each (default 100)")
    p.add_argument("--lr", type=positive_float, default=1e-3, help="AdamW learning rate (default 1e-3)")
    p.add_argument("--block", type=positive_int, default=128,
                   help="tokens per step (default 128; a longer conversation is cut)")
    p.add_argument("--seed", type=non_negative_int, default=0, help="the adapters' initialisation seed")
    p.add_argument("--checkpointing", action="store_true",
                   help="gradient checkpointing: recompute each block's activations in backward (less memory for "
                        "long blocks, about a third more time)")
    p.add_argument("--device", default="cpu", help=DEVICE_HELP)
    p.set_defaults(func=main_finetune)


def main_finetune(args):
    from ember.train import lora
    from ember.train.progress import progress_bar

    from .finetune import LoraTuner, chat_examples
    from .load import load_text_model
    chat = str(args.data).lower().endswith(".jsonl")
    if not chat:
        try:
            with open(args.data, encoding="utf-8") as f:
                text = f.read()
        except UnicodeDecodeError as e:
            raise ValueError(f"ember: {args.data} is not UTF-8 text ({e.reason} at byte {e.start})") from None
    model, tok = load_text_model(args.model, device=resolve_device(args.device), activations="float32")
    if tok is None:
        raise ValueError("ember: the model carries no tokenizer")
    data = chat_examples(args.data, tok, args.block) if chat else text
    tuner = LoraTuner(model, tok, data, rank=args.rank, alpha=args.alpha, lr=args.lr, block=args.block,
                      seed=args.seed, checkpointing=args.checkpointing)
    bar = progress_bar(args.steps, desc="finetune")
    try:
        for _ in range(args.steps):
            bar.set_postfix(loss=tuner.step())
            bar.update(1)
    finally:
        bar.close()
    lora.save_adapter(model, args.out, base_model_name_or_path=str(args.model))
    arch = _gguf_arch(args.model)
    if arch is not None:  # llama.cpp's form beside PEFT's, for a GGUF base
        from ..common.lora_gguf import save_gguf_adapter
        save_gguf_adapter(model, os.path.join(args.out, "adapter.gguf"), arch)
    print(json.dumps({"out": args.out, "steps": tuner.steps_done, "first_loss": round(tuner.losses[0], 6),
                      "last_loss": round(tuner.losses[-1], 6), "examples": len(tuner.examples)}))
    return 0
