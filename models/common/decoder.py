"""CausalLM: what every decoder-only language model of the zoo shares: positions (from the cache and a
padding mask), rotary tables, causal / sliding-window / padding / ALiBi masks, the KV cache, the layer loop,
last-token-only logits, a tied or separate output head. An architecture file subclasses it (or LlamaLayout,
layout.py, the llama layout built on it) and supplies its modules (with the checkpoint's names), `embed`, and,
when it differs from the common one, `head`.

    class Falcon(CausalLM):
        def __init__(self, c):
            super().__init__()
            self.model = ...; self.lm_head = ...
            self.setup(n_layers=..., n_heads=..., n_kv_heads=..., head_dim=..., max_seq_len=..., rope=...)

Blocks are called as block(x, rope, mask, cache, layer_index); DecoderBlock is the usual pre-norm one.
"""
from __future__ import annotations

import numpy as np

import ember
from ember import nn
from ember.nn import functional as F
from ember.nn.grad_checkpoint import checkpoint

from .cache import KVCache
from .fused_decode import FusedDecoder, block_parts
from .masks import attention_mask as build_mask
from .mlp import GatedMLP
from .outputs import LMOutput
from .positions import alibi_bias


class DecoderBlock(nn.Module):
    """Pre-norm residual block. Sequential: x + attn(n1(x)), then + mlp(n2(x)). Parallel (GPT-J, Phi-2,
    Falcon): x + attn(n1(x)) + mlp(n2(x) or n1(x) when there is one norm). names: the checkpoint's
    (attention, mlp, first norm, second norm or None)."""

    def __init__(self, attn, mlp, norm1, norm2=None, parallel: bool = False,
                 names=("self_attn", "mlp", "input_layernorm", "post_attention_layernorm")):
        super().__init__()
        self.parallel, self.names = parallel, names
        setattr(self, names[0], attn)
        setattr(self, names[1], mlp)
        setattr(self, names[2], norm1)
        if norm2 is not None:
            setattr(self, names[3], norm2)
        self.two_norms = norm2 is not None

    def decode_parts(self, sources):
        """The arrays of a sequential block with a gated MLP for the fused decode step (fused_decode.py), or None."""
        attn, mlp, n1 = (getattr(self, n) for n in self.names[:3])
        if self.parallel or not self.two_norms or not isinstance(mlp, GatedMLP):
            return None
        return block_parts(sources, attn, mlp, n1, getattr(self, self.names[3]))

    def forward(self, x, rope, mask, cache, layer):
        attn, mlp, n1 = (getattr(self, n) for n in self.names[:3])
        h = n1(x)
        a = attn(h, rope, mask, cache, layer)
        if self.parallel:
            return x + a + mlp(getattr(self, self.names[3])(x) if self.two_norms else h)
        x = x + a
        return x + mlp(getattr(self, self.names[3])(x))


