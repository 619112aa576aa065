"""Position encodings shared by the zoo: rotary embeddings (rotate-half and interleaved layouts, partial
rotary, the linear / Llama 3 / YaRN frequency scalings as transformers' modeling_rope_utils.py computes them),
the rotary row layouts of q/k projections, ALiBi slopes and biases, sinusoidal tables. Tables are built on
the host in numpy (float32 as transformers builds them) and become small tensors per forward step.
"""
from __future__ import annotations

import math

import numpy as np

import ember
from ember.errors import FormatError
from ember.nn import functional as F


class PositionConfigError(FormatError):
    """A rope_scaling / rotary setting ember does not implement (names the field)."""


# ============================================================================ rotary frequencies

def _rounded(x64: np.ndarray) -> np.ndarray:
    """A float64 result rounded to float32: numpy's float32 pow/cos/sin are its own SIMD code natively and libm's
    under Pyodide, which differ in the last bit (and a rotary angle's last bit moves a q8 rounding, then a token);
    float64 then one rounding gives both the correctly rounded float32 (but for a float64 within an ulp of a tie)."""
    return x64.astype(np.float32)


def cos_sin(ang: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """float32 cos and sin of float32 angles, the same bits natively and in the page (see _rounded)."""
    a = np.asarray(ang, np.float32).astype(np.float64)
    return _rounded(np.cos(a)), _rounded(np.sin(a))


def rope_inv_freq(rotary_dim: int, theta: float = 10000.0, scaling: dict | None = None):
    """(rotary_dim // 2,) float32 inverse frequencies and the attention factor (1 except YaRN) for a
    `rope_scaling` dict as config.json carries it (rope_type / type: default, linear, llama3, yarn)."""
    exponents = np.arange(0, rotary_dim, 2, dtype=np.int64).astype(np.float32) / np.float32(rotary_dim)
    inv = np.float32(1.0) / _rounded(np.power(np.float64(theta), exponents.astype(np.float64)))
    rs = dict(scaling or {})
    kind = rs.get("rope_type", rs.get("type", "default"))
    if kind == "default":
        return inv.astype(np.float32), 1.0
    if kind == "linear":
        return (inv / rs["factor"]).astype(np.float32), 1.0
    if kind == "llama3":
        factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
        old = rs["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv
        scaled = np.where(wavelen > old / lo, inv / factor, inv)
        smooth = (old / wavelen - lo) / (hi - lo)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < old / hi) & ~(wavelen > old / lo)
        return np.where(medium, smoothed, scaled).astype(np.float32), 1.0
    if kind == "yarn":
        return _yarn(rotary_dim, theta, rs)
    raise PositionConfigError(f"ember: rope_scaling type {kind!r} is not supported (default, linear, llama3, yarn)")


def _yarn(dim: int, base: float, rs: dict):
    """YaRN (Peng et al. 2023) as transformers' _compute_yarn_parameters: a ramp between interpolated and
    extrapolated frequencies over the correction range, cos/sin scaled by the attention factor."""
    factor = rs["factor"]
    old = rs.get("original_max_position_embeddings")
    if old is None:
        raise PositionConfigError("ember: yarn rope_scaling needs original_max_position_embeddings")
    beta_fast, beta_slow = rs.get("beta_fast") or 32, rs.get("beta_slow") or 1

    def mscale(scale, m=1.0):
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    att = rs.get("attention_factor")
    if att is None:
        m, m_all = rs.get("mscale"), rs.get("mscale_all_dim")
        att = mscale(factor, m) / mscale(factor, m_all) if m and m_all else mscale(factor)

    def corr(rot):
        return dim * math.log(old / (rot * 2 * math.pi)) / (2 * math.log(base))

    lo, hi = corr(beta_fast), corr(beta_slow)
    if rs.get("truncate", True):
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = max(lo, 0), min(hi, dim - 1)
    if lo == hi:
        hi += 0.001
    ramp = np.clip((np.arange(dim // 2, dtype=np.float32) - lo) / (hi - lo), 0, 1)
    pos_freqs = base ** (np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / dim)
    extra = 1 - ramp
    inv = (1 / (factor * pos_freqs)) * (1 - extra) + (1 / pos_freqs) * extra
    return inv.astype(np.float32), float(att)


# ============================================================================ rotary embedding

class RotaryEmbedding:
    """Rotary tables for one (head_dim, rotary_dim, frequencies, layout). `at(positions)` gives the Rope
    that a forward step applies to q and k. Layouts: "half" (GPT-NeoX / Llama: x1 = first half) or
    "interleaved" (GPT-J / GLM: pairs (2i, 2i + 1)); dims past rotary_dim pass through (partial rotary)."""

    def __init__(self, head_dim: int, inv_freq, attention_factor: float = 1.0, layout: str = "half"):
        if layout not in ("half", "interleaved"):
            raise PositionConfigError(f"ember: rotary layout {layout!r} is not 'half' or 'interleaved'")
        self.head_dim, self.inv_freq = head_dim, np.asarray(inv_freq, np.float32)
        self.rotary_dim, self.factor, self.layout = 2 * len(self.inv_freq), float(attention_factor), layout
        half, rd = len(self.inv_freq), self.rotary_dim
        r = np.zeros((head_dim, head_dim), np.float32)  # x @ r = the "rotated" x: [-x2, x1] (per pair if interleaved)
        i = np.arange(half)
        a, b = (i, i + half) if layout == "half" else (2 * i, 2 * i + 1)
        r[b, a], r[a, b] = -1.0, 1.0
        self.rot = r
        self._fused_ok = layout == "half" and rd == head_dim and self.factor == 1.0
        self._spread = (lambda t: np.concatenate([t, t], -1)) if layout == "half" else (lambda t: np.repeat(t, 2, -1))
        self._rd = rd

    def angles(self, positions) -> np.ndarray:
        """(..., rotary_dim / 2) float32: positions times frequencies in float32, as transformers does."""
        return np.asarray(positions, np.float32)[..., None] * self.inv_freq

    def _full(self, ang):
        """cos, sin (..., head_dim) with 1 / 0 on pass-through dims and the attention factor applied."""
        c, s = cos_sin(ang)
        c, s = self._spread(c) * self.factor, self._spread(s) * self.factor
        pad = self.head_dim - self._rd
        if pad:
            c = np.concatenate([c, np.ones(c.shape[:-1] + (pad,), np.float32)], -1)
            s = np.concatenate([s, np.zeros(s.shape[:-1] + (pad,), np.float32)], -1)
        return c.astype(np.float32), s.astype(np.float32)

    def at(self, positions: np.ndarray, dtype, device) -> Rope:
        """positions (B, T) ints -> the Rope for those tokens (rows may differ: left-padded batches)."""
        positions = np.asarray(positions)
        shared = bool((positions == positions[:1]).all())
        T = positions.shape[1]
        if shared and T == 1:  # one (hd, hd) rotation matrix diag(cos) + R diag(sin): one op per layer
            c, s = self._full(self.angles(positions[0, 0]))
            return Rope(matrix=ember.tensor(np.diag(c) + self.rot * s[None, :], dtype=dtype, device=device))
        ang = self.angles(positions[0] if shared else positions)               # (T, rd/2) | (B, T, rd/2)
        if shared and self._fused_ok:
            c, s = cos_sin(ang)
            return Rope(cos=ember.tensor(c, device=device), sin=ember.tensor(s, device=device))
        c, s = self._full(ang)                                                 # (..., T, hd)
        c, s = c[..., None, :], s[..., None, :]                                # (..., T, 1, hd)
        rot = ember.tensor(self.rot, dtype=dtype, device=device)
        return Rope(full=(ember.tensor(c, dtype=dtype, device=device), ember.tensor(s, dtype=dtype, device=device), rot))


class Rope:
    """Applies one step's rotary embedding to x (B, T, heads, head_dim): the fused rotate-half kernel
    (F.rotary_embedding), a rotation matrix (one decoded token), or x * cos + (x @ R) * sin."""

    def __init__(self, cos=None, sin=None, matrix=None, full=None):
        self.cos, self.sin, self.matrix, self.full = cos, sin, matrix, full

    def __call__(self, x):
        if self.matrix is not None:
            return x @ self.matrix
        if self.full is not None:
            c, s, rot = self.full
            return x * c + (x @ rot) * s
        return F.rotary_embedding(x, self.cos, self.sin)


# ============================================================================ rotary row layouts

def to_half_layout(w: np.ndarray, n_heads: int) -> np.ndarray:
    """q/k projection rows in the interleaved-pair rotary layout (llama.cpp's GGUF, llama2.c) -> rotate-half
    rows, per head: (n_heads * hd, dim) -> same shape."""
    rows, dim = w.shape
    return w.reshape(n_heads, rows // n_heads // 2, 2, dim).transpose(0, 2, 1, 3).reshape(rows, dim)


def to_pair_layout(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Rotate-half rows -> interleaved-pair rows (the inverse of to_half_layout)."""
    rows, dim = w.shape
    return w.reshape(n_heads, 2, rows // n_heads // 2, dim).transpose(0, 2, 1, 3).reshape(rows, dim)


# ============================================================================ ALiBi, sinusoids

def alibi_slopes(n_heads: int) -> np.ndarray:
    """(n_heads,) ALiBi slopes (Press et al.), with the interleaved extra slopes for non-power-of-2 counts."""
    closest = 2 ** math.floor(math.log2(n_heads))
    base = 2.0 ** (-(2.0 ** -(math.log2(closest) - 3)))
    slopes = base ** np.arange(1, closest + 1, dtype=np.float64)
    if closest != n_heads:
        extra = 2.0 ** (-(2.0 ** -(math.log2(2 * closest) - 3)))
        slopes = np.concatenate([slopes, extra ** np.arange(1, 2 * (n_heads - closest) + 1, 2, dtype=np.float64)])
    return slopes.astype(np.float32)


def alibi_bias(n_heads: int, key_positions: np.ndarray) -> np.ndarray:
    """(n_heads, 1, S) additive bias slope_h * key_position (softmax-equivalent to slope * (k - q))."""
    return (alibi_slopes(n_heads)[:, None, None] * np.asarray(key_positions, np.float32)[None, None, :])


def t5_relative_bucket(relative: np.ndarray, bidirectional: bool, num_buckets: int = 32,
                       max_distance: int = 128) -> np.ndarray:
    """T5's relative position buckets of (key - query) offsets: exact for small distances, logarithmic up to
    max_distance (transformers' T5Attention._relative_position_bucket)."""
    rel = np.asarray(relative, np.int64)
    out = np.zeros_like(rel)
    if bidirectional:
        num_buckets //= 2
        out += (rel > 0) * num_buckets
        rel = np.abs(rel)
    else:
        rel = -np.minimum(rel, 0)
    exact = num_buckets // 2
    with np.errstate(divide="ignore"):
        large = exact + (np.log(np.maximum(rel, 1).astype(np.float32) / exact) / math.log(max_distance / exact)
                         * (num_buckets - exact)).astype(np.int64)
    return out + np.where(rel < exact, rel, np.minimum(large, num_buckets - 1))


def sinusoidal_table(n_positions: int, dim: int, max_timescale: float = 10000.0) -> np.ndarray:
    """(n_positions, dim) float32 [sin | cos] table (Whisper's encoder, 'Attention is all you need')."""
    inc = math.log(max_timescale) / (dim // 2 - 1)
    inv = np.exp(-inc * np.arange(dim // 2, dtype=np.float32))
    t = np.arange(n_positions, dtype=np.float32)[:, None] * inv[None, :]
    return np.concatenate([np.sin(t), np.cos(t)], 1).astype(np.float32)
