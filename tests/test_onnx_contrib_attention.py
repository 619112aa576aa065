"""onnxruntime's contrib attention operators (Attention, MultiHeadAttention, GroupQueryAttention, RotaryEmbedding),
each alone in a graph built with onnx.helper, against onnxruntime over their attribute space: mask formats,
causal or not, past lengths, packed inputs, rotary interleaved or not, local windows, softcap, head sinks."""
import numpy as np
import pytest

pytest.importorskip("onnx")
from onnx import helper  # noqa: E402

from onnx_contrib_graphs import MS, compare  # noqa: E402

B, S, N, HD = 2, 3, 4, 8
D = N * HD


def _f(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def _names(*names):
    names = list(names)
    while names and not names[-1]:
        names.pop()
    return names


# ====================================================================== Attention

def _mask(kind, b, s, total):
    if kind == "none":
        return None
    if kind == "lengths":
        return np.array([total, total - 2][:b], np.int32)
    if kind == "ends_starts":
        return np.array([total, total - 1, 0, 1][:b] + [0, 1][:b], np.int32)[:2 * b]
    if kind == "raw2d":
        m = np.ones((b, total), np.int32)
        m[1, -2:] = 0
        return m
    m = np.ones((b, s, total), np.int32)
    m[0, :, 0] = 0
    m[1, 1, 1:] = 0
    return m


@pytest.mark.parametrize("mask", ["none", "lengths", "ends_starts", "raw2d", "raw3d"])
@pytest.mark.parametrize("causal,past", [(0, 0), (1, 0), (1, 2), (0, 3)])
def test_attention(device, rng, mask, causal, past):
    total = past + S
    feeds = {"x": _f(rng, B, S, D)}
    m = _mask(mask, B, S, total)
    if m is not None:
        feeds["mask"] = m
    if past:
        feeds["past"] = _f(rng, 2, B, N, past, HD)
    node = helper.make_node("Attention", _names("x", "w", "b", "mask" if m is not None else "", "past" if past else ""),
                            ["y", "present"] if past else ["y"], domain=MS, num_heads=N, unidirectional=causal)
    compare(device, node, feeds, ["y", "present"] if past else ["y"],
            {"w": _f(rng, D, 3 * D, scale=0.3), "b": _f(rng, 3 * D)}, atol=2e-5)


def test_attention_bias_sizes_scale_and_filter(device, rng):
    """qkv_hidden_sizes with a wider V, attention_bias, a custom scale and mask_filter_value."""
    sizes = [D, D, 2 * D]
    feeds = {"x": _f(rng, B, S, D), "mask": _mask("raw2d", B, S, S), "ab": _f(rng, 1, N, S, S)}
    node = helper.make_node("Attention", ["x", "w", "b", "mask", "", "ab"], ["y"], domain=MS, num_heads=N,
                            qkv_hidden_sizes=sizes, scale=0.2, mask_filter_value=-50.0)
    compare(device, node, feeds, ["y"], {"w": _f(rng, D, sum(sizes), scale=0.3), "b": _f(rng, sum(sizes))},
            atol=2e-5)


# ====================================================================== MultiHeadAttention

@pytest.mark.parametrize("form", ["separate", "cache_kv"])
@pytest.mark.parametrize("bias", [False, True])
def test_mha_forms(device, rng, form, bias):
    """Separate Q, K, V (with the projections' bias) and K, V as a (B, N, L, H) cross-attention cache."""
    L = 5
    if form == "separate":
        feeds = {"q": _f(rng, B, S, D), "k": _f(rng, B, L, D), "v": _f(rng, B, L, D)}
    else:
        feeds = {"q": _f(rng, B, S, D), "k": _f(rng, B, N, L, HD), "v": _f(rng, B, N, L, HD)}
    inits = {"bias": _f(rng, 3 * D)} if bias else {}
    node = helper.make_node("MultiHeadAttention", _names("q", "k", "v", "bias" if bias else ""), ["y"], domain=MS,
                            num_heads=N)
    compare(device, node, feeds, ["y"], inits, atol=2e-5)


@pytest.mark.parametrize("form", ["packed_qkv", "packed_kv"])
@pytest.mark.parametrize("bias", [False, True])
def test_mha_packed(device, rng, form, bias):
    """Packed QKV (B, S, N, 3, H) and packed KV (B, L, N, 2, H), which onnxruntime runs on CUDA only: the
    reference is onnxruntime's CPU kernel on the same values unpacked into separate Q, K, V."""
    from ember.onnx import InferenceSession
    from onnx_contrib_graphs import model, ort
    L = S if form == "packed_qkv" else 5
    bias_v = _f(rng, 3 * D) if bias else None
    inits = {"bias": bias_v} if bias else {}
    if form == "packed_qkv":
        qkv = _f(rng, B, S, N, 3, HD)
        feeds, names = {"q": qkv}, ["q", "", ""]
        sep = {"q": qkv[:, :, :, 0].reshape(B, S, D), "k": qkv[:, :, :, 1].reshape(B, S, D),
               "v": qkv[:, :, :, 2].reshape(B, S, D)}
    else:
        kv = _f(rng, B, L, N, 2, HD)
        q = _f(rng, B, S, D)
        feeds, names = {"q": q, "k": kv}, ["q", "k", ""]
        sep = {"q": q, "k": kv[:, :, :, 0].reshape(B, L, D), "v": kv[:, :, :, 1].reshape(B, L, D)}
    attrs = dict(domain=MS, num_heads=N)
    node = helper.make_node("MultiHeadAttention", _names(*names, "bias" if bias else ""), ["y"], **attrs)
    ref = helper.make_node("MultiHeadAttention", _names("q", "k", "v", "bias" if bias else ""), ["y"], **attrs)
    (want,) = ort().InferenceSession(model(ref, sep, ["y"], inits), providers=["CPUExecutionProvider"]).run(None, sep)
    (got,) = InferenceSession(model(node, feeds, ["y"], inits), device=device).run(None, feeds)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5)


