"""The CPU backend's fused kernels (kernel-registry entries, ember.kernels), each a measured win on a model:
attention a block of query rows at a time, GELU in cache-sized chunks, SiLU and the bias adds of linear /
conv_bias in place; under Pyodide SiLU, GELU and the attention's exp run in the wasm SIMD kernels
(cpu_wasm_kernels.py), numpy's exp being scalar there.
"""
from __future__ import annotations

import math

import numpy as np

from . import array_module_fused
from .array_module_backend import _F32, _HALF
from .cpu_float_kernels import ACTS
from .cpu_matmul import deterministic, mm, native_gemm, page_kernels, pool_kernels

_ATTN_BLOCK = 1 << 19  # (L, S) scores above this many elements are computed a block of query rows at a time
_GELU_CHUNK = 1 << 15  # elements per chunk of the fused GELU


def _wasm():
    return page_kernels()


def _elementwise():
    """Where SiLU / GELU run under Pyodide: the page's kernel pool (elementwise.c split between its threads, the
    same bits), else the page's kernels (None natively outside deterministic mode)."""
    return pool_kernels() or page_kernels()


def describe_gelu(be=None):
    return "cpu_kernels/elementwise.c ember_gelu_f32 (wasm)" if _wasm() is not None else "numpy, cache-sized chunks (erf by A&S)"


def describe_silu(be=None):
    return "cpu_kernels/elementwise.c ember_silu_f32 (wasm)" if _wasm() is not None else "numpy, in place"


def attention(be, q, k, v, mask, scale, causal):
    if page_kernels() is not None and q.dtype is _F32 and k.dtype is _F32 and v.dtype is _F32 \
            and (mask is None or mask.dtype is _F32) and q.shape[-2] * k.shape[-2] <= _ATTN_BLOCK:
        return _page_attention(be, q, k, v, mask, scale, causal)
    if mask is None and not causal and q.dtype not in _HALF and q.shape[-2] * k.shape[-2] > _ATTN_BLOCK \
            and q.shape[:-2] == k.shape[:-2] == v.shape[:-2]:
        return _blocked_attention(q * np.asarray(scale, q.dtype), k, v)
    return array_module_fused.attention(be, q, k, v, mask, scale, causal)


def _add_bias(be, y, b):
    """y + b for a fresh product y: in place (a new array's page faults cost as much as the add),
    except bf16 bits / f16, which take the rounding add of `binary`."""
    if y.dtype not in (_F32, np.dtype(np.float64)):
        return be.binary("add", y, b)
    y += b
    return y


def _pool_for_linear(x, w, b):
    """The page's kernel pool where it takes x @ w.T + b (float32 operands, an (out,) bias), else None."""
    pool = pool_kernels()
    if pool is not None and x.dtype is _F32 and w.dtype is _F32 and b.dtype is _F32 and b.ndim == 1 \
            and x.ndim >= 2 and pool.takes_matmul(x, w.T):
        return pool
    return None


def linear(be, x, w, b):
    y = native_gemm(x, w.T, b, weight=True, then_matmul=True)  # natively: gemm_native.c, the bias in its stores
    if y is not None:
        return y
    pool = _pool_for_linear(x, w, b)
    if pool is not None:
        # the page's kernel pool: the bias added in its memory, between the product and the copy out (numpy's
        # add on this thread was 3% of MiniLM on 2 threads); the same bits (one float add)
        return pool.matmul(x, w.T, exact=deterministic(), bias=b)  # (..., out)
    return _add_bias(be, be.matmul(x, w.T), b)                      # (..., out)


_GEMM_ACTS = ("silu", "gelu", "gelu_tanh")  # the activations gemm_native.c's epilogue and the pool apply


def linear_act(be, x, w, b, act):
    """act(x @ w.T + b) natively in gemm_native.c's epilogue, as each group of columns is done (MiniLM's 6 GELUs
    were a pass of their own over (128, 1536) each); in the page on the kernel pool: the product, its bias and
    its activation in the pool's memory (rows.c's bias_act, split between the threads) and one copy out, where
    linear then the activation copy the result out, in and out again (MiniLM's 608 x 1536 GELU: 3.7 MB each way);
    None elsewhere (the caller composes). The composed path's bits: its bias add and its activation are rows.c's
    too (cpu_dense; not in deterministic mode, whose GELU is elementwise.c's: composed there)."""
    if act in _GEMM_ACTS and b.ndim == 1:
        y = native_gemm(x, w.T, b, weight=True, act=ACTS[act], then_matmul=True)
        if y is not None:
            return y
    pool = None if deterministic() or act not in _GEMM_ACTS else _pool_for_linear(x, w, b)
    if pool is None:
        return None
    return pool.matmul(x, w.T, bias=b, act=act)  # (..., out)


