"""Train a small Llama with ember's own autograd and AdamW on a token stream (the demo model's recipe):
the stream is packed into blocks by ember.data, and ember.train's loop runs the steps.

    python -m ember.models.llama.train --data DIR --out models/llama/demo --minutes 20 --log train.log

DIR holds corpus.txt and tokenizer.json (see corpus.py); the checkpoint is written in Hugging Face layout
(config.json, model.safetensors, tokenizer.json) every --save-every steps and at the end.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import time

import numpy as np

import ember
from ember.argtypes import existing_folder, non_negative_int, positive_float, positive_int, writable_file
from ember.data import DataLoader, TokenBlocks
from ember.train import Trainer, classification_loss

from .config import LlamaConfig
from .model import Llama


def token_loader(tokens: np.ndarray, batch: int, seq: int, seed: int) -> DataLoader:
    """The token stream packed into blocks of seq + 1 (inputs and next-token targets, ember.data.TokenBlocks),
    batched and shuffled afresh each epoch from `seed`; a short last batch is dropped."""
    blocks = TokenBlocks(tokens, seq)
    if len(blocks) < batch:
        raise ValueError(f"ember: the corpus has {len(tokens)} tokens: {len(blocks)} blocks of {seq + 1}, "
                         f"fewer than one batch of {batch}")
    return DataLoader(blocks, batch_size=batch, shuffle=True, seed=seed, drop_last=True)


def lm_loss(model: Llama, x, y):
    return classification_loss(model(x), y)                                      # logits (B, T, vocab)


def init_weights(model: Llama, seed: int, std: float = 0.02):
    """Normal(0, std) weights, output projections scaled by 1/sqrt(2 n_layers) (GPT-2's recipe), unit norms."""
    rng = np.random.default_rng(seed)
    scale = 1.0 / math.sqrt(2 * model.config.n_layers)
    for name, p in model.named_parameters():
        if p.ndim == 1:
            p.copy_(np.ones(p.shape, np.float32))
        else:
            s = std * (scale if name.endswith(("o_proj.weight", "down_proj.weight")) else 1.0)
            p.copy_(rng.normal(0, s, p.shape).astype(np.float32))


def train(model: Llama, tokens: np.ndarray, *, steps: int, batch: int, seq: int, lr: float = 3e-3,
          weight_decay: float = 0.1, warmup: int = 50, seed: int = 0, minutes: float | None = None,
          log=None, on_checkpoint=None, save_every: int = 0) -> list[float]:
    """AdamW with warmup + cosine decay over epochs of shuffled token blocks (ember.train.Trainer); returns
    the per-step losses. Stops early after `minutes`."""
    params = list(model.parameters())
    decay = [p for p in params if p.ndim >= 2]
    no_decay = [p for p in params if p.ndim < 2]
    opt = ember.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=lr, betas=(0.9, 0.95))
    sched = ember.optim.warmup_cosine(opt, warmup, steps, min_ratio=0.1)
    loader = token_loader(tokens, batch, seq, seed)
    trainer = Trainer(model, opt, loader, loss_fn=classification_loss, scheduler=sched)
    losses, t0 = [], time.time()
    for ev in trainer.steps(epochs=-(-steps // len(loader))):
        if ev["kind"] != "step":
            continue
        losses.append(ev["loss"])
        elapsed = time.time() - t0
        if log is not None:
            log.write(json.dumps({"step": len(losses) - 1, "loss": round(losses[-1], 4), "lr": sched.get_last_lr()[0],
                                  "s": round(elapsed, 1)}) + "\n")
            log.flush()
        if on_checkpoint is not None and save_every and len(losses) % save_every == 0:
            on_checkpoint(len(losses))
        if len(losses) >= steps or (minutes is not None and elapsed > 60 * minutes):
            break
    return losses


def main(argv=None):
    ap = argparse.ArgumentParser(prog="ember train-llama", description="Train a small Llama with ember.")
    add_arguments(ap)
    run(ap.parse_args(argv))


def add_arguments(ap):
    # validated before the corpus is read or a model is built: a bad value exits 2 with the flag named
    ap.add_argument("--data", required=True, type=existing_folder,
                    help="folder with corpus.txt and tokenizer.json (corpus.py makes them)")
    ap.add_argument("--out", required=True, help="output folder (HF layout)")
    for flag, default in (("--dim", 192), ("--layers", 4), ("--heads", 6), ("--kv-heads", 6), ("--hidden", 512),
                          ("--seq", 128), ("--batch", 16), ("--steps", 1000)):
        ap.add_argument(flag, type=positive_int, default=default)
    ap.add_argument("--save-every", type=non_negative_int, default=100, help="0 = only at the end")
    ap.add_argument("--lr", type=positive_float, default=3e-3)
    ap.add_argument("--minutes", type=positive_float, default=None, help="stop after this many minutes")
    ap.add_argument("--dtype", default="float16", choices=("float32", "float16", "bfloat16"), help="stored weight dtype")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cpu", help="where the model trains: cpu (default), auto (see ember llama "
                    "--help), webgpu, cuda")
    ap.add_argument("--log", type=writable_file, default=None, help="JSON-lines loss log")


def run(a):
    from ember.tokenizers import Tokenizer

    from .load import save_pretrained
    tok_path = os.path.join(a.data, "tokenizer.json")
    tok = Tokenizer.from_file(tok_path)
    with open(os.path.join(a.data, "corpus.txt"), encoding="utf-8") as f:
        tokens = np.asarray(tok.encode(f.read(), add_special_tokens=False).ids, np.int64)
    cfg = LlamaConfig(vocab_size=tok.get_vocab_size(), dim=a.dim, hidden_dim=a.hidden, n_layers=a.layers,
                      n_heads=a.heads, n_kv_heads=a.kv_heads, max_seq_len=a.seq * 2, norm_eps=1e-5,
                      tie_embeddings=True, bos_token_id=tok.token_to_id("<s>"), eos_token_ids=[tok.token_to_id("</s>")])
    model = Llama(cfg)
    init_weights(model, a.seed)
    model.to(a.device)
    print(f"{cfg.n_params / 1e6:.2f}M parameters, {len(tokens)} corpus tokens, on {a.device}")

    def save(step):
        save_pretrained(model, a.out, tokenizer_json=tok_path, dtype=a.dtype)
        print(f"step {step}: saved {a.out}", flush=True)

    log = open(a.log, "a") if a.log else None
    try:
        losses = train(model, tokens, steps=a.steps, batch=a.batch, seq=a.seq, lr=a.lr, seed=a.seed,
                       minutes=a.minutes, log=log, on_checkpoint=save, save_every=a.save_every)
    finally:
        if log:
            log.close()
    if not (a.save_every and len(losses) % a.save_every == 0):
        save(len(losses))
    print(f"final loss {np.mean(losses[-20:]):.3f} after {len(losses)} steps")


if __name__ == "__main__":
    main()
