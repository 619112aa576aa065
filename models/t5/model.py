"""T5 / T5 v1.1 / Flan-T5 (after transformers' models/t5/modeling_t5.py, v5.x): an encoder-decoder with
unscaled attention plus a learned relative position bias (computed in the first block of each stack, shared
by the others), RMS LayerNorms without mean, ReLU or gated-GELU MLPs (DenseReluDense), cross-attention
(the toolkit's Attention with kv= memory_kv), the output tied to `shared` (then scaled by d_model^-1/2) or
a separate lm_head. Names are T5ForConditionalGeneration's. Greedy / sampled generation with a KV cache.
"""
from __future__ import annotations

import numpy as np

import ember
from ember import nn
from ember.errors import FormatError
from ember.limits import check_config

from ..common.attention import Attention
from ..common.cache import KVCache
from ..common.masks import attention_mask, padding_mask
from ..common.mlp import MLP, GatedMLP
from ..common.outputs import LMOutput
from ..common.positions import t5_relative_bucket


class T5Config:
    def __init__(self, d: dict):
        try:
            self.vocab, self.dim, self.d_kv, self.d_ff = int(d["vocab_size"]), int(d["d_model"]), int(d["d_kv"]), int(d["d_ff"])
            self.n_layers, self.n_heads = int(d["num_layers"]), int(d["num_heads"])
        except (KeyError, TypeError, ValueError) as e:
            raise FormatError(f"ember: t5 config.json: bad or missing field {e}") from None
        self.n_dec = int(d.get("num_decoder_layers") or self.n_layers)
        self.buckets, self.max_distance = int(d.get("relative_attention_num_buckets", 32)), int(d.get("relative_attention_max_distance", 128))
        self.eps = float(d.get("layer_norm_epsilon", 1e-6))
        ff = d.get("feed_forward_proj", "relu")
        self.gated, act = ff.startswith("gated-"), ff.split("-")[-1]
        self.act = "gelu_new" if act == "gelu" and self.gated else act
        self.tied = bool(d.get("tie_word_embeddings", True))
        self.scale_out = bool(d.get("scale_decoder_outputs", self.tied))
        self.start_id, self.eos_id = int(d.get("decoder_start_token_id", 0) or 0), d.get("eos_token_id", 1)
        check_config("t5 config.json", "vocab", vocab_size=self.vocab)
        check_config("t5 config.json", "width", d_model=self.dim, d_ff=self.d_ff, num_heads=self.n_heads, d_kv=self.d_kv)
        check_config("t5 config.json", "layers", num_layers=self.n_layers, num_decoder_layers=self.n_dec)


def _attn(c: T5Config, bias: bool):
    a = Attention(c.dim, c.n_heads, head_dim=c.d_kv, scale=1.0, names=("q", "k", "v", "o"))
    if bias:
        a.relative_attention_bias = nn.Embedding(c.buckets, c.n_heads)             # (buckets, heads)
    return a


class Sub(nn.Module):
    """One `layer.N` entry: a norm and what it feeds (SelfAttention, EncDecAttention or DenseReluDense)."""

    def __init__(self, name, mod, c: T5Config):
        super().__init__()
        self.name = name
        setattr(self, name, mod)
        self.layer_norm = nn.RMSNorm(c.dim, eps=c.eps)                               # (dim,)

    def forward(self, x, *args, **kw):
        return x + getattr(self, self.name)(self.layer_norm(x), *args, **kw)


class Block(nn.Module):
    def __init__(self, c: T5Config, first: bool, decoder: bool):
        super().__init__()
        ff = GatedMLP(c.dim, c.d_ff, c.act, names=("wi_0", "wi_1", "wo")) if c.gated else \
            MLP(c.dim, c.d_ff, c.act, bias=False, names=("wi", "wo"))
        subs = [Sub("SelfAttention", _attn(c, first), c)]
        if decoder:
            subs.append(Sub("EncDecAttention", _attn(c, False), c))
        self.layer = nn.ModuleList(subs + [Sub("DenseReluDense", ff, c)])


class Stack(nn.Module):
    def __init__(self, c: T5Config, n: int, decoder: bool):
        super().__init__()
        self.block = nn.ModuleList([Block(c, i == 0, decoder) for i in range(n)])
        self.final_layer_norm = nn.RMSNorm(c.dim, eps=c.eps)                         # (dim,)
        self.decoder, self.c = decoder, c

    def position_bias(self, q_pos, k_pos):
        """(heads, T, S) learned bias of the (key - query) buckets."""
        b = t5_relative_bucket(k_pos[None, :] - q_pos[:, None], not self.decoder, self.c.buckets, self.c.max_distance)
        table = self.block[0].layer[0].SelfAttention.relative_attention_bias.weight.numpy()  # (buckets, heads)
        return table[b].transpose(2, 0, 1)                                           # (heads, T, S)

    def forward(self, x, valid=None, cache=None, memory=None, mem_mask=None):
        T, start = x.shape[1], cache.pos if cache is not None else 0
        q, k = np.arange(start, start + T), np.arange(0, start + T)
        mask = attention_mask(q, k, causal=self.decoder, key_valid=valid, bias=self.position_bias(q, k),
                              dtype=x.dtype, device=x.device)
        for i, blk in enumerate(self.block):
            x = blk.layer[0](x, None, mask, cache, i)
            if self.decoder:
                x = blk.layer[1](x, mask=mem_mask, kv=memory[i])
            x = blk.layer[-1](x)
        if cache is not None:
            cache.pos += T
        return self.final_layer_norm(x)