class CausalLM(nn.Module):
    """Subclasses set modules, call setup(), and implement embed(tokens, positions) and blocks().
    gradient_checkpointing: while training without a cache, each block's activations are recomputed in
    backward instead of kept (ember.nn.checkpoint): one block's at a time in memory, one more forward a step."""

    tie_embeddings = False
    gradient_checkpointing = False

    def setup(self, *, n_layers, n_heads, n_kv_heads, head_dim, max_seq_len, rope=None, windows=None,
              alibi: bool = False):
        """rope: a RotaryEmbedding, one per layer (a list), or None; windows: per layer None or its window."""
        self.n_layers, self.n_heads, self.n_kv_heads, self.head_dim = n_layers, n_heads, n_kv_heads, head_dim
        self.max_seq_len, self.rope, self.alibi = max_seq_len, rope, alibi
        self.windows = list(windows) if windows is not None else [None] * n_layers

    # ------------------------------------------------------------------ what an architecture supplies
    def embed(self, tokens, positions):
        """tokens (B, T) int64, positions (1 | B, T) numpy -> (B, T, dim)."""
        raise NotImplementedError

    def blocks(self):
        return self.model.layers

    def final_norm(self, x):
        return self.model.norm(x)

    def output_embedding(self):
        """The (vocab, dim) weight the logits are read with when tied."""
        return self.model.embed_tokens.weight

    def head(self, x):                                                          # (B, T, dim) -> (B, T, vocab)
        if self.tie_embeddings:
            return F.linear(x, self.output_embedding())
        return self.lm_head(x)

    # ------------------------------------------------------------------ shared
    @property
    def device(self):
        return self._first_parameter().device

    def _dtype(self):  # host-built constants (masks, rotations) follow the weights' dtype
        return self._first_parameter().dtype

    def _first_parameter(self):
        """next(iter(self.parameters())), kept until a module anywhere gains or loses a parameter or a submodule
        (the device and dtype are read at every decoded token; walking a quantized model's modules to its first
        parameter cost ~17 us a read under Pyodide). A parameter moved by .to() stays the same object."""
        hit = self.__dict__.get("_first_param")
        if hit is None or hit[0] != nn.structure_version():
            hit = self.__dict__["_first_param"] = (nn.structure_version(), next(iter(self.parameters())))
        return hit[1]

    def _linear_weights(self):  # a tied embedding is also the output weight: stored the way F.linear reads it
        w = self.output_embedding() if self.tie_embeddings else None
        return (w,) if isinstance(w, nn.Parameter) else ()

    def _mask(self, idx, kpos, window, valid, dtype, device):
        """The additive mask of queries at positions idx over keys at kpos (-1: an unwritten ring slot)."""
        empty = kpos < 0
        if empty.any():  # an empty slot is masked as a future key would be
            kpos = np.where(empty, idx[-1] + 1, kpos)
        if valid is not None:
            valid = valid[:, np.minimum(kpos, valid.shape[1] - 1)] & ~empty
        bias = alibi_bias(self.n_heads, kpos) if self.alibi else None
        return build_mask(idx, kpos, window=window, bias=bias, key_valid=valid,
                          group=self.n_heads // self.n_kv_heads, dtype=dtype, device=device)

    def new_cache(self, max_len: int | None = None) -> KVCache:
        m = min(max_len or self.max_seq_len, self.max_seq_len)
        return KVCache(self.n_layers, self.n_kv_heads, self.head_dim, m, self.windows)

    def forward(self, input_ids, cache: KVCache | None = None, last_only: bool = False, attention_mask=None, *,
                past_key_values: KVCache | None = None, use_cache: bool = False, head=None) -> LMOutput:
        """input_ids (B, T) int64 (ember tensor, numpy or nested lists) -> logits (B, T, vocab) (or (B, 1, vocab)
        with last_only) as an LMOutput: the logits tensor, also `.logits` and `.past_key_values` as
        transformers'. With a cache (or past_key_values=, its transformers name; use_cache=True starts one)
        the tokens continue the cached sequence and the cache advances by T. attention_mask (B, cached + T)
        0/1 (1: a real token) marks padding; positions then count real tokens only, as transformers'.
        head: what replaces self.head on the final normed states, its result returned as is (generate's
        greedy_head: the picked id)."""
        cache = cache if cache is not None else past_key_values
        if cache is None and use_cache:
            cache = self.new_cache()
        tokens = input_ids if isinstance(input_ids, ember.Tensor) else \
            ember.tensor(np.asarray(input_ids, np.int64), device=self.device)
        if tokens.ndim != 2:
            raise ValueError(f"ember: input_ids must be (batch, T), got shape {tuple(tokens.shape)}")
        T = tokens.shape[1]                                                     # tokens (B, T)
        start = cache.pos if cache is not None else 0
        if cache is not None:
            cache.check_room(T)
        elif T > self.max_seq_len:
            raise ValueError(f"ember: {T} tokens exceed the context length {self.max_seq_len}")
        idx = np.arange(start, start + T)
        valid = None
        if attention_mask is not None:
            am = np.asarray(attention_mask.numpy() if hasattr(attention_mask, "numpy") else attention_mask)
            if am.shape != (tokens.shape[0], start + T):
                raise ValueError(f"ember: attention_mask {am.shape} does not cover the {start} cached + {T} "
                                 f"new tokens of batch {tokens.shape[0]}")
            valid = am.astype(bool)
            positions = np.where(valid, np.cumsum(valid, -1) - 1, 1)[:, start:]  # (B, T)
            if valid.all():
                valid = None
        else:
            positions = idx[None, :]                                            # (1, T)
        dtype, device = self._dtype(), self.device
        if T == 1 and cache is not None and valid is None and tokens.shape[0] == 1 and not (
                ember.autograd.is_grad_enabled() and any(p.requires_grad for p in self.parameters())):
            fused = self.__dict__.get("_fused_decoder")
            if fused is None:
                fused = self.__dict__["_fused_decoder"] = FusedDecoder(self)
            plan = fused.plan()
            if plan is not None:  # one kernel call through every layer (the device's decoder_plan primitive)
                x = fused.step(plan, self.embed(tokens, positions), cache)
                x = x if plan.final_norm else self.final_norm(x)
                return head(x) if head is not None else LMOutput.of(self.head(x), past_key_values=cache)
        ropes = self.rope if isinstance(self.rope, list) else [self.rope] * self.n_layers  # per layer (Gemma 3: 2 kinds)
        # once per distinct rope (a comprehension over the layers would build, and upload, one per layer)
        steps = {id(r): r.at(positions, dtype, device) for r in {id(r): r for r in ropes if r is not None}.values()}
        masks = {}
        x = self.embed(tokens, positions)                                       # (B, T, dim)
        for i, block in enumerate(self.blocks()):
            key = self.windows[i]  # the layers of one window see the same key positions at a step
            if key not in masks:
                masks[key] = self._mask(idx, cache.key_positions(i, T) if cache is not None else idx, key, valid,
                                        dtype, device)
            if self.gradient_checkpointing and self.training and cache is None:
                x = checkpoint(block, x, steps.get(id(ropes[i])), masks[key], None, i)
            else:
                x = block(x, steps.get(id(ropes[i])), masks[key], cache, i)
        if cache is not None:
            cache.pos += T
        if last_only and T > 1:
            x = x.narrow(1, T - 1, 1)
        if head is not None:
            return head(self.final_norm(x))
        return LMOutput.of(self.head(self.final_norm(x)), past_key_values=cache)  # (B, T, vocab)
