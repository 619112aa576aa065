"""The float C kernels (cpu_kernels/conv.c, attention.c, rows.c, maps.c) against references computed here, over
their shape spaces, on every vector path this machine builds (-march=native, SSSE3, plain C) and in the page (wasm).

- Each kernel against float64 numpy (and the registry op against its composed Tensor-op form), within float32
  rounding bounded by the inputs' magnitudes.
- Rows split between threads give the same bits (the kernels compute every output alike in any row range).
- Builds that do not fuse multiply-adds (SSSE3, plain C, the page's plain SIMD128 module) give the same bits as
  each other; the native build with FMA stays within the rounding bound. The row kernels use no multiply-add at
  all: every build and the page agree bit for bit.
"""
from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import kernels as K
from ember.backends import cpu_float_kernels as CFK
from ember.backends.numpy_conv import conv as im2col_conv
from native_builds import build_variants
from pyodide_runner import pyodide_dist, pyodide_session  # noqa: F401

EPS = np.finfo(np.float32).eps


def rnd(*shape, seed=0, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    """{tag: (FloatKernels, NativeKernels)} for the native, SSSE3 and plain-C builds of the kernels."""
    return {tag: (CFK.FloatKernels(nk.lib, native=True), nk)
            for tag, nk in build_variants(tmp_path_factory).items()}


def _threads(nk, n):
    nk.set_threads(n)
    assert nk.threads == n


# ------------------------------------------------------------------------------------------ references

def _act64(y, act):
    if act == "relu":
        return np.maximum(y, 0)
    if act == "silu":
        return y / (1 + np.exp(-y))
    if act == "gelu":
        from math import erf
        return y * 0.5 * (1 + np.vectorize(erf)(y / np.sqrt(2)))
    if act == "gelu_tanh":
        return 0.5 * y * (1 + np.tanh(np.sqrt(2 / np.pi) * (y + 0.044715 * y ** 3)))
    return y


def conv_reference(x, w, b, stride, padding, dilation, groups, act):
    """(float64 act(conv + b), a bound on float32 rounding: eps times the magnitudes summed, times a margin)."""
    y = im2col_conv(x.astype(np.float64), w.astype(np.float64), stride, padding, dilation, groups)
    mag = im2col_conv(np.abs(x).astype(np.float64), np.abs(w).astype(np.float64), stride, padding, dilation, groups)
    if b is not None:
        y = y + b.reshape(1, -1, 1, 1)
        mag = mag + np.abs(b).reshape(1, -1, 1, 1)
    return _act64(y, act), 4 * EPS * mag + 4 * EPS * np.abs(y) + 1e-6


# x (N, C, H, W), w (O, C / g, KH, KW), stride, padding, dilation, groups, bias, act: 3x3 and 1x1, stride 1 / 2 / 3,
# padding 0..3, dilation, groups and depthwise, widths and channel counts that leave partial tiles, 7x7 / 5x5
CONV_CASES = [
    ((1, 3, 17, 19), (5, 3, 3, 3), (1, 1), (1, 1), (1, 1), 1, True, None),
    ((2, 8, 9, 30), (7, 8, 3, 3), (2, 2), (1, 1), (1, 1), 1, True, "silu"),
    ((1, 16, 12, 12), (16, 16, 3, 3), (1, 1), (2, 2), (2, 2), 1, False, "relu"),
    ((1, 6, 10, 10), (6, 1, 3, 3), (1, 1), (1, 1), (1, 1), 6, True, "silu"),        # depthwise
    ((1, 8, 7, 41), (12, 4, 1, 1), (1, 1), (0, 0), (1, 1), 2, True, "gelu"),
    ((1, 4, 1, 50), (6, 4, 1, 3), (1, 2), (0, 1), (1, 1), 1, True, "gelu"),         # conv1d as one row
    ((1, 3, 32, 32), (8, 3, 7, 7), (2, 2), (3, 3), (1, 1), 1, True, "gelu_tanh"),
    ((1, 24, 20, 37), (33, 24, 3, 3), (1, 1), (1, 1), (1, 1), 1, True, "silu"),     # 33 outputs: a partial tile
    ((1, 5, 23, 23), (9, 5, 5, 5), (3, 3), (2, 2), (1, 1), 1, True, None),
    ((1, 64, 14, 200), (40, 64, 3, 3), (1, 1), (1, 1), (1, 1), 1, True, "silu"),    # several segments, channel blocks
    ((1, 4, 9, 9), (4, 4, 3, 3), (2, 1), (0, 3), (1, 2), 1, True, None),            # mixed stride / dilation
    # outputs of at most 8 pixels an image: dot products (conv.c's narrow_rows)
    ((1, 129, 1, 3), (128, 129, 1, 3), (1, 1), (0, 1), (1, 1), 1, True, "relu"),    # Silero VAD's encoder
    ((1, 1, 1, 576), (258, 1, 1, 256), (1, 128), (0, 0), (1, 1), 1, False, None),   # its STFT as a conv
    ((2, 6, 3, 4), (9, 2, 2, 2), (2, 2), (1, 1), (1, 1), 3, True, "silu"),          # groups of 3 rows, 2 images
    ((1, 37, 1, 1), (5, 37, 1, 1), (1, 1), (0, 0), (1, 1), 1, True, "gelu"),        # one pixel, a partial vector
    ((1, 10, 1, 5), (7, 10, 1, 3), (1, 1), (0, 1), (1, 1), 1, True, "gelu_tanh"),   # 5 pixels: 4 + 1
    ((1, 512, 1, 4), (256, 512, 1, 3), (1, 1), (0, 1), (1, 1), 1, True, None),     # split between threads
    ((1, 6, 1, 6), (11, 6, 1, 3), (1, 1), (0, 2), (1, 2), 1, True, "silu"),        # dilated taps past both edges
    ((1, 3, 3, 3), (5, 3, 3, 3), (2, 2), (2, 2), (2, 2), 1, True, None),            # 2 x 2 pixels, dilated, padded
    # a few units of many channels: cut by blocks of output channels too (channel blocks summed in the accumulator)
    ((1, 72, 12, 12), (136, 72, 3, 3), (1, 1), (1, 1), (1, 1), 1, True, "silu"),
    # pointwise, stride 1, unpadded, pixels a whole number of vectors: x read in place, sums kept in y (300 channels:
    # two blocks); 72 pixels: whole 8-lane vectors, not 16-lane ones (the planes there, the same bits)
    ((2, 300, 8, 16), (20, 300, 1, 1), (1, 1), (0, 0), (1, 1), 1, True, "silu"),
    ((1, 24, 6, 12), (10, 24, 1, 1), (1, 1), (0, 0), (1, 1), 1, True, "relu"),
    ((1, 8, 9, 10), (6, 8, 3, 1), (1, 1), (1, 0), (1, 1), 1, True, None),            # one column wide: y's pixels
    # stride 2: both column phases of a row in one pass, padding 0 / 1 / 2 and odd widths leaving edge columns
    ((1, 5, 11, 13), (4, 5, 3, 3), (2, 2), (0, 0), (1, 1), 1, True, "silu"),
    ((1, 3, 10, 9), (6, 3, 5, 5), (2, 2), (2, 2), (1, 1), 1, False, None),
    ((1, 2, 4, 3), (3, 2, 3, 3), (2, 2), (1, 1), (1, 1), 1, True, "relu"),
    # stride 1, 3 taps wide, as wide as the input: AVX-512's masked tiles natively (rows without padding columns),
    # the AVX2 build's padded rows: the same bits. 5 x 3 over rows of 7 (several rows a tile, two images), 1 x 3
    ((2, 7, 9, 7), (5, 7, 5, 3), (1, 1), (1, 1), (1, 1), 1, True, "relu"),
    ((1, 4, 3, 40), (6, 4, 1, 3), (1, 1), (0, 1), (1, 1), 1, True, None),
    ((1, 5, 20, 2), (4, 5, 3, 3), (1, 1), (1, 1), (1, 1), 1, True, "silu"),         # rows of 2: both taps outside
]


def _conv_case(i):
    xs, ws, stride, padding, dilation, groups, bias, act = CONV_CASES[i]
    x, w = rnd(*xs, seed=10 + i), rnd(*ws, seed=40 + i, scale=0.5)
    return x, w, (rnd(ws[0], seed=70 + i) if bias else None), stride, padding, dilation, groups, act


@pytest.mark.parametrize("case", range(len(CONV_CASES)))
def test_conv_matches_float64_on_every_build(builds, case):
    x, w, b, stride, padding, dilation, groups, act = _conv_case(case)
    want, bound = conv_reference(x, w, b, stride, padding, dilation, groups, act)
    got = {}
    for tag, (fk, nk) in builds.items():
        _threads(nk, 1)
        got[tag] = fk.conv2d(x, w, b, stride, padding, dilation, groups, act)
        assert got[tag].shape == want.shape, tag
        err = np.abs(got[tag] - want)
        assert np.all(err <= bound), (tag, float((err / bound).max()))
    # SSSE3 and plain C both multiply then add, in the same order: the same bits
    assert np.array_equal(got["ssse3"], got["scalar"], equal_nan=True)
    # the native build (16-lane tiles where it has AVX-512) and plain AVX2 both fuse: the same chains, the same bits
    if "avx2" in got:
        assert np.array_equal(got["native"], got["avx2"], equal_nan=True)


@pytest.mark.parametrize("case", [1, 3, 7, 9, 16, 17, 18, 21])
def test_conv_threads_do_not_change_bits(builds, case):
    fk, nk = builds["native"]
    x, w, b, stride, padding, dilation, groups, act = _conv_case(case)
    _threads(nk, 1)
    one = fk.conv2d(x, w, b, stride, padding, dilation, groups, act)
    for n in (2, 3, 5):
        _threads(nk, n)
        assert np.array_equal(fk.conv2d(x, w, b, stride, padding, dilation, groups, act), one, equal_nan=True), n
    _threads(nk, 1)


def test_conv_plans_keep_each_calls_arrays_across_weights_and_python_threads(builds):
    """A conv plan (one per shapes) keeps the weights' addresses while the same arrays come and its own parameter
    block for the thread that made it: calls alternating two weight sets, and four Python threads calling at once
    (the kernel runs without the GIL), each get the answer of their own arrays; a 1-D conv (3-D arrays) is the
    conv2d of one row."""
    import threading
    fk, nk = builds["native"]
    _threads(nk, 1)
    x = [rnd(1, 16, 9, 11, seed=s) for s in range(4)]
    w = [rnd(24, 16, 3, 3, seed=10 + s, scale=0.3) for s in range(2)]
    b = [rnd(24, seed=20 + s) for s in range(2)]
    args = ((1, 1), (1, 1), (1, 1), 1, "relu")
    want = {(i, j): fk.conv2d(x[i], w[j], b[j], *args).copy() for i in range(4) for j in range(2)}
    for _ in range(3):  # the kept addresses follow the arrays handed in
        for j in (0, 1, 1, 0):
            assert np.array_equal(fk.conv2d(x[0], w[j], b[j], *args), want[0, j])
    wrong = []

    def calls(i):
        for k in range(200):
            j = (i + k) % 2
            if not np.array_equal(fk.conv2d(x[i], w[j], b[j], *args), want[i, j]):
                wrong.append((i, k))
    threads = [threading.Thread(target=calls, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong, wrong[:5]
    x1, w1 = rnd(2, 5, 40, seed=30), rnd(7, 5, 4, seed=31)
    y1 = fk.conv2d(x1, w1, b[0][:7], (3,), (2,), (2,), 1, None)
    y2 = fk.conv2d(x1[:, :, None], w1[:, :, None], b[0][:7], (1, 3), (0, 2), (1, 2), 1, None)
    assert y1.shape == (2, 7, y2.shape[3]) and np.array_equal(y1, y2[:, :, 0])


def test_conv_bias_act_op_against_its_composed_form():
    """The registry op on the CPU (C where its rule chooses it, im2col + BLAS elsewhere, either forced) against
    conv_bias_act_composed in Tensor ops (Winograd's where the rule takes it: within its own bound)."""
    from ember.backends import cpu_dense
    from ember.nn.functional import conv_bias_act_composed, conv_act
    be = ember.tensor([0.0]).device.backend
    winograd = 0
    for i in range(len(CONV_CASES)):
        x, w, b, stride, padding, dilation, groups, act = _conv_case(i)
        ex, ew, eb = ember.tensor(x), ember.tensor(w), None if b is None else ember.tensor(b)
        with ember.no_grad():
            ref = conv_bias_act_composed(ex, ew, eb, stride, padding, dilation, groups, act).numpy()
            _, bound = conv_reference(x, w, b, stride, padding, dilation, groups, act)
            for mode in ("c", "blas", "auto"):
                with K.tuned("conv_bias_act", "cpu", mode=mode):
                    got = conv_act(ex, ew, eb, stride, padding, dilation, groups, act).numpy()
                    wino = cpu_dense._takes_c(be, x.shape, w.shape, stride, dilation, groups, padding) == "winograd"
                winograd += wino
                assert np.all(np.abs(got - ref) <= (64 if wino else 2) * bound), (i, mode)
    assert winograd == (2 if CFK.kernels() is not None else 0)  # (cases 9 and 19)


def test_conv_rule_takes_c_for_wide_kernels_narrow_outputs_large_maps_and_1x1_and_blas_for_1d():
    from ember.backends import cpu_matmul
    be = ember.tensor([0.0]).device.backend
    if CFK.kernels() is None:
        pytest.skip("no compiled kernels here")
    assert K.chooses("conv_bias_act", be, (1, 64, 56, 56), (64, 64, 3, 3), (1, 1), (1, 1), 1)
    # a plain 1x1 natively: gemm_native.c where this build has it (else BLAS below YOLO's 160 x 160 maps)
    gemm = cpu_matmul.native_kernels() is not None and cpu_matmul.native_kernels().sgemm_width > 0
    assert K.chooses("conv_bias_act", be, (1, 64, 56, 56), (32, 64, 1, 1), (1, 1), (1, 1), 1) == gemm
    assert not K.chooses("conv_bias_act", be, (1, 64, 56, 56), (32, 64, 1, 1), (2, 2), (1, 1), 1)
    assert not K.chooses("conv_bias_act", be, (1, 64, 56, 56), (32, 32, 1, 1), (1, 1), (1, 1), 2)  # (groups: BLAS)
    # 1x1 over a large map (YOLOv8s's 160 x 160): C, which reads x in place with the activation in its epilogue
    assert K.chooses("conv_bias_act", be, (1, 64, 160, 160), (64, 64, 1, 1), (1, 1), (1, 1), 1, (0, 0))
    assert not K.chooses("conv_bias_act", be, (1, 64, 160, 160), (64, 64, 1, 1), (2, 2), (1, 1), 1, (0, 0))
    assert not K.chooses("conv_bias_act", be, (1, 80, 3000), (384, 80, 3), (1,), (1,), 1)
    # a few output pixels (a streaming model's frames): C's dot products, whatever the kernel
    assert K.chooses("conv_bias_act", be, (1, 129, 3), (128, 129, 3), (1,), (1,), 1, (1,))
    assert K.chooses("conv_bias_act", be, (1, 64, 4, 2), (32, 64, 1, 1), (1, 1), (1, 1), 1, (0, 0))
    assert not K.chooses("conv_bias_act", be, (1, 129, 9), (128, 129, 3), (1,), (1,), 1, (1,))
    with K.tuned("conv_bias_act", "cpu", mode="c"):
        assert K.chooses("conv_bias_act", be, (1, 80, 3000), (384, 80, 3), (1,), (1,), 1)



# Winograd F(4x4, 3x3): x (N, C, H, W), O, padding, bias, act — sizes that leave partial tiles in both axes, one
# tile, several images, padding 0 / 1 / 2 (mixed), tiles an image not a multiple of the products' vectors, and
# channels past a block of the products
WINO_CASES = [
    ((1, 3, 7, 9), 5, (1, 1), True, None),
    ((2, 16, 13, 11), 24, (1, 1), True, "silu"),
    ((1, 8, 4, 4), 8, (0, 0), False, "relu"),
    ((1, 9, 10, 6), 7, (2, 0), True, "gelu"),
    ((1, 40, 22, 37), 33, (1, 1), True, "silu"),
    ((1, 64, 20, 20), 64, (1, 2), False, "gelu_tanh"),
    ((2, 300, 6, 9), 36, (1, 1), True, None),
]


def _wino_case(i):
    xs, o, padding, bias, act = WINO_CASES[i]
    x, w = rnd(*xs, seed=110 + i), rnd(o, xs[1], 3, 3, seed=140 + i, scale=0.5)
    return x, w, (rnd(o, seed=170 + i) if bias else None), padding, act


@pytest.mark.parametrize("case", range(len(WINO_CASES)))
def test_winograd_conv_matches_float64_on_every_build(builds, case):
    """conv_winograd.c's F(4x4, 3x3) against float64 on every build, within its own rounding bound: its
    transforms scale a tile's values by up to 100 (B's 4 and 5, A's 8) before the products round, so the bound
    is 64x the direct conv's; the builds that fuse agree bit for bit (AVX2's and AVX-512's, gemm_native.c's
    products and conv.c's tile, the page's), as do those that do not, and no thread count changes a bit."""
    from ember.backends.cpu_dense import winograd_weight
    x, w, b, padding, act = _wino_case(case)
    want, bound = conv_reference(x, w, b, (1, 1), padding, (1, 1), 1, act)
    u = winograd_weight(w)
    got = {}
    for tag, (fk, nk) in builds.items():
        _threads(nk, 1)
        got[tag] = fk.conv3x3_winograd(x, u, b, padding, act)
        assert got[tag].shape == want.shape, tag
        err = np.abs(got[tag] - want)
        assert np.all(err <= 64 * bound), (tag, float((err / bound).max()))
        assert np.array_equal(fk.conv3x3_winograd(x, u, b, padding, act, tile_products=True), got[tag]), tag
        for n in (2, 3):
            _threads(nk, n)
            assert np.array_equal(fk.conv3x3_winograd(x, u, b, padding, act), got[tag]), (tag, n)
        _threads(nk, 1)
    assert np.array_equal(got["ssse3"], got["scalar"], equal_nan=True)
    if "avx2" in got:
        assert np.array_equal(got["native"], got["avx2"], equal_nan=True)


def test_winograd_conv_refuses_paddings_and_shapes_it_does_not_take(builds):
    """A padding past conv.c's 2, a negative one, an output of no pixels or a transform of the wrong shape: ember's
    error naming them, before any output is allocated (a negative size would be numpy's error)."""
    from ember.backends.cpu_dense import winograd_weight
    x, u = rnd(1, 4, 6, 6, seed=5), winograd_weight(rnd(8, 4, 3, 3, seed=6))
    fk = next(iter(builds.values()))[0]
    assert fk.conv3x3_winograd(x, u, None, (2, 2)).shape == (1, 8, 8, 8)
    for xs, uu, padding in ((x, u, (3, 0)), (x, u, (-1, 1)), (rnd(1, 4, 1, 6, seed=7), u, (0, 0)),
                            (rnd(1, 4, 2, 2, seed=8), u, (-2, -2)), (x, u[:, :, :3], (1, 1))):
        with pytest.raises(ValueError, match=r"ember: conv3x3_winograd kernel: parameters it does not take"):
            fk.conv3x3_winograd(xs, uu, None, padding)


def test_winograd_weight_is_g_w_g_transposed():
    """winograd_weight against G w G^T in float64 matrix products (Lavin & Gray's G for F(4x4, 3x3)), rounded once."""
    from ember.backends.cpu_dense import winograd_weight
    g = np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6], [1 / 24, 1 / 12, 1 / 6],
                  [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]])
    w = rnd(5, 7, 3, 3, seed=3)
    want = np.einsum("ak,ockl,il->aioc", g, w.astype(np.float64), g).reshape(36, 5, 7)
    got = winograd_weight(w)
    assert got.dtype == np.float32 and got.shape == (36, 5, 7)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_conv_rule_takes_winograd_for_3x3_stride_1_convs_of_many_channels():
    from ember.backends import cpu_dense
    if CFK.kernels() is None:
        pytest.skip("no compiled kernels here")
    be = ember.tensor([0.0]).device.backend
    wino = lambda *a: cpu_dense._takes_c(be, *a) == "winograd"  # noqa: E731
    assert wino((1, 64, 80, 80), (64, 64, 3, 3), (1, 1), (1, 1), 1, (1, 1))
    assert wino((1, 32, 160, 160), (32, 32, 3, 3), (1, 1), (1, 1), 1, (1, 1))
    assert not wino((1, 16, 160, 160), (16, 16, 3, 3), (1, 1), (1, 1), 1, (1, 1))     # too few channels
    assert not wino((1, 64, 80, 80), (64, 64, 3, 3), (2, 2), (1, 1), 1, (1, 1))       # stride 2
    assert not wino((1, 64, 80, 80), (64, 64, 3, 3), (1, 1), (2, 2), 1, (2, 2))       # dilated
    assert not wino((1, 64, 80, 80), (64, 32, 3, 3), (1, 1), (1, 1), 2, (1, 1))       # groups
    assert not wino((1, 64, 80, 80), (64, 64, 5, 5), (1, 1), (1, 1), 1, (2, 2))       # 5x5
    assert not wino((1, 64, 3, 3), (64, 64, 3, 3), (1, 1), (1, 1), 1, (1, 1))         # a 3 x 3 output
    with K.tuned("conv_bias_act", "cpu", winograd_channels=0):
        assert not wino((1, 64, 80, 80), (64, 64, 3, 3), (1, 1), (1, 1), 1, (1, 1))
    with K.tuned("conv_bias_act", "cpu", mode="c"):  # (the direct conv, forced)
        assert cpu_dense._takes_c(be, (1, 64, 80, 80), (64, 64, 3, 3), (1, 1), (1, 1), 1, (1, 1)) is True
    # the op on Tensors takes it, within its bound of the direct conv's answer
    x, w, b = rnd(1, 40, 22, 37, seed=1), rnd(33, 40, 3, 3, seed=2, scale=0.5), rnd(33, seed=3)
    want, bound = conv_reference(x, w, b, (1, 1), (1, 1), (1, 1), 1, "silu")
    got = cpu_dense.conv_bias_act(be, x, w, b, (1, 1), (1, 1), (1, 1), 1, "silu")
    assert np.all(np.abs(got - want) <= 64 * bound)
    with K.tuned("conv_bias_act", "cpu", winograd_channels=1):
        assert not np.array_equal(cpu_dense.conv_bias_act(be, x, w, b, (1, 1), (1, 1), (1, 1), 1, "silu"),
                                  CFK.kernels().conv2d(x, w, b, (1, 1), (1, 1), (1, 1), 1, "silu"))