class T5ForConditionalGeneration(nn.Module):
    def __init__(self, config: T5Config):
        super().__init__()
        self.config = c = config
        self.shared = nn.Embedding(c.vocab, c.dim)                                   # (vocab, dim)
        self.encoder, self.decoder = Stack(c, c.n_layers, False), Stack(c, c.n_dec, True)
        if not c.tied:
            self.lm_head = nn.Linear(c.dim, c.vocab, bias=False)                     # (vocab, dim)

    @property
    def device(self):
        return self.shared.weight.device

    def _linear_weights(self):  # the tied table is also the output weight: stored the way F.linear reads it
        return (self.shared.weight,) if self.config.tied else ()

    def encoder_states(self, input_ids, attention_mask=None):
        """(B, S, dim) encoder output (transformers' encoder_last_hidden_state) and the (B, S) bool mask or None."""
        ids = np.asarray(input_ids.numpy() if hasattr(input_ids, "numpy") else input_ids, np.int64)   # (B, S)
        valid = None if attention_mask is None else np.asarray(
            attention_mask.numpy() if hasattr(attention_mask, "numpy") else attention_mask, bool)
        return self.encoder(self.shared(ember.tensor(ids, device=self.device)), valid), valid  # (B, S, dim)

    def cross_memory(self, h, valid=None):
        """Every decoder layer's cross-attention (k, v) of encoder states h, and their padding mask."""
        mem = [blk.layer[1].EncDecAttention.memory_kv(h) for blk in self.decoder.block]
        return mem, None if valid is None else padding_mask(valid, h.dtype, self.device)

    def encode(self, input_ids, attention_mask=None):
        return self.cross_memory(*self.encoder_states(input_ids, attention_mask))

    def decode(self, decoder_ids, memory, mem_mask, cache=None):
        x = self.shared(ember.tensor(np.asarray(decoder_ids, np.int64), device=self.device))
        x = self.decoder(x, None, cache, memory, mem_mask)                           # (B, T, dim)
        if self.config.tied:
            from ember.nn import functional as F
            return F.linear(x * (self.config.dim ** -0.5) if self.config.scale_out else x, self.shared.weight)
        return self.lm_head(x)                                                       # (B, T, vocab)

    def forward(self, input_ids, decoder_input_ids, attention_mask=None) -> LMOutput:
        """Teacher-forced logits (B, T, vocab) as an LMOutput (also `.logits`, `.encoder_last_hidden_state`)."""
        h, valid = self.encoder_states(input_ids, attention_mask)
        return LMOutput.of(self.decode(decoder_input_ids, *self.cross_memory(h, valid)), encoder_last_hidden_state=h)

    def generate(self, input_ids, max_new_tokens: int = 32, params=None, attention_mask=None) -> list[list[int]]:
        """Generated ids per row (decoder start token excluded, stopped at eos), greedy by default."""
        from ..common.generate import Sampler, SamplingParams
        sampler = Sampler(params or SamplingParams(temperature=0))
        with ember.no_grad():
            mem, mm = self.encode(input_ids, attention_mask)
            B = mem[0][0].shape[0]
            cache = KVCache(self.config.n_dec, self.config.n_heads, self.config.d_kv, max_new_tokens + 1)
            step, out, done = np.full((B, 1), self.config.start_id), [[] for _ in range(B)], [False] * B
            for _ in range(max_new_tokens):
                rows = self.decode(step, mem, mm, cache).numpy()[:, -1]
                for r in range(B):
                    t = sampler(rows[r], out[r]) if not done[r] else self.config.start_id
                    done[r] = done[r] or t == self.config.eos_id
                    if not done[r]:
                        out[r].append(t)
                    step[r, 0] = t
                if all(done):
                    break
        return out


TIED = ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight")


def build_from_hf(config: dict, sd: dict, where: str) -> T5ForConditionalGeneration:
    c = T5Config(config)
    sd = {k: v for k, v in sd.items() if k not in TIED and not (c.tied and k == "lm_head.weight")}
    model = T5ForConditionalGeneration(c)
    model.load_state_dict(sd, strict=True, source=where)
    return model
