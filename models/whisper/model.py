"""Whisper encoder-decoder in ember, after openai/whisper model.py (v20240930), with parameter
names of transformers' WhisperModel so Hugging Face checkpoints load strictly.

The attention is the zoo toolkit's (ember.models.common): the decoder's self-attention writes an explicit
KVCache passed in and returned (no hooks), and the cross-attention K/V of a 30 s window are computed once
by `TextDecoder.cross_kv`. No I/O, no backend names: the same code runs on any ember device (numpy in
CPython and Pyodide, WebGPU, CUDA).
"""
from __future__ import annotations

import numpy as np

import ember
import ember.nn as nn
import ember.nn.functional as F

from ..common.attention import Attention
from ..common.cache import KVCache
from ..common.masks import attention_mask
from ..common.mlp import linear_then_act
from .config import ModelDimensions
from .fused_decode import FusedXattnDecoder
from ember.errors import FormatError

KV = tuple  # (k, v), each (batch, n_head, seq, head_dim)


class WhisperShapeError(FormatError):
    """An input to the model has the wrong shape or is out of the model's range."""


# Every weight comes from a checkpoint, so the MLP and tables skip torch-style random initialisation
# (drawing nn.Embedding's 20M normal samples alone takes seconds).
class Linear(nn.Linear):
    def reset_parameters(self):
        pass


class Embedding(nn.Module):
    """A (num, dim) table under the name `weight`, as nn.Embedding, left uninitialised."""

    def __init__(self, num: int, dim: int):
        super().__init__()
        self.weight = nn.Parameter(ember.empty(num, dim))  # (num, dim)

    def forward(self, idx):
        return F.embedding(idx, self.weight)


def _attention(n_state: int, n_head: int) -> Attention:
    # Whisper's key projection has no bias; q, v and out do
    return Attention(n_state, n_head, bias=(True, False, True), out_bias=True,
                     names=("q_proj", "k_proj", "v_proj", "out_proj"))


class ResidualAttentionBlock(nn.Module):
    """Pre-norm block: self-attention, [cross-attention], GELU MLP, each added to the residual."""

    def __init__(self, n_state: int, n_head: int, n_ffn: int, cross_attention: bool):
        super().__init__()
        self.self_attn = _attention(n_state, n_head)
        self.self_attn_layer_norm = nn.LayerNorm(n_state)  # (n_state,) weight and bias
        if cross_attention:
            self.encoder_attn = _attention(n_state, n_head)
            self.encoder_attn_layer_norm = nn.LayerNorm(n_state)  # (n_state,)
        self.fc1 = Linear(n_state, n_ffn)  # (n_ffn, n_state)
        self.fc2 = Linear(n_ffn, n_state)  # (n_state, n_ffn)
        self.final_layer_norm = nn.LayerNorm(n_state)  # (n_state,)

    def forward(self, x, mask=None, cache: KVCache | None = None, layer: int = 0, cross: KV | None = None):
        x = x + self.self_attn(self.self_attn_layer_norm(x), None, mask, cache, layer)
        if cross is not None:
            x = x + self.encoder_attn(self.encoder_attn_layer_norm(x), kv=cross)
        return x + self.mlp(self.final_layer_norm(x))

    def mlp(self, x):
        """fc2(gelu(fc1(x))), fc1 and its GELU one op where they can be (linear_then_act)."""
        return self.fc2(linear_then_act(self.fc1, x, "gelu", F.gelu))  # (B, T, n_ffn) inside


class AudioEncoder(nn.Module):
    def __init__(self, dims: ModelDimensions):
        super().__init__()
        d = dims.n_audio_state
        self.n_ctx = dims.n_audio_ctx
        self.conv1 = nn.Conv1d(dims.n_mels, d, kernel_size=3, padding=1)  # (d, n_mels, 3)
        self.conv2 = nn.Conv1d(d, d, kernel_size=3, stride=2, padding=1)  # (d, d, 3)
        self.embed_positions = Embedding(dims.n_audio_ctx, d)  # (1500, d), sinusoids in the file
        self.layers = nn.ModuleList(ResidualAttentionBlock(d, dims.n_audio_head, dims.n_audio_ffn, False)
                                    for _ in range(dims.n_audio_layer))
        self.layer_norm = nn.LayerNorm(d)  # (d,)

    def forward(self, mel):
        """mel (batch, n_mels, 2 * n_audio_ctx) -> audio features (batch, n_audio_ctx, d)."""
        want = (self.conv1.in_channels, 2 * self.n_ctx)
        if mel.ndim != 3 or tuple(mel.shape[1:]) != want:
            raise WhisperShapeError(f"ember: Whisper encoder expects a log-mel (batch, {want[0]}, {want[1]}), "
                                    f"got {tuple(mel.shape)}; pad the features to 30 s")
        c1, c2 = self.conv1, self.conv2  # each with its bias and GELU in one kernel where the device has one
        x = F.conv_act(mel.to(c1.weight.dtype), c1.weight, c1.bias, c1.stride, c1.padding, act="gelu")  # (batch, d, 3000)
        x = F.conv_act(x, c2.weight, c2.bias, c2.stride, c2.padding, act="gelu").transpose(1, 2)  # (batch, 1500, d)
        x = x + self.embed_positions.weight
        for layer in self.layers:
            x = layer(x)
        return self.layer_norm(x)