def conv_bias(be, x, w, b, stride, padding, dilation, groups):
    y = be.conv(x, w, stride, padding, dilation, groups)             # (N, O, *out)
    return _add_bias(be, y, b.reshape((-1,) + (1,) * (y.ndim - 2)))


def silu(be, x):
    if x.dtype in _HALF:
        return be._back(silu(be, be._f32(x)), x.dtype)
    if x.dtype is _F32 and _wasm() is not None:
        return _elementwise().silu(x)  # numpy's exp is scalar in wasm: 20% of YOLOv8s went there
    out = be._sigmoid(x)  # one fresh array, then in place (YOLO: every conv is followed by a SiLU)
    out *= x
    return out


def gelu(be, x, approximate):
    if x.dtype in _HALF:
        return be._back(gelu(be, be._f32(x), approximate), x.dtype)
    if approximate != "tanh" and x.dtype is _F32 and _wasm() is not None:
        return _elementwise().gelu(x)  # numpy's exp is scalar in wasm: 7% of Whisper tiny
    # in cache-sized chunks: the ~20 passes stay in L2 (2x faster on Whisper's (1500, 1536) MLP).
    # (Splitting the chunks across threads gains little in a model: OpenBLAS's workers spin ~0.1 s
    # after every matmul and keep the other core.)
    xf = np.ascontiguousarray(x).reshape(-1)
    of = np.empty_like(xf)
    f = _gelu_tanh if approximate == "tanh" else _gelu_erf
    for a in range(0, xf.size, _GELU_CHUNK):
        f(xf[a:a + _GELU_CHUNK], of[a:a + _GELU_CHUNK])
    return of.reshape(x.shape)


# ============================================================================ helpers