@pytest.mark.parametrize("n, c, o, h, w, act", [(1, 96, 64, 12, 20, "silu"), (2, 40, 24, 7, 9, None),
                                                (1, 33, 17, 5, 5, "relu"), (1, 512, 48, 4, 4, "gelu")])
def test_plain_1x1_conv_natively_gives_the_page_kernels_bits(n, c, o, h, w, act):
    """A plain 1x1 conv natively (gemm_native.c, the bias and activation in its epilogue) against conv.c's tile
    on the same input, which the page runs: the same bits (one multiply-add chain over the channels, then
    act(y + b)); with and without a bias, several images, and x a strided view."""
    from ember.backends import cpu_dense, cpu_matmul
    kern, fk = cpu_matmul.native_kernels(), CFK.kernels()
    assert kern is not None and fk is not None, "native kernels are built in CI"
    if not kern.sgemm_width:
        pytest.skip("this build has no gemm_native.c kernel (no AVX2 + FMA)")
    be = ember.tensor([0.0]).device.backend
    big = rnd(n, c + 3, h, w, seed=c)
    x = big[:, 3:]  # (a view: each image's channels still one block)
    wt, b = rnd(o, c, 1, 1, seed=o, scale=0.2), rnd(o, seed=h)
    for bias in (b, None):
        want = fk.conv2d(np.ascontiguousarray(x), wt, bias, (1, 1), (0, 0), (1, 1), 1, act)
        got = cpu_dense.conv_bias_act(be, x, wt, bias, (1, 1), (0, 0), (1, 1), 1, act)
        assert got.shape == want.shape and np.array_equal(got, want), (bias is None, np.abs(got - want).max())