@pytest.mark.parametrize("mask", ["none", "lengths", "raw2d", "raw3d"])
@pytest.mark.parametrize("past,causal", [(0, 0), (0, 1), (4, 1), (4, 0)])
def test_mha_past_and_masks(device, rng, mask, past, causal):
    total = past + S
    feeds = {"q": _f(rng, B, S, D), "k": _f(rng, B, S, D), "v": _f(rng, B, S, D)}
    m = _mask(mask, B, S, total)
    if m is not None:
        feeds["kpm"] = m
    if past:
        feeds["pk"], feeds["pv"] = _f(rng, B, N, past, HD), _f(rng, B, N, past, HD)
    names = _names("q", "k", "v", "", "kpm" if m is not None else "", "", "pk" if past else "", "pv" if past else "")
    outs = ["y", "present_k", "present_v"] if past else ["y"]
    node = helper.make_node("MultiHeadAttention", names, outs, domain=MS, num_heads=N, unidirectional=causal)
    compare(device, node, feeds, outs, atol=2e-5)


def test_mha_attention_bias_scale(device, rng):
    feeds = {"q": _f(rng, B, S, D), "k": _f(rng, B, 5, D), "v": _f(rng, B, 5, D), "ab": _f(rng, B, N, S, 5)}
    node = helper.make_node("MultiHeadAttention", ["q", "k", "v", "", "", "ab"], ["y"], domain=MS, num_heads=N,
                            scale=0.11, mask_filter_value=-1000.0)
    compare(device, node, feeds, ["y"], atol=2e-5)


# ====================================================================== GroupQueryAttention

NKV, GHD = 2, 32  # onnxruntime's CPU kernel: head sizes a multiple of 16, rotary halves of 8


def _rotary_caches(rng, max_len, rot):
    inv = 1.0 / 10000 ** (np.arange(0, rot, 2) / rot)
    ang = np.arange(max_len)[:, None] * inv[None]
    return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)


def _gqa_feeds(rng, b, s, past_lens, packed, buf=None):
    """Inputs of one GQA step: new q/k/v for s tokens per row, a cache holding past_lens[i] rows per batch row (in
    a buffer of `buf` rows: the past's own length, or a shared max-length buffer)."""
    total = [p + s for p in past_lens]
    buf = max(past_lens) if buf is None else buf
    feeds = {}
    if packed:
        feeds["q"] = _f(rng, b, s, (N + 2 * NKV) * GHD)
    else:
        feeds.update(q=_f(rng, b, s, N * GHD), k=_f(rng, b, s, NKV * GHD), v=_f(rng, b, s, NKV * GHD))
    feeds["pk"], feeds["pv"] = _f(rng, b, NKV, buf, GHD), _f(rng, b, NKV, buf, GHD)
    feeds["seqlens_k"] = np.array([t - 1 for t in total], np.int32)
    feeds["total"] = np.array(max(total), np.int32)
    return feeds


