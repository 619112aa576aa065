"""ember.nn.functional vs torch.nn.functional: forward and gradients, on every device."""
import numpy as np
import pytest

import ember
from op_helper import check, make


def F(m):
    return m.nn.functional


def test_softmax_family(device):
    for d in (-1, 0, 1):
        check(lambda m, x: F(m).softmax(x, d), [(3, 4, 5)], device=device)
        check(lambda m, x: F(m).log_softmax(x, d), [(3, 4, 5)], device=device)
    check(lambda m, x: x.softmax(-1), [(2, 6)], device=device, dtype="bfloat16")
    check(lambda m, x: F(m).softmax(x * 50, -1), [(2, 6)], device=device, atol=1e-5)  # large logits stay finite


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "composed"])
def test_norms(device, fused):
    # fused kernels run without grad; with grad the composed path runs: both must match torch
    g = not fused
    check(lambda m, x, w, b: F(m).layer_norm(x, (6,), w, b), [(2, 3, 6), (6,), (6,)], device=device, grad=g)
    check(lambda m, x: F(m).layer_norm(x, (3, 6)), [(2, 3, 6)], device=device, grad=g)
    check(lambda m, x, w: F(m).rms_norm(x, (6,), w, 1e-6), [(2, 3, 6), (6,)], device=device, grad=g)
    check(lambda m, x: F(m).rms_norm(x, (6,)), [(4, 6)], device=device, grad=g)
    check(lambda m, x, w, b: F(m).group_norm(x, 2, w, b), [(2, 4, 3, 3), (4,), (4,)], device=device, grad=g)
    check(lambda m, x, w, b: F(m).layer_norm(x, (8,), w, b), [(3, 8), (8,), (8,)], device=device,
          dtype="bfloat16", grad=g, atol=3e-2)


def test_batch_norm(device):
    rm, rv = make((4,)), np.abs(make((4,))) + 0.5
    check(lambda m, x, w, b: F(m).batch_norm(x, m.tensor(rm), m.tensor(rv), w, b, training=False),
          [(2, 4, 3, 3), (4,), (4,)], device=device)

    def train(m, x, w, b):
        mean, var = m.tensor(rm), m.tensor(rv)
        y = F(m).batch_norm(x, mean, var, w, b, training=True, momentum=0.2)
        return y, mean, var  # the running stats are updated in place like torch
    check(train, [(3, 4, 5), (4,), (4,)], device=device)


def test_linear_embedding_dropout(device):
    check(lambda m, x, w, b: F(m).linear(x, w, b), [(2, 3, 5), (4, 5), (4,)], device=device)
    check(lambda m, x, w: F(m).linear(x, w), [(5,), (4, 5)], device=device)
    x = ember.ones(2000, device=device)
    ember.manual_seed(0)
    y = F(ember).dropout(x, 0.25)
    kept = (y.numpy() != 0).mean()
    assert abs(kept - 0.75) < 0.05 and np.allclose(y.numpy()[y.numpy() != 0], 1 / 0.75)
    assert F(ember).dropout(x, 0.5, training=False) is x


CONV2D = [dict(), dict(stride=2), dict(padding=1), dict(padding=(2, 0), dilation=(1, 2)),
          dict(stride=(2, 1), padding=1, groups=2), dict(padding="same"), dict(groups=4, padding=1)]