def test_1x1_conv_over_parts_gives_the_concatenations_bits():
    """conv_cat_act natively (gemm_native.c reading each part's rows where they lie) against conv_bias_act on the
    parts' concatenation: the same bits, for views of one array, a part whose pixels are not contiguous, two
    images; it declines what it does not take (the caller composes)."""
    from ember.backends import cpu_dense, cpu_matmul
    kern = cpu_matmul.native_kernels()
    assert kern is not None and CFK.kernels() is not None, "native kernels are built in CI"
    if not kern.sgemm_width:
        pytest.skip("this build has no gemm_native.c kernel (no AVX2 + FMA)")
    be = ember.tensor([0.0]).device.backend
    y = rnd(2, 300, 9, 13, seed=3)  # (more channels than one of the kernel's blocks of 256)
    odd = np.ascontiguousarray(rnd(2, 9, 13, 7, seed=4).transpose(0, 3, 1, 2))  # (2, 7, 9, 13)
    strided = rnd(2, 6, 9, 26, seed=5)[:, :, :, ::2]  # pixels two floats apart: copied
    parts = [y[:, :150], y[:, 150:], odd, strided]
    b = rnd(24, seed=7)
    for rows in (24, 5):  # (several blocks of the weight's rows, and fewer than one)
        w = rnd(rows, 313, 1, 1, seed=rows, scale=0.1)
        for act, bias in (("silu", b[:rows]), (None, None), ("gelu", b[:rows])):
            got = cpu_dense.conv_cat_act(be, parts, w, bias, act)
            want = cpu_dense.conv_bias_act(be, np.concatenate(parts, 1), w, bias, (1, 1), (0, 0), (1, 1), 1, act)
            assert got is not None and np.array_equal(got, want), (rows, act)
    assert cpu_dense.conv_cat_act(be, parts, w[:, :310], None, "silu") is None  # (channels do not add up)
    assert cpu_dense.conv_cat_act(be, parts, rnd(24, 313, 3, 3, seed=8), b, "silu") is None  # (not a 1x1)

