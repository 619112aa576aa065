"""ONNX files made the way users' files are made (tests/onnx_exports.py: random-config transformers models through
torch.onnx.export, onnxruntime's transformer optimizer and its MatMulNBitsQuantizer; a GroupQueryAttention decoder
as onnxruntime-genai writes one) against onnxruntime on the same inputs: encoders' outputs, and decoders' greedy
tokens through their KV cache (ember.onnx.decoder.Decoder runs the same loop over both sessions)."""
import numpy as np
import pytest

import onnx_exports as X

ENCODERS = ["bert", "bert-q4", "whisper-encoder", "vit"]
DECODERS = ["gpt2", "gpt2-q4", "qwen2-gqa", "qwen2-gqa-q4", "llama", "llama-q4", "whisper-decoder",
            "whisper-decoder-q4"]
STEPS = 24


def _ort(path):
    from onnx_contrib_graphs import ort
    return ort().InferenceSession(str(path), providers=["CPUExecutionProvider"])


def _contrib_ops(path):
    import onnx
    return sorted({n.op_type for n in onnx.load(str(path), load_external_data=False).graph.node
                   if n.domain == "com.microsoft"})


@pytest.mark.parametrize("name", ENCODERS)
def test_encoder_export_matches_onnxruntime(device, name):
    """Outputs within 1e-4 of the largest value (float32 through 2 layers; 4-bit weights are the same levels on
    both sides)."""
    from ember.onnx import InferenceSession
    path = X.path(name)
    assert _contrib_ops(path), f"{name}: the optimizer fused nothing into com.microsoft operators"
    feeds = X.feeds(name, np.random.default_rng(1))
    want = _ort(path).run(None, feeds)
    got = InferenceSession(path, device=device).run(None, feeds)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(w).max())))


@pytest.mark.parametrize("name", DECODERS)
def test_decoder_export_greedy_tokens_match_onnxruntime(device, name):
    """24 greedy tokens after a 5-token prompt, one token a step through the KV cache: the same ids as onnxruntime,
    and each step's logits within 1e-4 of the largest."""
    from ember.onnx import InferenceSession
    from ember.onnx.decoder import Decoder
    path = X.path(name)
    extra = X.decoder_feeds(name, np.random.default_rng(2))
    prompt = [3, 17, 256, 9, 41]
    want_logits, got_logits = [], []

    def logging(dec, into):
        step = dec.step

        def wrapped(ids, feeds=None):
            out = step(ids, feeds)
            into.append(out[0, -1].copy())
            return out
        dec.step = wrapped
        return dec
    want = logging(Decoder(_ort(path)), want_logits).generate(prompt, STEPS, feeds=extra)
    got = logging(Decoder(InferenceSession(path, device=device)), got_logits).generate(prompt, STEPS, feeds=extra)
    for i, (g, w) in enumerate(zip(got_logits, want_logits)):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(w).max())),
                                   err_msg=f"{name}: logits of step {i}")
    assert got == want, f"{name}: greedy tokens differ from onnxruntime's"
    assert len(set(want)) > 3, f"{name}: the reference repeats itself ({want}): the test would prove little"


def test_gqa_export_is_the_transformers_model():
    """The GroupQueryAttention graph tests/onnx_exports.py writes is the Qwen2 it was built from: onnxruntime's
    logits on a prompt, then on one more token through the cache, equal transformers' within 1e-4."""
    import torch
    from ember.onnx.decoder import Decoder
    model = X.qwen2_model()
    ids = [3, 17, 256, 9, 41]
    with torch.no_grad():
        want = model(torch.tensor([ids + [7]])).logits.numpy()[0]
    dec = Decoder(_ort(X.path("qwen2-gqa")))
    first = dec.step(np.array([ids]))[0]
    second = dec.step(np.array([[7]]))[0]
    np.testing.assert_allclose(first, want[:5], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(second, want[5:], rtol=1e-4, atol=1e-4)


def test_exports_use_the_contrib_operators():
    """What the optimizer and quantizer wrote (so the parity tests above exercise them)."""
    ops = {n: _contrib_ops(X.path(n)) for n in ("bert-q4", "gpt2-q4", "qwen2-gqa-q4", "whisper-encoder", "vit")}
    assert {"Attention", "EmbedLayerNormalization", "SkipLayerNormalization", "BiasGelu", "MatMulNBits"} <= set(ops["bert-q4"])
    assert {"SkipLayerNormalization", "FastGelu", "MatMulNBits"} <= set(ops["gpt2-q4"])
    assert {"GroupQueryAttention", "SkipSimplifiedLayerNormalization", "MatMulNBits"} <= set(ops["qwen2-gqa-q4"])
    assert {"Attention", "SkipLayerNormalization", "BiasGelu"} <= set(ops["whisper-encoder"])
    assert {"SkipLayerNormalization", "BiasGelu"} <= set(ops["vit"])
