"""onnxruntime's contrib normalization and activation operators, each alone in a graph built with onnx.helper,
against onnxruntime over their attributes and optional inputs and outputs (tests/onnx_contrib_graphs.py)."""
import numpy as np
import pytest

pytest.importorskip("onnx")
from onnx import helper  # noqa: E402

from onnx_contrib_graphs import MS, compare  # noqa: E402

H = 16


def _f(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


@pytest.mark.parametrize("skip_shape", ["bsh", "1sh", "sh"])
@pytest.mark.parametrize("beta,bias", [(False, False), (True, False), (True, True)])
def test_skip_layer_norm(device, rng, skip_shape, beta, bias):
    x = _f(rng, 2, 3, H)
    skip = _f(rng, *{"bsh": (2, 3, H), "1sh": (1, 3, H), "sh": (3, H)}[skip_shape])
    inits = {"gamma": _f(rng, H) + 1, "beta": _f(rng, H) if beta else None, "bias": _f(rng, H) if bias else None}
    names = ["x", "skip", "gamma", "beta" if beta else "", "bias" if bias else ""]
    while not names[-1]:
        names.pop()
    node = helper.make_node("SkipLayerNormalization", names, ["y", "mean", "inv", "sum"], domain=MS, epsilon=1e-5)
    compare(device, node, {"x": x, "skip": skip}, ["y", "mean", "inv", "sum"],
            {k: v for k, v in inits.items() if v is not None})


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("rank", [2, 3])
def test_skip_simplified_layer_norm(device, rng, bias, rank):
    shape = (5, H) if rank == 2 else (2, 3, H)
    names = ["x", "skip", "gamma"] + (["bias"] if bias else [])
    inits = {"gamma": _f(rng, H) + 1, **({"bias": _f(rng, H)} if bias else {})}
    node = helper.make_node("SkipSimplifiedLayerNormalization", names, ["y", "", "inv", "sum"], domain=MS)
    compare(device, node, {"x": _f(rng, *shape), "skip": _f(rng, *shape)}, ["y", "inv", "sum"], inits,
            skip=())


@pytest.mark.parametrize("axis", [-1, 1])
def test_simplified_layer_norm(device, rng, axis):
    x = _f(rng, 2, 3, H)
    scale = _f(rng, *((H,) if axis == -1 else (3, H))) + 1
    node = helper.make_node("SimplifiedLayerNormalization", ["x", "scale"], ["y", "inv"], axis=axis, epsilon=1e-6)
    compare(device, node, {"x": x}, ["y", "inv"], {"scale": scale})


@pytest.mark.parametrize("segment,mask,positions", [(False, False, False), (True, True, False),
                                                     (True, False, True), (False, True, True)])
def test_embed_layer_norm(device, rng, segment, mask, positions):
    b, s, vocab = 2, 5, 30
    ids = rng.integers(0, vocab, (b, s)).astype(np.int32)
    feeds = {"ids": ids}
    if segment:
        feeds["seg"] = rng.integers(0, 2, (b, s)).astype(np.int32)
    if mask:
        feeds["mask"] = np.array([[1] * 5, [1, 1, 1, 0, 0]], np.int32)
    if positions:
        feeds["pos"] = rng.integers(0, 8, (b, s)).astype(np.int32)
    inits = {"word": _f(rng, vocab, H), "position": _f(rng, 8, H), "gamma": _f(rng, H) + 1, "beta": _f(rng, H)}
    if segment:
        inits["segment"] = _f(rng, 2, H)
    names = ["ids", "seg" if segment else "", "word", "position", "segment" if segment else "", "gamma", "beta",
             "mask" if mask else "", "pos" if positions else ""]
    while not names[-1]:
        names.pop()
    outs = ["y", "mask_index", "sum"] if mask else ["y", "", "sum"]
    node = helper.make_node("EmbedLayerNormalization", names, outs, domain=MS, epsilon=1e-5)
    compare(device, node, feeds, [("mask_index", np.int32) if o == "mask_index" else o for o in outs if o], inits)


@pytest.mark.parametrize("op,attrs,bias", [("Gelu", {}, False), ("BiasGelu", {}, True), ("FastGelu", {}, False),
                                           ("FastGelu", {}, True), ("QuickGelu", {}, False),
                                           ("QuickGelu", {"alpha": 1.0}, False), ("QuickGelu", {"alpha": 0.5}, False)])
def test_gelus(device, rng, op, attrs, bias):
    x = _f(rng, 2, 3, H, scale=2.0)
    node = helper.make_node(op, ["x", "b"] if bias else ["x"], ["y"], domain=MS, **attrs)
    compare(device, node, {"x": x}, ["y"], {"b": _f(rng, H)} if bias else None, atol=2e-5)


def _ember(device, node, feeds, outputs, inits):
    from ember.onnx import InferenceSession
    from onnx_contrib_graphs import model
    return InferenceSession(model(node, feeds, outputs, inits), device=device).run(None, feeds)


def test_bias_add(device, rng):
    """onnxruntime runs BiasAdd on CUDA only: the reference is the schema's X + bias + skip in numpy."""
    x, skip, b = _f(rng, 2, 6, H), _f(rng, 2, 6, H), _f(rng, H)
    (got,) = _ember(device, helper.make_node("BiasAdd", ["x", "b", "skip"], ["y"], domain=MS),
                    {"x": x, "skip": skip}, ["y"], {"b": b})
    np.testing.assert_allclose(got, x + b + skip, rtol=1e-6, atol=1e-6)


def test_bias_split_gelu(device, rng):
    """CUDA-only in onnxruntime: the reference is the schema's left * Gelu(right) of X + bias, in torch."""
    import torch
    x, b = _f(rng, 2, 6, 2 * H), _f(rng, 2 * H)
    (got,) = _ember(device, helper.make_node("BiasSplitGelu", ["x", "b"], ["y"], domain=MS), {"x": x}, ["y"],
                    {"b": b})
    left, right = torch.from_numpy(x + b).chunk(2, -1)
    np.testing.assert_allclose(got, (left * torch.nn.functional.gelu(right)).numpy(), rtol=1e-5, atol=2e-6)