# ------------------------------------------------------------------------------------------ attention

def attention_reference(q, k, v, mask, scale, causal):
    s = np.einsum("...ld,...sd->...ls", q.astype(np.float64), k.astype(np.float64)) * scale
    if causal:
        L, S = s.shape[-2:]
        s = np.where(np.tril(np.ones((L, S), bool)), s, -np.inf)
    if mask is not None:
        s = s + mask
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    mag = np.einsum("...ls,...sd->...ld", p, np.abs(v).astype(np.float64))
    return p @ v.astype(np.float64), 64 * EPS * (mag + np.abs(q).max() * np.abs(k).max() * q.shape[-1] * mag) + 1e-6


# (B1, B2, L, S, D, Dv), mask kind, causal: one query row (decoding), key counts around the 192-key blocks and
# 8-key vectors, heads of 8..128, values narrower or wider than keys
ATTN_CASES = [
    ((1, 2, 1, 5, 16, 16), None, False), ((1, 3, 7, 9, 8, 24), "add", False), ((2, 2, 40, 40, 32, 32), None, True),
    ((1, 6, 70, 1500, 64, 64), None, False), ((1, 1, 33, 193, 80, 40), "add", True),
    ((1, 4, 100, 385, 128, 128), "rows", False), ((2, 1, 3, 200, 48, 16), None, False),
]


