"""The WebGPU column of the kernel registry (ember.kernels): each function runs one fused op on the backend's
arrays (the kernel itself is the backend's, in backend_compute.py, backend_quant.py or backend.py); the WGSL
descriptors (ember.kernel_source.WGSL) run through the backend's custom_kernel with their binding layout
(params, grid); and the tuning rules (`choose_*`) decide per call from the shapes whether a kernel takes it.
"""
from __future__ import annotations

from importlib import resources

from ember import dtypes as D
from ember.kernel_source import WGSL

_FLASH_MAX_HEAD = 256  # attention.wgsl keeps one query row (D) in workgroup memory and 4 output columns a thread
_MAX_GROUPS = 65535


def _wgsl(name):
    return lambda: resources.files("ember.webgpu").joinpath(name).read_text()


# ============================================================================ kernels over the backend's arrays

def softmax(be, x, axis):
    return be._softmax(x, axis)


def log_softmax(be, x, axis):
    return be._softmax(x, axis, log=True)


def layer_norm(be, x, w, b, eps):
    return be._norm(x, w, b, eps, rms=False)


def rms_norm(be, x, w, eps):
    return be._norm(x, w, None, eps, rms=True)


def attention(be, q, k, v, mask, scale, causal):
    return be._attention(q, k, v, mask, scale, causal)


def linear(be, x, w, b):
    return be._linear(x, w, b)


def linears(be, x, ws, bs):
    return be._linears(x, ws, bs)


def copy_into(be, dst, src, starts):
    return be._write_into(dst, src, starts)


def qmatmul(be, x, raw, qtype, shape, activations="float32"):
    """GPUs multiply float activations whatever `activations` says (ember.qtensor.QTensor)."""
    return be._qmatmul(x, raw, qtype, shape)


def qlinear(be, x, weight):
    """The qlinear op's forward: qmatmul per device part of the weight (whole rows, each within a binding)."""
    ys = [be._qmatmul(x, p.data, p.ggml_type, p.shape) for p in weight.device_parts()]
    return ys[0] if len(ys) == 1 else be.cat(ys, len(ys[0].shape) - 1)


# ============================================================================ recurrent cells