class TextDecoder(nn.Module):
    def __init__(self, dims: ModelDimensions):
        super().__init__()
        d = dims.n_text_state
        self.n_ctx, self.n_head, self.head_dim = dims.n_text_ctx, dims.n_text_head, d // dims.n_text_head
        self.embed_tokens = Embedding(dims.n_vocab, d)  # (n_vocab, d), also the output projection
        self.embed_positions = Embedding(dims.n_text_ctx, d)  # (448, d)
        self.layers = nn.ModuleList(ResidualAttentionBlock(d, dims.n_text_head, dims.n_text_ffn, True)
                                    for _ in range(dims.n_text_layer))
        self.layer_norm = nn.LayerNorm(d)  # (d,)
        self.fused = FusedXattnDecoder(self)  # one token's layers in one kernel, where the device has it

    def cross_kv(self, audio_features) -> list[KV]:
        """Each layer's cross-attention keys/values for audio features (batch, 1500, d), computed
        once per 30 s window and reused for every token. Stored contiguous per head: every decoded token
        reads all of them, and whole (1500, head_dim) blocks stream from memory ~1.6x faster than the
        head-interleaved rows of the projection's output."""
        return [tuple(t.contiguous() for t in layer.encoder_attn.memory_kv(audio_features)) for layer in self.layers]

    def new_cache(self) -> KVCache:
        return KVCache(len(self.layers), self.n_head, self.head_dim, self.n_ctx)

    def forward(self, tokens, cross: list[KV], cache: KVCache | None = None):
        """tokens (batch, T) following the `cache` positions -> (hidden (batch, T, d), the cache advanced by T;
        a new one when None)."""
        cache = self.new_cache() if cache is None else cache
        offset, t = cache.pos, tokens.shape[1]
        if offset + t > self.n_ctx:
            raise WhisperShapeError(f"ember: Whisper decoder holds {self.n_ctx} positions; got {offset} cached "
                                    f"+ {t} new tokens")
        if t == 1 and tokens.shape[0] == 1 and not ember.is_grad_enabled():
            plan = self.fused.plan()
            if plan is not None:
                return self.fused.step(plan, int(tokens.numpy()[0, 0]), cross, cache), cache
        x = self.embed_tokens(tokens) + self.embed_positions.weight[offset:offset + t]  # (batch, T, d)
        # causal over the new tokens; every cached position stays visible (None for one token)
        mask = attention_mask(np.arange(offset, offset + t), np.arange(offset + t), dtype=x.dtype, device=x.device)
        for i, layer in enumerate(self.layers):
            x = layer(x, mask, cache, i, cross[i])
        cache.pos += t
        return self.layer_norm(x), cache

    def _linear_weights(self):  # the tied embedding is also the output projection: store it as F.linear reads it
        return (self.embed_tokens.weight,)

    def logits(self, hidden):
        """hidden (batch, T, d) -> logits (batch, T, n_vocab) through the tied embedding (one token's in the fused
        plan where it runs the head)."""
        fused = self.fused.logits(hidden)
        return fused if fused is not None else hidden @ self.embed_tokens.weight.transpose(0, 1)


class Whisper(nn.Module):
    def __init__(self, dims: ModelDimensions):
        super().__init__()
        self.dims = dims
        self.encoder = AudioEncoder(dims)
        self.decoder = TextDecoder(dims)

    def embed_audio(self, mel):
        return self.encoder(mel)

    def forward(self, mel, tokens):
        """Teacher-forced logits (batch, T, n_vocab) for mel (batch, n_mels, 3000), tokens (batch, T)."""
        hidden, _ = self.decoder(tokens, self.decoder.cross_kv(self.encoder(mel)))
        return self.decoder.logits(hidden)