def _attn_case(i, strided=False):
    (b1, b2, l, s, d, dv), mask, causal = ATTN_CASES[i]
    q, k, v = rnd(b1, b2, l, d, seed=100 + i), rnd(b1, b2, s, d, seed=110 + i), rnd(b1, b2, s, dv, seed=120 + i)
    if strided:  # the same values as heads of (batch, seq, heads, head_dim) projections, as attention.py passes them
        q, k, v = (np.ascontiguousarray(a.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3) for a in (q, k, v))
    m = None
    if mask == "add":
        m = np.where(rnd(l, s, seed=130 + i) > 1.5, -np.inf, rnd(l, s, seed=140 + i)).astype(np.float32)
        m[:, 0] = 0  # every row keeps a key
    elif mask == "rows":  # (B1, 1, 1, S) padding mask, broadcast over heads and rows
        m = np.zeros((b1, 1, 1, s), np.float32)
        m[..., s - 7:] = -np.inf
    return q, k, v, m, d ** -0.5, causal


@pytest.mark.parametrize("case", range(len(ATTN_CASES)))
def test_attention_matches_float64_on_every_build(builds, case):
    q, k, v, m, scale, causal = _attn_case(case, strided=case % 2 == 1)
    want, bound = attention_reference(q, k, v, m, scale, causal)
    got = {}
    for tag, (fk, nk) in builds.items():
        _threads(nk, 1)
        got[tag] = fk.attention(q, k, v, m, scale, causal)
        err = np.abs(got[tag] - want)
        assert np.all(err <= bound), (tag, float((err / bound).max()))
    assert np.array_equal(got["ssse3"], got["scalar"])
    if "avx2" in got:  # AVX-512's 16-lane tiles and weights give AVX2's bits (both fuse alike)
        assert np.array_equal(got["native"], got["avx2"])


