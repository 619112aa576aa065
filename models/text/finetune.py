"""LoRA fine-tuning of a causal LM (ember.train.lora): the loop `ember finetune` and the page's Teach panel
(wasm/tools/llama_teach.py) share. Plain text is tokenized (BOS first) and cut into blocks of `block` + 1 tokens;
chat data (JSONL of {"messages": [...]}, ember.data.ChatExamples) is rendered by the model's chat template, one
conversation an example of at most `block` tokens, with the loss on the assistant turns only. Step i trains on
example i mod n, one example a step, AdamW on the adapters only (the base, float or quantized, stays frozen).

    tuner = LoraTuner(model, tok, text, rank=8, lr=1e-3, seed=0)          # or chat_examples("data.jsonl", tok)
    for _ in range(steps): loss = tuner.step()
    ember.train.lora.save_adapter(model, "adapter/")
"""
from __future__ import annotations

import numpy as np

import ember
from ember.data import ChatExamples, parse_chat_jsonl, read_chat_jsonl
from ember.data.chat import IGNORE_INDEX
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


def chat_examples(path, tok, block: int = 512, text: str | None = None) -> ChatExamples:
    """The conversations of a chat JSONL file rendered by the tokenizer's chat template: (inputs, labels) each,
    labels IGNORE_INDEX off the assistant turns, at most `block` tokens. text: the JSONL itself (the page's pasted
    or dropped file; `path` then only names it in errors)."""
    if tok.chat_template is None:
        raise FinetuneError(f"ember: {path} is chat data, and this model carries no chat template to render it "
                            "(train a base model on plain text)")
    convs = read_chat_jsonl(path) if text is None else parse_chat_jsonl(text, str(path))
    return ChatExamples(convs, tok.chat_template.render,
                        lambda t: tok.encode(t, bos=False, special=True), block, where=str(path))


class LoraTuner:
    """Adapters on `model` (added here: any earlier ones are removed) and the optimizer that trains them. `data`:
    plain text (cut into blocks) or a dataset of (inputs, labels) pairs (chat_examples)."""

    def __init__(self, model, tok, data, *, rank: int = 8, alpha: float | None = None, lr: float = 1e-3,
                 block: int = 64, seed: int = 0, targets=TARGETS, weight_decay: float = 0.0,
                 checkpointing: bool = False):
        """checkpointing: recompute each block's activations in backward (CausalLM.gradient_checkpointing): the
        same numbers, far less memory for long blocks, about a third more time a step."""
        self.model = model
        model.gradient_checkpointing = bool(checkpointing)
        if isinstance(data, str):
            self.blocks = text_blocks(data, tok, block)                         # (n, T + 1)
            self.examples = [(b[:-1], b[1:]) for b in self.blocks]
        else:
            self.blocks, self.examples = None, [data[i] for i in range(len(data))]
        lora.unload(model)
        lora.add_adapters(model, lora.LoraConfig(r=rank, lora_alpha=2 * rank if alpha is None else alpha,
                                                 target_modules=list(targets)), seed=seed)
        self.opt = ember.optim.AdamW(lora.lora_parameters(model), lr=lr, weight_decay=weight_decay)
        self.steps_done, self.losses = 0, []

    def step(self) -> float:
        """One AdamW step on the next example; returns its loss (before the update): the mean cross-entropy over
        the labelled positions (a chat example's assistant tokens)."""
        m, device = self.model, self.model.device
        inputs, labels = self.examples[self.steps_done % len(self.examples)]
        x, y = ember.tensor(inputs[None], device=device), ember.tensor(labels[None], device=device)  # (1, T) each
        m.train()
        try:
            out = m(x)
            logits = getattr(out, "logits", out)                                # (1, T, vocab)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), ignore_index=IGNORE_INDEX)
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
        finally:
            m.eval()
        self.steps_done += 1
        self.losses.append(float(loss.item()))
        return self.losses[-1]