def _blocked_attention(q, k, v):
    """softmax(q k^T) v for long sequences (q already scaled), a block of query rows at a time: each
    (rows, S) block of scores stays in cache through max/exp (Whisper's encoder: 2x faster than
    materialising the (L, S) scores of every head). v gets a column of ones, so the same matmul that
    weights the values also sums each row's exponentials: one pass fewer over the scores."""
    lead, (L, E), S, Ev = q.shape[:-2], q.shape[-2:], k.shape[-2], v.shape[-1]
    q3 = q.reshape(-1, L, E)                                                # (heads, L, E)
    kt = np.ascontiguousarray(np.swapaxes(k, -1, -2)).reshape(-1, E, S)     # (heads, E, S)
    dt = np.result_type(q, v)
    v1 = np.ones(v.shape[:-1] + (Ev + 1,), dt)
    v1[..., :Ev] = v
    v1 = v1.reshape(-1, S, Ev + 1)                                          # (heads, S, Ev | 1)
    out = np.empty((q3.shape[0], L, Ev), dt)                                # (heads, L, Ev)
    rows = max(16, min(L, _ATTN_BLOCK // S))
    pool = pool_kernels() if dt == np.float32 else None  # the page's kernel pool: the same calls, scores kept there
    acc = None if pool is None else pool.attention_blocks(q3, kt, v1, exact=deterministic())  # (heads, L, Ev | sum)
    if acc is not None:
        np.divide(acc[..., :Ev], acc[..., Ev:], out=out)
        return out.reshape(lead + out.shape[1:])
    buf, mx, acc = np.empty((rows, S), dt), np.empty((rows, 1), dt), np.empty((rows, Ev + 1), dt)
    # under Pyodide, max, subtract and exp in one SIMD kernel (numpy's exp is scalar there: 12% of Whisper tiny)
    kernels = page_kernels() if dt == np.float32 else None
    for h in range(q3.shape[0]):
        for i in range(0, L, rows):
            n = min(rows, L - i)
            s, m, a = buf[:n], mx[:n], acc[:n]
            mm(q3[h, i:i + n], kt[h], out=s)                                 # (n, S)
            if kernels is not None:
                kernels.exp_rowmax(s)
            else:
                np.max(s, axis=-1, keepdims=True, out=m)
                s -= m
                np.exp(s, out=s)
            mm(s, v1[h], out=a)                                              # (n, Ev | row sum)
            np.divide(a[:, :Ev], a[:, Ev:], out=out[h, i:i + n])
    return out.reshape(lead + out.shape[1:])


def _exp_rows(x, axis, last_only=True):
    """(the page's kernels, the max along `axis`) where softmax / log_softmax take their exponentials from the page's
    kernel: float32 along the last axis (any axis where not last_only), every maximum finite (a row of infinities
    keeps numpy's arithmetic, as before); else (None, None)."""
    kernels = page_kernels()
    if kernels is None or x.dtype is not _F32 or not x.size or last_only and axis % x.ndim != x.ndim - 1:
        return None, None
    m = x.max(axis=axis, keepdims=True)
    return (kernels, m) if np.isfinite(m).all() else (None, None)


def softmax(be, x, axis):
    """array_module_fused.softmax, with the exponentials in the page's kernel where it runs (in the page, and
    natively in deterministic mode), as log_softmax below: numpy's exp is scalar in Pyodide (a sampler's 262k
    logits 2.8 -> ~0.6 ms) and differs between builds. Each slice's sum in float64, then rounded. The exponentials
    run as one row whose maximum is 0 (every slice's is), so another axis than the last takes them alike (YOLO's
    DFL: 16 bins of (1, 4, 16, A), whose numpy reductions along rows of 16 cost more than the exponentials: its
    softmax 8.6 -> ~5 ms in the page, the maximum and sum across the axis)."""
    kernels, m = _exp_rows(x, axis, last_only=False)
    if kernels is None:
        return array_module_fused.softmax(be, x, axis)
    e = np.ascontiguousarray(x - m)                                    # each slice's max exactly 0
    suppressed = e == -np.inf  # (the kernel's exp holds its argument at -87.3: their weight is set to 0 after)
    kernels.exp_rowmax(e.reshape(1, -1))                               # exp(e - 0), in place
    e[suppressed] = 0.0
    e /= e.sum(axis=axis, dtype=np.float64, keepdims=True).astype(np.float32)
    return e


def log_softmax(be, x, axis):
    """array_module_fused.log_softmax, with the exponentials in the page's kernel where it runs (in the page, and
    natively in deterministic mode: numpy's exp differs between builds, and a greedy decoder's timestamp rule and
    fallbacks read these values; in Pyodide numpy's exp is also scalar: Whisper's 51,864 a token 0.69 -> 0.44 ms)."""
    kernels, m = _exp_rows(x, axis)
    if kernels is None:
        return array_module_fused.log_softmax(be, x, axis)
    s = x - m                                                          # (..., n): each row's max exactly 0
    e = s.reshape(-1, s.shape[-1]).copy()
    kernels.exp_rowmax(e)                                              # exp(s - 0)
    # summed and logged in float64, then rounded: the same float32 on every build (numpy's float32 sums run in an
    # order that differs between Pyodide's build and a SIMD one)
    lse = np.log(e.sum(axis=-1, dtype=np.float64)).astype(np.float32)
    return s - lse.reshape(m.shape)


def _page_attention(be, q, k, v, mask, scale, causal):
    """array_module_fused.attention with the exponentials in the page's kernel (numpy's exp differs between
    builds: scalar in Pyodide, SIMD natively)."""
    q = q * np.asarray(scale, q.dtype)
    s = mm(q, np.swapaxes(k, -1, -2))                                # (..., L, S)
    if causal:
        L, S = s.shape[-2:]
        s[(Ellipsis,) + np.triu_indices(L, 1, S)] = -np.inf
    if mask is not None:
        s = s + mask
    s = np.ascontiguousarray(s)
    page_kernels().exp_rowmax(s.reshape(-1, s.shape[-1]))
    out = mm(s, v)                                                   # (..., L, Ev)
    out /= s.sum(axis=-1, keepdims=True)
    return out


# Abramowitz & Stegun 7.1.26: erfc(z) ~ t P(t) exp(-z^2), t = 1 / (1 + p z), |abs err| < 1.5e-7
_AS_P = 0.3275911 / math.sqrt(2)  # z = |x| / sqrt(2) folded in
_AS_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


def _gelu_erf(x, out):
    """out = x Phi(x) = relu(x) - |x| Phi(-|x|): no cancellation in the negative tail, and five terms
    instead of erf's ten (40% faster than x/2 (1 + erf)); |abs err| < 3.5e-7 vs float64, below
    torch's own float32 GELU (1.2e-6)."""
    t = np.dtype(x.dtype).type
    ax = np.abs(x)
    u = ax * t(_AS_P)
    u += 1
    np.reciprocal(u, out=u)                        # t
    p = u * t(_AS_A[4] * 0.5)
    for a in _AS_A[3::-1]:                         # Phi(-|x|) = erfc(|x| / sqrt 2) / 2 = t P(t) exp(-x^2 / 2) / 2
        p += t(a * 0.5)
        p *= u
    e = np.multiply(ax, ax)
    e *= t(-0.5)
    np.exp(e, out=e)
    p *= e
    p *= ax
    p[ax > t(12.6)] = 0                            # 0 past |x| = 12.6, as fvec_math.h's gelu (no subnormals)
    np.maximum(x, 0, out=out)
    out -= p


def _gelu_tanh(x, out):
    t = np.dtype(x.dtype).type
    e = np.tanh((x + t(0.044715) * x * x * x) * t(math.sqrt(2 / math.pi)))
    e += 1
    e *= x
    np.multiply(e, t(0.5), out=out)