def test_attention_threads_and_layouts_do_not_change_bits(builds):
    fk, nk = builds["native"]
    for case in (3, 5):
        _threads(nk, 1)
        one = fk.attention(*_attn_case(case))
        assert np.array_equal(fk.attention(*_attn_case(case, strided=True)), one)
        for n in (2, 3):
            _threads(nk, n)
            assert np.array_equal(fk.attention(*_attn_case(case)), one), (case, n)
    _threads(nk, 1)


def test_attention_op_against_its_composed_form():
    """The registry's attention on the CPU (the C kernel past tune["min_scores"], forced either way) against
    attention_composed in Tensor ops."""
    from ember.nn.functional import attention_composed
    be = ember.tensor([0.0]).device.backend
    for case in range(len(ATTN_CASES)):
        q, k, v, m, scale, causal = _attn_case(case)
        t = [ember.tensor(a) for a in (q, k, v)]
        tm = None if m is None else ember.tensor(m)
        with ember.no_grad():
            ref = attention_composed(*t, tm, scale, causal).numpy()
            _, bound = attention_reference(q, k, v, m, scale, causal)
            for mode in ("c", "numpy"):
                with K.tuned("attention", "cpu", mode=mode):
                    got = K.bound("attention", be)(q, k, v, m, scale, causal)
                assert np.all(np.abs(got - ref) <= 2 * bound), (case, mode)


# ------------------------------------------------------------------------------------------ rows

def test_row_kernels_match_float64_and_agree_bitwise_everywhere(builds):
    x = rnd(37, 384, seed=150, scale=3)
    x[3, 5], x[4, :] = np.inf, 0.0
    w, b = rnd(384, seed=151), rnd(384, seed=152)
    xs = rnd(4, 7, 29, seed=153, scale=4)  # odd widths: the vector tail
    cb = rnd(7, seed=154)
    # exp's edges: where its 2^m reaches 2^128 (x from 88.376) and its input is held (88.72, -87.34), for SiLU's
    # exp(-x) and tanh's exp(2|x|); NaN, infinities, zeros, subnormals (AVX-512 scales by 2^m in one instruction)
    near = [t + d for t in (88.3762, 88.7228, 87.3365, 44.1881, 44.3614) for d in np.linspace(-0.01, 0.01, 41)]
    edges = np.array(near + [-v for v in near] + [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -1e-40, 1e30, -1e30],
                     np.float32).reshape(1, -1)
    got = {}
    for tag, (fk, nk) in builds.items():
        for n in (1, 3):
            _threads(nk, n)
            out = {"ln": fk.layer_norm(x[5:], w, b, 1e-5), "ln_plain": fk.layer_norm(x[5:, :200], None, None, 1e-6),
                   "bias_gelu": fk.bias_act(x, b, "gelu")}
            for act in ("gelu", "gelu_tanh", "silu", "relu"):
                out[act] = fk.bias_act(xs, None, act)
                out["edges_" + act] = fk.bias_act(edges, None, act)
            out["channel_bias_silu"] = fk.bias_act(xs, cb, "silu", channels=7)
            if tag in got:
                for key, val in out.items():
                    assert np.array_equal(val, got[tag][key], equal_nan=True), (tag, key, n)
            got[tag] = out
    for tag in ("ssse3", "scalar"):
        for key in got["native"]:
            assert np.array_equal(got[tag][key], got["native"][key], equal_nan=True), (tag, key)
    r = got["native"]
    x64 = x[5:].astype(np.float64)
    ln = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-5) * w + b
    np.testing.assert_allclose(r["ln"], ln, rtol=1e-5, atol=1e-5)
    x2 = x[5:, :200].astype(np.float64)
    np.testing.assert_allclose(r["ln_plain"], (x2 - x2.mean(-1, keepdims=True)) / np.sqrt(x2.var(-1, keepdims=True)
                                                                                          + 1e-6), rtol=1e-5, atol=1e-5)
    finite = np.isfinite(x)
    np.testing.assert_allclose(r["bias_gelu"][finite], _act64(x.astype(np.float64) + b, "gelu")[finite], atol=2e-6, rtol=2e-6)
    assert r["bias_gelu"][3, 5] == np.inf
    for act in ("gelu", "gelu_tanh", "silu", "relu"):
        np.testing.assert_allclose(r[act], _act64(xs.astype(np.float64), act), rtol=2e-6, atol=2e-6)
    np.testing.assert_allclose(r["channel_bias_silu"], _act64(xs.astype(np.float64) + cb[:, None], "silu"),
                               rtol=2e-6, atol=2e-6)



