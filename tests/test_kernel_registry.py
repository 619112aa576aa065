"""The kernel registry (ember.kernels): every declared kernel against its op's composed reference, on every backend
that has it here (cpu, webgpu, and the CUDA column on the emulated CUDA backend of test_cuda_emulated.py, whose
launches run over numpy).

The walk fails when a declared op has a kernel on a backend present here and no example below (nor a named test
elsewhere): a new kernel lands with its test. The reference is the composed form computed in the test; tolerances
are float32 rounding (bounded by the inputs' magnitudes), or llama.cpp's 8-bit rounding for q8 activations.
"""
from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

import ember
from ember import kernels as K
from ember.custom_op import registered
from ember.quant import QTensor

ROOT = Path(__file__).resolve().parents[1]


def rnd(*shape, seed=0, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def T(a, dev, dtype=None):
    return ember.tensor(a, device=dev, dtype=dtype)


# ------------------------------------------------------------------ examples: op -> fn(device) -> [(args, kwargs)]
# args are Tensors (or lists of Tensors) and plain values; the kernel gets the Tensors' arrays, the composed
# reference the Tensors themselves.

def _softmax(dev):
    out = [((T(rnd(3, 7, 11, seed=1, scale=3), dev), axis), {}) for axis in (1, 2)]
    return out + [((T(rnd(5, 9, seed=2), dev, ember.float16), 1), {})]


def _norms(rms):
    def make(dev):
        x, w, b = T(rnd(4, 37, seed=3, scale=2), dev), T(rnd(37, seed=4), dev), T(rnd(37, seed=5), dev)
        if rms:
            xh, wh = T(rnd(3, 64, seed=6), dev, ember.float16), T(rnd(64, seed=7), dev, ember.float16)
            return [((x, w, 1e-6), {}), ((x, None, 1e-6), {}), ((xh, wh, 1e-5), {})]
        return [((x, w, b, 1e-5), {}), ((x, None, None, 1e-5), {})]
    return make


def _attention(dev):
    q, k, v = T(rnd(2, 3, 5, 16, seed=7), dev), T(rnd(2, 3, 9, 16, seed=8), dev), T(rnd(2, 3, 9, 8, seed=9), dev)
    mask = T(np.where(rnd(5, 9, seed=10) > 1.2, -np.inf, rnd(5, 9, seed=11)).astype(np.float32), dev)
    out = [((q, k, v, None, 0.25, False), {}), ((q, k, v, None, 0.25, True), {}), ((q, k, v, mask, 0.5, False), {})]
    if dev == "cpu":  # past 512k scores the CPU computes a block of query rows at a time
        big = [T(rnd(1, 1, 800, 16, seed=s), dev) for s in (12, 13, 14)]
        out.append(((big[0], big[1], big[2], None, 0.25, False), {}))
    return out


def _gelu(dev):
    return [((T(rnd(1000, seed=15, scale=3), dev), a), {}) for a in ("none", "tanh")] + \
        [((T(rnd(40000, seed=16, scale=3), dev), "none"), {})]


def _silu(dev):
    return [((T(rnd(3, 333, seed=17, scale=3), dev),), {})]


def _linear(dev):
    return [((T(rnd(3, 5, 32, seed=18), dev), T(rnd(24, 32, seed=19), dev), T(rnd(24, seed=20), dev)), {}),
            ((T(rnd(1, 64, seed=21), dev), T(rnd(40, 64, seed=22), dev), T(rnd(40, seed=23), dev)), {})]


def _conv_bias(dev):
    return [((T(rnd(2, 3, 9, 9, seed=24), dev), T(rnd(4, 3, 3, 3, seed=25), dev), T(rnd(4, seed=26), dev),
              (1, 1), (1, 1), (1, 1), 1), {}),
            ((T(rnd(2, 4, 9, 9, seed=27), dev), T(rnd(6, 2, 3, 3, seed=28), dev), T(rnd(6, seed=29), dev),
              (2, 2), (0, 1), (1, 1), 2), {}),
            ((T(rnd(1, 4, 30, seed=30), dev), T(rnd(5, 4, 3, seed=31), dev), T(rnd(5, seed=32), dev),
              (1,), (1,), (2,), 1), {})]


def _conv_bias_act(dev):
    x, w, b = T(rnd(1, 5, 11, 13, seed=122), dev), T(rnd(7, 5, 3, 3, seed=123), dev), T(rnd(7, seed=124), dev)
    return [((x, w, b, (1, 1), (1, 1), (1, 1), 1, act), {}) for act in ("silu", "relu", "gelu", None)] + \
        [((x, w, None, (2, 2), (1, 0), (1, 1), 1, "silu"), {}),
         ((T(rnd(2, 4, 30, seed=125), dev), T(rnd(6, 4, 3, seed=126), dev), T(rnd(6, seed=127), dev),
           (2,), (1,), (1,), 1, "gelu"), {})]


def _conv_cat_act(dev):
    # the parts of a C2f (cv1's halves, views of one array, then a bottleneck's output), two images, a part's view
    y = T(rnd(2, 12, 6, 7, seed=128), dev)
    parts = [y[:, :6], y[:, 6:], T(rnd(2, 5, 6, 7, seed=129), dev)]
    w, b = T(rnd(9, 17, 1, 1, seed=130, scale=0.3), dev), T(rnd(9, seed=131), dev)
    return [((parts, w, b, act), {}) for act in ("silu", None)] + [((parts[1:], T(rnd(4, 11, 1, 1, seed=132), dev),
                                                                     None, "relu"), {})]


def _copy_into(dev):
    return [((T(rnd(4, 6, seed=33), dev), T(rnd(2, 3, seed=34), dev), (1, 2)), {}),
            ((T(rnd(2, 3, 8, 5, seed=35), dev), T(rnd(2, 3, 1, 5, seed=36), dev), (0, 0, 6, 0)), {})]


def _linears(dev):
    # a decode row x = rms_norm(h): the webgpu kernel computes the pending norm inside one matvec over the weights
    h, nw = T(rnd(1, 1, 64, seed=37), dev), T(rnd(64, seed=38), dev)
    ws = [T(rnd(n, 64, seed=39 + i), dev) for i, n in enumerate((64, 32, 32))]
    bs = [T(rnd(64, seed=42), dev), None, T(rnd(32, seed=43), dev)]
    x = ember.nn.functional.rms_norm(h, (64,), nw, 1e-6)
    return [((x, ws, bs), {})]


QTYPES = ("q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q4_k", "q6_k")


def _qweight(qtype, rows=48, cols=256, seed=44):
    return QTensor.quantize(rnd(rows, cols, seed=seed), qtype)


def _qmatmul(dev):
    out = []
    for i, qt in enumerate(QTYPES):
        w = _qweight(qt, seed=50 + i)
        for x, act in ((rnd(2, 3, 256, seed=60 + i), "float32"), (rnd(1, 256, seed=70 + i), "float32"),
                       (rnd(1, 256, seed=80 + i), "q8"), (rnd(12, 256, seed=90 + i), "q8")):
            out.append(((T(x, dev), w.data, w.ggml_type, w.shape, act), {}))
    return out


def _nbits(dev):
    """onnxruntime's MatMulNBits layout: 4-bit levels in blocks of 32 with float zero points (K = 72: a partial last
    block), and 8-bit levels in blocks of 16 with the default zero point; one row (decode) and several."""
    from ember.ops_blockwise import BlockWeight
    r = np.random.default_rng(45)
    out = []
    for bits, block, k, zeros in ((4, 32, 72, True), (8, 16, 48, False)):
        blocks = -(-k // block)
        w = BlockWeight(r.integers(0, 256, (24, blocks * block * bits // 8)).astype(np.uint8),
                        r.random((24, blocks)).astype(np.float32) * 0.1,
                        r.random((24, blocks)).astype(np.float32) * (1 << bits) if zeros else None, bits, block, (24, k))
        for x in (rnd(1, k, seed=46), rnd(2, 5, k, seed=47)):
            out.append(((T(x, dev), w.packed, w.scales, w.zeros, bits, block, w.shape), {}))
    return out


def _qpick(dev, extra=()):
    w = _qweight("q8_0", rows=500, cols=64, seed=100)
    return [((T(rnd(64, seed=101 + s), dev), w.data, w.ggml_type, w.shape, "float32", *extra), {}) for s in range(3)]


def _qrows(dev):
    ids = [np.array([3, 0, 499, 3], np.int64), np.array([7], np.int64), np.zeros(0, np.int64)]
    return [((i, w.data, w.ggml_type, w.shape), {}) for i in ids
            for w in (_qweight("q8_0", rows=500, cols=64, seed=102), _qweight("q4_k", rows=500, cols=256, seed=103))]


def _letterbox(dev):
    """Host uint8 images: a downscale, an upscale, an exact 2x one (INTER_AREA), the same size on one channel, and a
    crop (rows further apart than its width) of four channels, each placed on a padded canvas."""
    from ember.data.resize import linear_tables
    cases = []
    for i, (h, w, c, nh, nw, oh, ow, top, left, pad) in enumerate(
            [(37, 53, 3, 20, 29, 32, 32, 6, 1, 114), (11, 7, 3, 30, 19, 32, 19, 1, 0, 0),
             (40, 64, 3, 20, 32, 32, 32, 6, 0, 114), (16, 16, 1, 16, 16, 16, 20, 0, 2, 7),
             (50, 60, 4, 33, 41, 40, 48, 3, 4, 255)]):
        big = np.random.default_rng(120 + i).integers(0, 256, (h + 5, w + 9, c), dtype=np.uint8)
        img = big[2:2 + h, 3:3 + w] if i == 4 else np.ascontiguousarray(big[:h, :w])
        cases.append(((img, linear_tables(h, w, nh, nw), nh, nw, oh, ow, top, left, pad), {}))
    return cases


def _max_pool(dev):
    """YOLO's SPPF pool (5x5, stride 1, padded 2), a strided one whose last windows reach past the input, one with
    dilation and a width stride, each over a map holding a NaN (its windows give NaN)."""
    x = rnd(2, 3, 11, 13, seed=170)
    x[0, 1, 4, 6] = np.nan
    return [((T(x, dev), (5, 5), (1, 1), (2, 2), (1, 1), (11, 13)), {}),
            ((T(x, dev), (3, 3), (2, 2), (1, 0), (1, 1), (6, 6)), {}),
            ((T(x, dev), (2, 3), (1, 2), (0, 1), (2, 1), (9, 7)), {}),
            ((T(rnd(1, 40, 20, 20, seed=171), dev), (5, 5), (1, 1), (2, 2), (1, 1), (20, 20)), {})]


def _upsample(dev):
    return [((T(rnd(2, 3, 5, 7, seed=175), dev), (2, 2)), {}), ((T(rnd(1, 4, 3, 2, seed=176), dev), (3, 1)), {}),
            ((T(rnd(1, 64, 20, 20, seed=177), dev), (1, 4)), {})]


def _qlinear(dev):
    w = _qweight("q4_k", rows=40, cols=256, seed=45)
    return [((T(rnd(2, 3, 256, seed=46), dev),), {"weight": w}), ((T(rnd(5, 256, seed=47), dev),), {"weight": w})]


def _rotary(dev):
    ang = np.outer(np.arange(6), 1.0 / 10000 ** (np.arange(0, 8, 2) / 8)).astype(np.float32)    # (T, D / 2)
    return [((T(rnd(2, 6, 3, 8, seed=110), dev), T(np.cos(ang), dev), T(np.sin(ang), dev)), {})]


def _flash(dev):
    q, k, v = T(rnd(1, 2, 5, 16, seed=111), dev), T(rnd(1, 2, 40, 16, seed=112), dev), T(rnd(1, 2, 40, 8, seed=113), dev)
    m = T(rnd(1, 2, 5, 40, seed=114), dev)
    return [((q, k, v, None), {"scale": 0.25, "causal": False}), ((q, k, v, m), {"scale": 0.5, "causal": True})]


def _flash_split(dev):
    q, k, v = T(rnd(1, 2, 3, 16, seed=115), dev), T(rnd(1, 2, 130, 16, seed=116), dev), T(rnd(1, 2, 130, 8, seed=117), dev)
    return [((q, k, v, None), {"scale": 0.25, "causal": False, "chunk": 64}),
            ((q, k, v, T(rnd(1, 2, 3, 130, seed=118), dev)), {"scale": 0.25, "causal": True, "chunk": 64})]


def _flash_combine(dev):
    from ember.nn.fused_ops import split_composed
    ex = _flash_split("cpu")[0]
    part = split_composed(*ex[0], **ex[1]).numpy()
    return [((T(part, dev),), {"dtype": ember.float32})]


def _rope_append(dev):
    from ember.models.common.positions import RotaryEmbedding, rope_inv_freq
    B, H, K_, hd, cap, slot, length = 1, 4, 2, 32, 16, 5, 6
    rot = RotaryEmbedding(hd, rope_inv_freq(hd)[0]).at(np.array([[slot + 7]]), ember.float32, "cpu").matrix.numpy()
    return [((T(rnd(B, 1, H + 2 * K_, hd, seed=119), dev), T(rot, dev), T(rnd(B, K_, cap, hd, seed=120), dev),
              T(rnd(B, K_, cap, hd, seed=121), dev), None),
             {"n_heads": H, "slot": slot, "length": length, "scale": hd ** -0.5})]


def _lstm_cell(dev):
    return [((T(rnd(3, 20, seed=130), dev), T(rnd(3, 5, seed=131), dev), T(rnd(3, 5, seed=132), dev),
              T(rnd(20, 5, seed=133), dev), T(rnd(20, seed=134), dev)), {}),
            ((T(rnd(1, 32, seed=135), dev), T(rnd(1, 8, seed=136), dev), T(rnd(1, 8, seed=137), dev),
              T(rnd(32, 8, seed=138), dev), None), {})]


def _gru_cell(dev):
    return [((T(rnd(3, 15, seed=140), dev), T(rnd(3, 5, seed=141), dev), T(rnd(15, 5, seed=142), dev),
              T(rnd(15, seed=143), dev)), {}),
            ((T(rnd(2, 24, seed=144), dev), T(rnd(2, 8, seed=145), dev), T(rnd(24, 8, seed=146), dev), None), {})]


def _lstm_sequence(dev):
    return [((T(rnd(4, 3, 20, seed=150), dev), T(rnd(3, 5, seed=151), dev), T(rnd(3, 5, seed=152), dev),
              T(rnd(20, 5, seed=153, scale=0.5), dev), T(rnd(20, seed=154), dev)), {}),
            ((T(rnd(3, 2, 36, seed=155), dev), T(rnd(2, 9, seed=156), dev), T(rnd(2, 9, seed=157), dev),
              T(rnd(36, 9, seed=158, scale=0.5), dev), None), {"reverse": True})]


def _gru_sequence(dev):
    return [((T(rnd(4, 3, 15, seed=160), dev), T(rnd(3, 5, seed=161), dev), T(rnd(15, 5, seed=162, scale=0.5), dev),
              T(rnd(15, seed=163), dev)), {"reverse": True}),
            ((T(rnd(3, 2, 27, seed=164), dev), T(rnd(2, 9, seed=165), dev), T(rnd(27, 9, seed=166, scale=0.5), dev),
              None), {})]


EXAMPLES = {"softmax": _softmax, "log_softmax": _softmax, "layer_norm": _norms(False), "rms_norm": _norms(True),
            "attention": _attention, "gelu": _gelu, "silu": _silu, "linear": _linear, "conv_bias": _conv_bias,
            "conv_bias_act": _conv_bias_act, "conv_cat_act": _conv_cat_act, "copy_into": _copy_into, "linears": _linears, "qmatmul": _qmatmul,
            "qlinear": _qlinear, "qmatmul_argmax": _qpick, "qrows": _qrows, "letterbox": _letterbox,
            "qmatmul_topk": lambda dev: _qpick(dev, (5,)), "rotary_embedding": _rotary, "flash_attention": _flash,
            "flash_attention_split": _flash_split, "flash_attention_combine": _flash_combine,
            "rope_append_attention": _rope_append, "nbits_matmul": _nbits, "lstm_cell": _lstm_cell,
            "gru_cell": _gru_cell, "lstm_sequence": _lstm_sequence, "gru_sequence": _gru_sequence,
            "max_pool2d": _max_pool, "upsample_nearest": _upsample}
IN_PLACE = ("copy_into", "rope_append_attention")  # kernels that write an input (the composed run gets copies)
# ops whose kernel is tested against its composed form by a test of its own (file::test)
ELSEWHERE = {"decoder_plan": "tests/test_fused_decode.py::test_fused_float32_equals_composed",
             "xattn_decoder_plan": "tests/test_whisper_fused_decode.py::test_fused_steps_equal_the_composed_layers",
             "linear_argmax": "tests/test_linear_argmax.py::test_the_pick_is_the_products_argmax_at_near_ties",
             # (its CPU kernel runs on the page's kernel pool only)
             "linear_act": "tests/test_pool_pyodide.py::test_every_kernel_gives_the_same_bits_on_any_thread_count"}


# ------------------------------------------------------------------ the backends present

def _backends():
    """registry column -> device name: the test devices (conftest.py's rule: EMBER_TEST_DEVICES pins them, else the
    devices that work here), and the CUDA column on the emulated backend."""
    import os
    pinned = [d.strip() for d in os.environ.get("EMBER_TEST_DEVICES", "").split(",") if d.strip()]
    out = {name: name for name in (pinned or ember.devices()) if name in ("cpu", "webgpu")}
    ember.register_backend("cudaemu", "test_cuda_emulated", "EmulatedKernels")
    out["cuda"] = "cudaemu"
    return out


BACKENDS = _backends()
KERNELS = [(op, col) for op, e in sorted(K.REGISTRY.items()) if not e.user for col in sorted(e.kernels) if col in BACKENDS]
CASES = [(op, col) for op, col in KERNELS if op not in ELSEWHERE]


def test_every_declared_kernel_has_a_test():
    """A kernel of a backend present here needs an example above or a named test elsewhere that exists."""
    missing = [f"{op} ({col})" for op, col in KERNELS if op not in EXAMPLES and op not in ELSEWHERE]
    assert not missing, "declared kernels without a test against their composed reference: " + ", ".join(missing)
    for op, where in ELSEWHERE.items():
        path, _, name = where.partition("::")
        tree = ast.parse((ROOT / path).read_text())
        assert any(isinstance(n, ast.FunctionDef) and n.name == name for n in tree.body), f"{op}: {where} is gone"


def test_every_op_names_a_composed_reference_and_kernels_that_resolve():
    for op, e in K.REGISTRY.items():
        if e.user:
            continue
        assert e.composed is None and op in ELSEWHERE or callable(e.composed_fn()), op
        for col, k in e.kernels.items():
            assert col in K.BACKENDS, (op, col)
            if col != "cuda" or "cuda" in BACKENDS:
                assert k.fn() is not None, (op, col)
            assert k.describe(None), (op, col)


# ------------------------------------------------------------------ kernel vs composed

def _arrays(a):
    if isinstance(a, list):
        return [None if t is None else t._data for t in a]
    return a._data if isinstance(a, ember.Tensor) else a


def _host(v):
    if isinstance(v, ember.Tensor):
        return v.float().numpy()
    if isinstance(v, (list, tuple)):
        return [_host(x) for x in v]
    return np.asarray(v)


def _run_kernel(op, dev, args, kwargs):
    entry = K.get(op)
    if entry.tensor_call:
        custom = registered(op)
        assert custom.path(ember.device(dev)) == "kernel"
        return custom(*args, **kwargs)
    k = K.bound(op, ember.device(dev).backend)
    assert k is not None
    res = k(*[_arrays(a) for a in args], **kwargs)
    if op in ("qrows", "letterbox"):  # (host arrays in and out)
        return res
    first = next(a for a in args if isinstance(a, ember.Tensor))
    if op == "conv_cat_act":
        assert res is not None, "the conv_cat_act kernel declined its example (natively it takes float32 1x1 parts)"
    if op == "linears":
        assert res is not None, "the linears kernel declined its example (x must be a pending decode row)"
        return first._new(res)
    if op in ("qmatmul_argmax", "qmatmul_topk"):
        return res
    if op == "copy_into":
        args[0]._data = res
        return args[0]
    return first._new(res)


def _fresh(args, kwargs):
    """A copy of the Tensor arguments (kernels that write in place must not feed the composed run)."""
    def cp(a):
        if isinstance(a, ember.Tensor):
            return ember.tensor(a.numpy() if a.dtype is not ember.bfloat16 else a.float().numpy(),
                                dtype=a.dtype, device=a.device)
        if isinstance(a, list):
            return [cp(x) for x in a]
        return a
    return [cp(a) for a in args], {k: cp(v) for k, v in kwargs.items()}


@pytest.mark.parametrize("op,col", CASES, ids=[f"{o}-{c}" for o, c in CASES])
def test_kernel_matches_its_composed_reference(op, col):
    dev = BACKENDS[col]
    entry = K.get(op)
    for args, kwargs in EXAMPLES[op](dev):
        first = next((a for a in args if isinstance(a, ember.Tensor)), None)  # (none: qrows's, letterbox's host arrays)
        if first is not None and not ember.device(dev).backend.supports(first.dtype):
            continue
        kargs, kkw = _fresh(args, kwargs) if op in IN_PLACE else (args, kwargs)
        with ember.no_grad():
            got = _run_kernel(op, dev, kargs, kkw)
            want = entry.composed_fn()(*args, **kwargs)
        _compare(op, got, want, args)
        if op in IN_PLACE:  # the writes too
            for a, b in zip(kargs, args):
                if isinstance(a, ember.Tensor):
                    np.testing.assert_allclose(_host(a), _host(b), rtol=1e-5, atol=1e-5, err_msg=f"{op} write")


def _compare(op, got, want, args):
    if op == "qmatmul_argmax":
        assert got == want, (got, want)
        return
    if op in ("qrows", "letterbox"):  # the same values as the codec / numpy's integers over 255, bit for bit
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
        assert np.asarray(got).dtype == np.float32
        return
    if op == "qmatmul_topk":
        ids, vals = (np.asarray(v) for v in got)
        wids, wvals = (np.asarray(v) for v in want)
        top = wids[np.argsort(-wvals, kind="stable")[:args[-1]]]
        assert set(top) <= set(ids.tolist()) and (np.diff(ids) > 0).all()
        np.testing.assert_allclose(vals, wvals[np.searchsorted(wids, ids)], rtol=1e-4, atol=1e-4)
        return
    g, w = _host(got), _host(want)
    if isinstance(w, list):  # linears: one result whose column ranges are the composed results
        w = np.concatenate(w, -1)
    assert g.shape == w.shape, (op, g.shape, w.shape)
    scale = max(1.0, float(np.nanmax(np.abs(w[np.isfinite(w)]))) if np.isfinite(w).any() else 1.0)
    half = any(isinstance(a, ember.Tensor) and a.dtype in (ember.float16, ember.bfloat16) for a in args)
    q8 = any(isinstance(a, str) and a == "q8" for a in args)
    tol = 2e-2 if op == "qmatmul" and q8 else (4e-3 if half else 2e-5)
    np.testing.assert_allclose(g, w, rtol=tol, atol=tol * scale, err_msg=op)