@pytest.mark.parametrize("kw", CONV2D, ids=str)
def test_conv2d(device, kw):
    g = kw.get("groups", 1)
    check(lambda m, x, w, b: F(m).conv2d(x, w, b, **kw), [(2, 4, 7, 8), (6 if g != 4 else 4, 4 // g, 3, 3), (6 if g != 4 else 4,)],
          device=device, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_conv_bias_fused_without_grad(device, dtype):
    # no gradient recorded: the backend's fused conv + bias (cpu: bias added in place) must equal torch's
    tol = dict(atol=1e-4, rtol=1e-4) if dtype == "float32" else {}
    check(lambda m, x, w, b: F(m).conv2d(x, w, b, padding=1, groups=2), [(2, 4, 7, 8), (6, 2, 3, 3), (6,)],
          device=device, dtype=dtype, grad=False, **tol)
    check(lambda m, x, w, b: F(m).conv1d(x, w, b, stride=2), [(2, 4, 11), (6, 4, 3), (6,)], device=device, dtype=dtype,
          grad=False, **tol)


@pytest.mark.parametrize("kw", [dict(padding=1), dict(stride=2, padding=1), dict(dilation=2, padding=(2, 1))], ids=str)
def test_conv2d_in_bands_of_output_rows(device, kw, monkeypatch):
    # the cpu backend runs im2col + matmul a band of output rows at a time; small bands force many,
    # with a partial last one, over a batch of two
    from ember.backends import numpy_conv
    monkeypatch.setattr(numpy_conv, "_BAND", 5000)
    check(lambda m, x, w, b: F(m).conv2d(x, w, b, **kw), [(2, 5, 23, 19), (4, 5, 3, 3), (4,)], device=device,
          atol=1e-4, rtol=1e-4)


def test_conv2d_1x1_and_low_precision(device):
    check(lambda m, x, w: F(m).conv2d(x, w, stride=2), [(2, 3, 5, 5), (4, 3, 1, 1)], device=device, atol=1e-5)
    check(lambda m, x, w: F(m).conv2d(x, w, padding=1), [(1, 3, 6, 6), (4, 3, 3, 3)], device=device,
          dtype="float16", atol=2e-2)


@pytest.mark.parametrize("kw", [dict(), dict(stride=2, padding=1), dict(dilation=2, padding=2), dict(groups=2, stride=3)], ids=str)
def test_conv1d(device, kw):
    g = kw.get("groups", 1)
    check(lambda m, x, w, b: F(m).conv1d(x, w, b, **kw), [(2, 4, 11), (6, 4 // g, 3), (6,)], device=device, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("kw", [dict(), dict(stride=2), dict(stride=2, padding=1, output_padding=1),
                                dict(dilation=2, padding=1), dict(groups=2, stride=3, padding=2)], ids=str)
def test_conv_transpose(device, kw):
    g = kw.get("groups", 1)
    check(lambda m, x, w, b: F(m).conv_transpose2d(x, w, b, **kw), [(2, 4, 5, 4), (4, 6 // g, 3, 3), (6,)],
          device=device, atol=1e-4, rtol=1e-4)
    check(lambda m, x, w: F(m).conv_transpose1d(x, w, **kw), [(2, 4, 7), (4, 6 // g, 3)], device=device, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("k", [2, (2, 3)], ids=str)
def test_conv_transpose_stride_equal_to_kernel(device, k):
    """Stride == kernel, unpadded (SAM's and YOLO's upsamplers) is one matmul and a reshape: same values and
    gradients as torch, 1-D and 2-D, with and without bias."""
    k2 = k if isinstance(k, tuple) else (k, k)
    check(lambda m, x, w, b: F(m).conv_transpose2d(x, w, b, stride=k2), [(2, 4, 5, 3), (4, 6) + k2, (6,)],
          device=device, atol=1e-4, rtol=1e-4)
    check(lambda m, x, w: F(m).conv_transpose1d(x, w, stride=3), [(2, 4, 7), (4, 5, 3)], device=device,
          atol=1e-4, rtol=1e-4)


POOL = {
    "max": lambda m, x: F(m).max_pool2d(x, 2), "max_s1p1": lambda m, x: F(m).max_pool2d(x, 3, 1, 1),
    "max_ceil": lambda m, x: F(m).max_pool2d(x, 2, ceil_mode=True), "max_dil": lambda m, x: F(m).max_pool2d(x, 2, 1, dilation=2),
    "avg": lambda m, x: F(m).avg_pool2d(x, 2), "avg_pad": lambda m, x: F(m).avg_pool2d(x, 3, 2, 1),
    "avg_pad_excl": lambda m, x: F(m).avg_pool2d(x, 3, 2, 1, count_include_pad=False),
    "avg_ceil": lambda m, x: F(m).avg_pool2d(x, 2, ceil_mode=True),
    "adaptive": lambda m, x: F(m).adaptive_avg_pool2d(x, (2, 3)), "adaptive_odd": lambda m, x: F(m).adaptive_avg_pool2d(x, (3, 2)),
    "adaptive1": lambda m, x: F(m).adaptive_avg_pool2d(x, 1),
    "nearest2x": lambda m, x: F(m).interpolate(x, scale_factor=2, mode="nearest"),
    "nearest_size": lambda m, x: F(m).interpolate(x, size=(4, 11), mode="nearest"),
    "bilinear": lambda m, x: F(m).interpolate(x, size=(9, 4), mode="bilinear", align_corners=False),
    "bilinear_ac": lambda m, x: F(m).interpolate(x, scale_factor=1.5, mode="bilinear", align_corners=True),
    "pad_const": lambda m, x: F(m).pad(x, (1, 2, 0, 1), value=0.5), "pad_neg": lambda m, x: F(m).pad(x, (-1, 1)),
    "pad_reflect": lambda m, x: F(m).pad(x, (2, 1, 1, 2), mode="reflect"),
    "pad_replicate": lambda m, x: F(m).pad(x, (2, 1, 1, 2), mode="replicate"),
}


@pytest.mark.parametrize("name", sorted(POOL))
def test_pool_resize_pad(device, name):
    check(POOL[name], [(2, 3, 7, 6)], device=device, atol=1e-5)


@pytest.mark.parametrize("grad", [True, False], ids=["composed", "fused"])
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa(device, causal, grad):
    # without gradients the backend's fused attention runs (when it has one); with them the composed path
    check(lambda m, q, k, v: F(m).scaled_dot_product_attention(q, k, v, is_causal=causal),
          [(2, 3, 5, 8), (2, 3, 5, 8), (2, 3, 5, 4)], device=device, atol=1e-5, grad=grad)
    if not causal:  # torch refuses a mask together with is_causal
        check(lambda m, q, k, v, b: F(m).scaled_dot_product_attention(q, k, v, attn_mask=b),
              [(1, 4, 8), (1, 6, 8), (1, 6, 8), (4, 6)], device=device, atol=1e-5, grad=grad)
    mask = make((5, 7), "bool")
    mask[:, 0] = True
    check(lambda m, q, k, v: F(m).scaled_dot_product_attention(q, k, v, attn_mask=m.tensor(mask), scale=0.3),
          [(2, 5, 8), (2, 7, 8), (2, 7, 8)], device=device, atol=1e-5)
    check(lambda m, q, k, v, b: F(m).scaled_dot_product_attention(q, k, v, attn_mask=b),
          [(1, 4, 8), (1, 6, 8), (1, 6, 8), (4, 6)], device=device, atol=1e-5)


@pytest.mark.parametrize("grad", [True, False], ids=["composed", "fused"])
def test_sdpa_long_sequences(device, grad):
    # past 2**19 scores per head the cpu backend computes a block of query rows at a time (Whisper's encoder)
    check(lambda m, q, k, v: F(m).scaled_dot_product_attention(q, k, v),
          [(1, 2, 800, 16), (1, 2, 700, 16), (1, 2, 700, 8)], device=device, atol=1e-5, grad=grad)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_linear_fused_without_grad(device, dtype):
    # no gradient recorded: the backend's fused linear (cpu: bias added in place) must equal torch's
    check(lambda m, x, w, b: F(m).linear(x, w, b), [(2, 5, 7), (4, 7), (4,)], device=device, dtype=dtype, grad=False)
    check(lambda m, x, w, b: F(m).linear(x, w, b), [(3, 7), (4, 7), (4,)], device=device, dtype=dtype, grad=False,
          transpose=True)


def test_losses(device):
    tgt = np.array([1, 0, 3, 3, 2])
    check(lambda m, x: F(m).cross_entropy(x, m.tensor(tgt)), [(5, 4)], device=device)
    check(lambda m, x: F(m).cross_entropy(x, m.tensor(tgt), label_smoothing=0.1, reduction="sum"), [(5, 4)], device=device)
    w = make((4,), low=0.1)
    check(lambda m, x: F(m).cross_entropy(x, m.tensor(np.array([1, -100, 3, 3, 2])), weight=m.tensor(w)), [(5, 4)],
          device=device)
    check(lambda m, x: F(m).cross_entropy(x, m.tensor(tgt), weight=m.tensor(w), label_smoothing=0.2), [(5, 4)],
          device=device)
    check(lambda m, x: F(m).cross_entropy(x, m.tensor(np.array([[1, 2], [0, 0]]))), [(2, 3, 2)], device=device)
    check(lambda m, x, p: F(m).cross_entropy(x, p.softmax(-1)), [(5, 4), (5, 4)], device=device)
    check(lambda m, x: F(m).nll_loss(F(m).log_softmax(x, 1), m.tensor(tgt), reduction="none"), [(5, 4)], device=device)
    check(lambda m, a, b: F(m).mse_loss(a, b), [(3, 4), (3, 4)], device=device)
    check(lambda m, a, b: F(m).l1_loss(a, b, reduction="sum"), [(3, 4), (3, 4)], device=device)
    check(lambda m, a, b: F(m).binary_cross_entropy_with_logits(a * 10, b.sigmoid()), [(3, 4), (3, 4)], device=device)
    pw = np.abs(make((4,))) + 0.1
    check(lambda m, a, b: F(m).binary_cross_entropy_with_logits(a, b.sigmoid(), pos_weight=m.tensor(pw)),
          [(3, 4), (3, 4)], device=device)


def test_shape_errors(device):
    x = ember.randn(2, 3, device=device)
    with pytest.raises(ValueError, match=r"matmul shape mismatch.*\(2, 3\).*\(2, 3\)"):
        x @ x
    with pytest.raises(ValueError, match="cannot be broadcast"):
        x + ember.randn(4, device=device)
    with pytest.raises(ValueError, match="channels"):
        F(ember).conv2d(ember.randn(1, 3, 5, 5), ember.randn(4, 2, 3, 3))
    with pytest.raises(ValueError, match="cannot reshape"):
        x.reshape(4, 2)
    with pytest.raises(TypeError, match="dtype"):
        F(ember).conv2d(ember.randn(1, 3, 5, 5), ember.randn(4, 3, 3, 3).half())
    with pytest.raises(ValueError, match="same device|different devices"):
        fake = ember.zeros(2, 3)
        fake.device = ember.Device("cuda")  # a tensor claiming another device
        x + fake