def test_row_kernels_threads_do_not_change_bits(builds):
    """Rows enough to be split between threads (parallel.h cuts a job of this size into several chunks)."""
    fk, nk = builds["native"]
    x, w, b = rnd(300, 384, seed=160, scale=3), rnd(384, seed=161), rnd(384, seed=162)
    _threads(nk, 1)
    one = fk.layer_norm(x, w, b, 1e-5), fk.bias_act(x, b, "gelu")
    for n in (2, 3):
        _threads(nk, n)
        assert np.array_equal(fk.layer_norm(x, w, b, 1e-5), one[0]), n
        assert np.array_equal(fk.bias_act(x, b, "gelu"), one[1]), n
    _threads(nk, 1)

# ------------------------------------------------------------------------------------------ feature maps

# x (N, C, H, W), kernel, stride, pads (top, left), dilation, output size: YOLO's SPPF pool; a stride-2 pool whose
# last windows reach past the input (ceil mode); dilation, a wider stride, a window partly in the padding; planes
# enough to be split between threads
POOL_CASES = [((2, 3, 11, 13), (5, 5), (1, 1), (2, 2), (1, 1), (11, 13)),
              ((1, 2, 9, 10), (3, 3), (2, 2), (1, 0), (1, 1), (5, 5)),
              ((1, 4, 12, 17), (2, 3), (1, 3), (0, 1), (2, 2), (10, 6)),
              ((1, 64, 20, 37), (5, 5), (1, 1), (2, 2), (1, 1), (20, 37))]


def _pool_reference(x, kernel, stride, pads, dilation, out):
    """Each window's max in a Python loop over its in-bounds taps (-inf where it has none, NaN where it holds one)."""
    n, c, h, w = x.shape
    y = np.full((n, c, *out), -np.inf, np.float32)
    for oh in range(out[0]):
        for ow in range(out[1]):
            for i in range(kernel[0]):
                for j in range(kernel[1]):
                    ih, iw = oh * stride[0] - pads[0] + i * dilation[0], ow * stride[1] - pads[1] + j * dilation[1]
                    if 0 <= ih < h and 0 <= iw < w:
                        v = x[:, :, ih, iw]
                        y[:, :, oh, ow] = np.where(np.isnan(v) | (v > y[:, :, oh, ow]), v, y[:, :, oh, ow])
    return y