def _cell_grid(out_shape, xg, h, *rest, **attrs):
    """One thread per (batch row, hidden unit), 64 a workgroup, 2-D past 65535 workgroups."""
    groups = -(-(h.shape[0] * h.shape[1]) // 64)
    return (min(groups, _MAX_GROUPS), -(-groups // _MAX_GROUPS), 1)


RECURRENT = WGSL(_wgsl("recurrent.wgsl"), workgroup_size=64, grid=_cell_grid,
                 params=lambda xg, h, c, w, b, gates: [h.shape[0], h.shape[1], gates, 0 if b is None else 1])
RECURRENT.op = "lstm_cell / gru_cell"


def lstm_cell(be, xg, h, c, w_hh, b_hh):
    n, hid = h.shape
    return be.custom_kernel(RECURRENT, [xg, h, c, w_hh, b_hh], (n, 2 * hid), xg.dtype, {"gates": 4})


def gru_cell(be, xg, h, w_hh, b_hh):
    n, hid = h.shape
    return be.custom_kernel(RECURRENT, [xg, h, None, w_hh, b_hh], (n, hid), xg.dtype, {"gates": 3})


# ============================================================================ rotary embedding

ROTARY = WGSL(_wgsl("rope.wgsl"), params=lambda x, cos, sin: list(x.shape[1:]))


# ============================================================================ flash attention

def _view_words(a):
    """offset, two batch strides, row and column strides of a 4-D view (B1, B2, rows, cols)."""
    return [a.offset, *a.strides]


def _flash_params(q, k, v, mask, scale, causal, chunk=0):
    L, hd = q.shape[-2:]
    S, hv = v.shape[-2:]
    flags = (1 if mask is not None else 0) | (2 if causal else 0) | (4 if chunk else 0)
    words = [L, S, hd, hv, float(scale), flags, q.shape[1]]
    for a in (q, k, v):
        words += _view_words(a)
    words += _view_words(mask) if mask is not None else [0] * 5
    return words + ([chunk, -(-S // chunk)] if chunk else [S, 1])


FLASH = WGSL(_wgsl("attention.wgsl"), workgroup_size=64, params=_flash_params, views=True,
             grid=lambda out, q, k, v, mask, scale, causal: (q.shape[2], q.shape[0] * q.shape[1], 1))

# split keys (flash-decoding): few query rows, many keys. Pass 1, the same kernel with flag 4: per chunk of `chunk`
# keys, the unnormalized output row, its maximum and its sum, (B1, B2, L, chunks, Dv + 2) f32; pass 2 combines them
FLASH_SPLIT = WGSL(_wgsl("attention.wgsl"), workgroup_size=64, params=_flash_params, views=True,
                   grid=lambda out, q, k, v, mask, scale, causal, chunk:
                   (q.shape[2], q.shape[0] * q.shape[1], -(-k.shape[2] // chunk)))
FLASH_COMBINE = WGSL(_wgsl("attention_combine.wgsl"),
                     params=lambda part, dtype: [part.shape[-2], part.shape[-1] - 2])


def choose_flash(be, tune, bshape, L, hd, S, hv, forced=False):
    """The one-kernel attention, or three kernels (QK^T, softmax, PV), for batch dims bshape, L query rows of
    width hd over S keys of values hv wide? attention.wgsl takes at most two batch dims, heads up to 256 wide,
    and grids within 65535 workgroups a dimension. tune["mode"]: "flash" always, "composed" never, "auto" for at
    most tune["rows"] query rows over tune["keys"] keys: one dispatch beats three for a decode step's few rows,
    while on lavapipe the fused kernel is 3.5x slower at L=1, S=512 and 4-9x at prefill sizes (bench_webgpu.py).
    forced: a direct call of flash_attention, which takes the kernel wherever it fits."""
    n = 1
    for s in bshape:
        n *= s
    if len(bshape) > 2 or max(hd, hv) > _FLASH_MAX_HEAD or S == 0 or L > _MAX_GROUPS or n > _MAX_GROUPS:
        return False
    mode = "flash" if forced else tune["mode"]
    if mode == "auto":
        return L <= tune["rows"] and S <= tune["keys"]
    return mode == "flash"


# ============================================================================ one decoded token: rope, cache append, attention

def _append_params(qkv, rot, kc, vc, mask, *, n_heads, slot, length, scale):
    K = (qkv.shape[2] - n_heads) // 2
    words = [n_heads, K, n_heads // K, qkv.shape[3], length, slot, float(scale), 0 if mask is None else 1]
    words += [qkv.offset, qkv.strides[0], qkv.strides[2], qkv.strides[3]]
    words += [kc.offset, *kc.strides, vc.offset, *vc.strides]
    return words + ([mask.offset, *mask.strides] if mask is not None else [0] * 5)


ROPE_APPEND = WGSL(_wgsl("decode_attention.wgsl"), workgroup_size=64, params=_append_params, views=True, writes=(2, 3),
                   grid=lambda out, qkv, rot, kc, vc, mask, **a: (out[2], out[0] * out[1], 1))


def choose_rope_append(be, tune, qkv_shape, dtypes, n_heads, length, bool_mask):
    """One kernel for the decode step where the backend fuses decode steps (EMBER_WEBGPU_DECODE_FUSION), all is
    float32, the mask (if any) is additive, and the flash rule takes the step's (B, K) heads of G = H / K rows."""
    B, _, heads, hd = qkv_shape
    K = (heads - n_heads) // 2
    from ember import kernels
    return be.decode_fusion and not bool_mask and all(d is D.float32 for d in dtypes) \
        and kernels.chooses("flash_attention", be, (B, K), n_heads // K, hd, length, hd)
