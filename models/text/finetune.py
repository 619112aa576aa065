"""LoRA fine-tuning of a causal LM on plain text (ember.train.lora): the loop `ember finetune` and the page's Teach
panel (wasm/tools/llama_teach.py) share. The text is tokenized (BOS first) and cut into blocks of `block` + 1
tokens; step i trains on block i mod n, one block a step, AdamW on the adapters only (the base, float or
quantized, stays frozen).

    tuner = LoraTuner(model, tok, text, rank=8, lr=1e-3, seed=0)
    for _ in range(steps): loss = tuner.step()
    ember.train.lora.save_adapter(model, "adapter/")
"""
from __future__ import annotations

import numpy as np

import ember
from ember.errors import EmberError
from ember.nn import functional as F
from ember.train import lora

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


class FinetuneError(EmberError, ValueError):
    """Text or options that cannot train: too little text, a bad block size."""


def text_blocks(text: str, tok, block: int) -> np.ndarray:
    """(n, T + 1) int64 token blocks of the text (T = block, or less where the text is shorter)."""
    if not isinstance(text, str) or not text.strip():
        raise FinetuneError("ember: the training text is empty")
    if "\x00" in text:
        raise FinetuneError("ember: the training text holds NUL characters: a binary file, not text")
    if block < 1:
        raise FinetuneError(f"ember: block must be at least 1 token, got {block}")
    ids = np.asarray(tok.encode(text, bos=True, special=False), np.int64)  # pasted text is text, not control tokens
    if len(ids) < 3:
        raise FinetuneError(f"ember: the training text is {len(ids)} tokens; fine-tuning needs at least 3")
    t = min(block, len(ids) - 1)
    n = (len(ids) - 1) // t
    return np.stack([ids[i * t: i * t + t + 1] for i in range(n)])             # (n, t + 1)


class LoraTuner:
    """Adapters on `model` (added here: any earlier ones are removed) and the optimizer that trains them."""

    def __init__(self, model, tok, text: str, *, rank: int = 8, alpha: float | None = None, lr: float = 1e-3,
                 block: int = 64, seed: int = 0, targets=TARGETS, weight_decay: float = 0.0):
        self.model, self.blocks = model, text_blocks(text, tok, block)
        lora.unload(model)
        lora.add_adapters(model, lora.LoraConfig(r=rank, lora_alpha=2 * rank if alpha is None else alpha,
                                                 target_modules=list(targets)), seed=seed)
        self.opt = ember.optim.AdamW(lora.lora_parameters(model), lr=lr, weight_decay=weight_decay)
        self.steps_done, self.losses = 0, []

    def step(self) -> float:
        """One AdamW step on the next block; returns its loss (before the update)."""
        m, device = self.model, self.model.device
        b = self.blocks[self.steps_done % len(self.blocks)][None]               # (1, T + 1)
        x, y = ember.tensor(b[:, :-1], device=device), ember.tensor(b[:, 1:], device=device)
        m.train()
        try:
            out = m(x)
            logits = getattr(out, "logits", out)                                # (1, T, vocab)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
        finally:
            m.eval()
        self.steps_done += 1
        self.losses.append(float(loss.item()))
        return self.losses[-1]