@pytest.mark.parametrize("case", range(len(POOL_CASES)))
def test_max_pool_and_upsampling_are_exact_on_every_build(builds, case):
    """maps.c: a max and a copy are exact, so every build and thread count gives the reference's values (NaN
    where a window holds one) and nearest upsampling gives numpy's repeat."""
    shape, kernel, stride, pads, dilation, out = POOL_CASES[case]
    x = rnd(*shape, seed=180 + case)
    x[0, -1, shape[2] // 2, shape[3] // 3] = np.nan
    want = _pool_reference(x, kernel, stride, pads, dilation, out)
    up = np.repeat(np.repeat(x, 2, 2), 3, 3)
    for tag, (fk, nk) in builds.items():
        for n in (1, 2, 3):
            _threads(nk, n)
            np.testing.assert_array_equal(fk.max_pool2d(x, kernel, stride, pads, dilation, out), want, err_msg=tag)
            np.testing.assert_array_equal(fk.upsample_nearest(x, (2, 3)), up, err_msg=tag)
        _threads(nk, 1)


def test_concatenations_of_whole_blocks_copy_exactly_on_any_thread_count(builds):
    """maps.c's span copy (the CPU backend's cat of blocks: dims before the axis all 1), chunks crossing the inputs'
    ends, against numpy's concatenate; and the backend's cat takes it for big ones, any axis sign."""
    r = np.random.default_rng(190)
    xs = [r.standard_normal((1, c, 67, 129)).astype(np.float32) for c in (5, 1, 40, 3)]
    ints = [r.integers(0, 9, (1, 1, n), dtype=np.int64) for n in (70001, 3, 90000)]
    for tag, (_, nk) in builds.items():
        for n in (1, 2, 3):
            _threads(nk, n)
            assert np.array_equal(nk.cat(xs, 1), np.concatenate(xs, 1)), (tag, n)
            assert np.array_equal(nk.cat(ints, 2), np.concatenate(ints, 2)), (tag, n)
        _threads(nk, 1)
    be = ember.tensor([0.0]).device.backend
    assert np.array_equal(be.cat(xs, -3), np.concatenate(xs, 1))
    assert np.array_equal(be.cat([x[0] for x in xs], 0), np.concatenate([x[0] for x in xs], 0))


# ------------------------------------------------------------------------------------------ float matvec

def test_input_major_matvec_is_the_plain_loop_on_every_build(builds):
    """matvec_f32.h (the decode steps' and LM heads' float32 products): y = sum_i x[i] W^T[i] in input order, a
    multiply then an add each, so numpy's float32 loop gives its bits whichever width computes them (AVX-512's 16
    lanes, 8, and the 8-wide and scalar tails); float16 weights give the same sums of their float values."""
    k, n = 64, 300  # outputs: 18 vectors of 16, then one of 8, then 4 alone
    x, wt = rnd(k, seed=170), rnd(k, n, seed=171)
    w16 = wt.astype(np.float16)
    want, want16 = np.zeros(n, np.float32), np.zeros(n, np.float32)
    for i in range(k):
        want = want + x[i] * wt[i]
        want16 = want16 + x[i] * w16[i].astype(np.float32)
    for tag, (_, nk) in builds.items():
        _threads(nk, 1)
        assert np.array_equal(nk.matvec_f32(x, wt), want), tag
        assert np.array_equal(nk.matvec_f16(x, w16), want16), tag


# ------------------------------------------------------------------------------------------ the page

def test_the_page_runs_the_same_kernels(builds, pyodide_session):
    """The wasm build of the same sources: the row kernels give native's bits; conv and attention, whose page
    module multiplies then adds, give the SSSE3 build's bits (the relaxed module, where an engine has one, fuses
    them as native FMA does)."""
    code = '''
import numpy as np
from ember.backends import cpu_float_kernels as CFK, cpu_matmul
from ember.backends.cpu_dense import winograd_weight
def rnd(*shape, seed=0, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)
fk = CFK.kernels()
x, w, b = rnd(1, 24, 20, 37, seed=1), rnd(33, 24, 3, 3, seed=2, scale=0.5), rnd(33, seed=3)
q, k, v = rnd(1, 4, 100, 64, seed=4), rnd(1, 4, 385, 64, seed=5), rnd(1, 4, 385, 32, seed=6)
xs = rnd(37, 384, seed=7, scale=3)
xn, wn = rnd(1, 129, 1, 3, seed=10), rnd(20, 129, 1, 3, seed=11, scale=0.5)  # a narrow output: dot products
xb, wb = rnd(1, 40, 9, 9, seed=12), rnd(72, 40, 3, 3, seed=13, scale=0.5)     # one unit: blocks of channels
# strided, on gemm.c in the page: 2 images, 2 groups of 40 channels, 37 outputs (a partial panel of gemm.c's)
xg, wg = rnd(2, 80, 13, 17, seed=14), rnd(74, 40, 3, 3, seed=15, scale=0.5)
# exp's edges: its clamps (-87.34, 88.72), 2^m at m = -126 .. 128, subnormal inputs, +inf; a row of 10 vectors
edges = np.concatenate([np.linspace(-130, 130, 2003), [-87.3365448, -87.3365, 88.7228390, 88.72284, 88.8, 1e-40, -1e-40,
                                                       np.inf, 0.0, -0.0]]).astype(np.float32)
edges = np.concatenate([edges, np.zeros(-edges.size % 80, np.float32)]).reshape(-1, 80)
out = {"conv": fk.conv2d(x, w, b, (1, 1), (1, 1), (1, 1), 1, "silu"),
       "conv_s2": fk.conv2d(x, w, None, (2, 2), (1, 1), (1, 1), 1, "gelu"),
       "conv_narrow": fk.conv2d(xn, wn, b[:20], (1, 1), (0, 1), (1, 1), 1, "relu"),
       "conv_blocks": fk.conv2d(xb, wb, None, (1, 1), (1, 1), (1, 1), 1, "silu"),
       "conv_s2_groups": fk.conv2d(xg, wg, rnd(74, seed=16), (2, 2), (1, 1), (1, 1), 2, "silu"),
       # one output channel: the page's strided convs on gemm.c need two (its row-vector path): the tiles then
       "conv_s2_one": fk.conv2d(xb, wb[:1].copy(), None, (2, 2), (1, 1), (1, 1), 1, "gelu"),
       # pointwise (the page's micro-kernel on w's rows): 37 outputs; 300 channels in two blocks over 24 pixels
       "conv_1x1": fk.conv2d(xb, rnd(37, 40, 1, 1, seed=17), rnd(37, seed=20), (1, 1), (0, 0), (1, 1), 1, "silu"),
       "conv_1x1_blocks": fk.conv2d(rnd(1, 300, 4, 6, seed=18), rnd(21, 300, 1, 1, seed=19, scale=0.2), None, (1, 1),
                                    (0, 0), (1, 1), 1, "gelu"),
       "conv_winograd": fk.conv3x3_winograd(x, winograd_weight(w), b, (1, 1), "silu"),
       "attn": fk.attention(q, k, v, None, 0.125, False), "attn_causal": fk.attention(q, k, v, None, 0.125, True),
       "ln": fk.layer_norm(xs, rnd(384, seed=8), rnd(384, seed=9), 1e-5), "gelu": fk.bias_act(xs, None, "gelu"),
       "silu_edges": fk.bias_act(edges, None, "silu"), "gelu_edges": fk.bias_act(edges * 0.1, None, "gelu"),
       "conv_edges": fk.conv2d(edges.reshape(1, 1, -1, 80), np.ones((1, 1, 1, 1), np.float32), None, (1, 1), (0, 0),
                               (1, 1), 1, "silu"),
       "pool": fk.max_pool2d(x, (5, 5), (1, 1), (2, 2), (1, 1), (20, 37)), "up": fk.upsample_nearest(x, (2, 2))}
result = {"path": cpu_matmul.matmul_path(), "native": fk.native,
          "out": {key: val.tobytes().hex() for key, val in out.items()}}
'''
    got = pyodide_session.run(code, timeout=300)["result"]
    assert got["native"] is False
    ns = {"FK": builds["ssse3"][0]}
    exec(code.replace("fk = CFK.kernels()", "fk = FK").replace("result = {", "_result = {"), ns)
    relaxed = "relaxed" in got["path"] and "no relaxed" not in got["path"]
    for key, hexed in got["out"].items():
        page = np.frombuffer(bytes.fromhex(hexed), np.float32)
        want = np.frombuffer(bytes.fromhex(ns["_result"]["out"][key]), np.float32)
        if key in ("ln", "gelu", "pool", "up", "silu_edges", "gelu_edges", "conv_edges") or not relaxed:
            assert np.array_equal(page, want), key
        else:
            np.testing.assert_allclose(page, want, rtol=1e-5, atol=1e-5)