def _gqa(device, rng, feeds, packed, rotary=None, extra=(), atol=3e-5, **attrs):
    inits = {}
    names = ["q", "" if packed else "k", "" if packed else "v", "pk", "pv", "seqlens_k", "total"]
    if rotary is not None:
        inits["cos"], inits["sin"] = _rotary_caches(rng, 64, rotary)
        names += ["cos", "sin"]
        attrs["do_rotary"] = 1
    names += list(extra)
    node = helper.make_node("GroupQueryAttention", _names(*names), ["y", "present_k", "present_v"], domain=MS,
                            num_heads=N, kv_num_heads=NKV, **attrs)
    return compare(device, node, feeds, ["y", "present_k", "present_v"], inits, atol=atol)


@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("step", ["prompt", "decode", "chunk"])
def test_gqa_steps(device, rng, packed, step):
    """A first prompt (no past), a decode step over a cache of 5, a 3-token chunk after a past of 4."""
    b, s, past = {"prompt": (2, 4, 0), "decode": (2, 1, 5), "chunk": (1, 3, 4)}[step]
    _gqa(device, rng, _gqa_feeds(rng, b, s, [past] * b, packed), packed)


def test_gqa_ragged_decode(device, rng):
    """A batched decode step whose rows have different lengths (seqlens_k), in a shared max-length buffer."""
    feeds = _gqa_feeds(rng, 2, 1, [6, 3], False, buf=10)
    _gqa(device, rng, feeds, False)


@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("rot", [GHD, GHD // 2])
@pytest.mark.parametrize("s,past", [(4, 0), (1, 5)])
def test_gqa_rotary(device, rng, interleaved, rot, s, past):
    """do_rotary with cos/sin caches: whole or partial rotary dims, halves or interleaved pairs."""
    _gqa(device, rng, _gqa_feeds(rng, 1, s, [past], False), False, rotary=rot, rotary_interleaved=interleaved)


@pytest.mark.parametrize("attrs", [{"local_window_size": 2}, {"softcap": 2.0}, {"smooth_softmax": 1},
                                   {"scale": 0.3}])
def test_gqa_attributes(device, rng, attrs):
    _gqa(device, rng, _gqa_feeds(rng, 1, 5, [0], False), False, **attrs)
    _gqa(device, rng, _gqa_feeds(rng, 1, 1, [6], False), False, **attrs)


def test_gqa_head_sink_and_bias(device, rng):
    feeds = _gqa_feeds(rng, 1, 3, [2], False)
    feeds["sink"] = _f(rng, N)
    feeds["ab"] = _f(rng, 1, N, 3, 5)
    _gqa(device, rng, feeds, False, extra=["", "", "", "ab", "sink"])


# ====================================================================== RotaryEmbedding

@pytest.mark.parametrize("rank", [3, 4])
@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("positions", ["ids", "offset"])
def test_rotary_embedding(device, rng, rank, interleaved, positions):
    x = _f(rng, B, S, D) if rank == 3 else _f(rng, B, N, S, HD)
    pos = rng.integers(0, 20, (B, S)).astype(np.int64) if positions == "ids" else np.array([5], np.int64)
    cos, sin = _rotary_caches(rng, 32, HD)
    attrs = {"interleaved": interleaved}
    if rank == 3:
        attrs["num_heads"] = N
    node = helper.make_node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], domain=MS, **attrs)
    compare(device, node, {"x": x, "pos": pos}, ["y"], {"cos": cos, "sin": sin}, atol=1e-5)


def test_rotary_embedding_partial(device, rng):
    """rotary_embedding_dim below the head size: the rest of each head passes through."""
    cos, sin = _rotary_caches(rng, 32, HD // 2)
    node = helper.make_node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], domain=MS, num_heads=N,
                            rotary_embedding_dim=HD // 2)
    compare(device, node, {"x": _f(rng, B, S, D), "pos": rng.integers(0, 20, (B, S)).astype(np.int64)}, ["y"],
            {"cos": cos, "sin": sin}, atol=1e-5)
